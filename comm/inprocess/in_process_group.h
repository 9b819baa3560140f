// InProcessWorld: N ranks of collectives inside one process, one thread each.
//
//   InProcessWorld world(4);
//   // On thread r: *world.group(r) is rank r's ProcessGroup.
//   CZ_ASSIGN_OR_RETURN(ProcessGroup* group, world.group(r));
//   absl::Status s = comm::AllReduce(*group, MutableBuffer::Of(x));
//
// The reference backend, used by tests (see comm/testing/spawn_ranks.h) and
// by single-host runs. Data really moves between the ranks' buffers.
//
// How a collective runs. Each rank has a comm worker thread that executes
// that rank's collectives one at a time in issue order, so a caller continues
// while its collective runs. The k-th collective issued on every rank forms
// collective #k (0-based). Its workers rendezvous: each posts its call and
// buffer pointers and waits for the others. Once all have arrived:
//  - if the calls disagree (kind, dtype, count, root, op) every rank fails
//    with InvalidArgument "collective #k mismatch: rank 0 called X, rank j
//    called Y"; no data is touched and the world stays usable;
//  - otherwise each worker moves its 1/N share of the data in parallel with
//    the others: rank r owns segment r (about count/N elements) of every
//    buffer. AllReduce: rank r reduces segment r of all buffers in rank
//    order and writes the result into segment r of all of them, tile by tile
//    while it is in L1 (a fused reduce + copy: each byte is read once and
//    written once, with no phase barrier since no two ranks touch the same
//    segment). Broadcast: rank r copies segment r of the root's buffer to the
//    others. Reduce: rank r reduces segment r into the root's recv.
//    AllGather: rank r pulls every rank's send into its own recv.
//    ReduceScatter: rank r reduces slot r of every send into its recv.
//    A final barrier ensures no rank completes while another still reads or
//    writes its buffers.
//
// Timeouts and abort. options.timeout starts when this rank's worker begins
// the collective (joins the rendezvous). If some rank has not joined by then,
// the waiting rank fails with DeadlineExceeded naming the missing rank(s),
// and the world is ABORTED (as ncclCommAbort): every rank still waiting in
// the rendezvous fails with that status, and every later collective on any
// rank fails at once with FailedPrecondition quoting the first failure. An
// aborted world cannot be repaired; make a new one. Once all ranks have
// joined, the data movement itself is not subject to the timeout (it only
// waits on the other ranks' workers, which are running the same code).
//
// Thread-safety: all methods are thread-safe; each group's collectives may be
// issued from any thread (see process_group.h on ordering).
// Ownership: the world owns its groups; group(r) references stay valid until
// the world is destroyed.
// Destruction: aborts the world with Cancelled, fails every queued collective
// with Cancelled, and joins the workers; it never waits for a peer. REQUIRES:
// no thread is issuing collectives on its groups any more. Collectives already
// past the rendezvous finish their data movement first.
#ifndef CHUNKZERO_COMM_INPROCESS_IN_PROCESS_GROUP_H_
#define CHUNKZERO_COMM_INPROCESS_IN_PROCESS_GROUP_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/process_group.h"

namespace chunkzero {
namespace comm {

namespace inprocess_internal {
class WorldState;
class InProcessGroup;
}  // namespace inprocess_internal

class InProcessWorld {
 public:
  // Starts `world_size` ranks (one worker thread each). A world_size below
  // 1 makes a world of no ranks, whose group() calls all fail.
  explicit InProcessWorld(int world_size);
  ~InProcessWorld();
  InProcessWorld(const InProcessWorld&) = delete;
  InProcessWorld& operator=(const InProcessWorld&) = delete;

  int size() const { return world_size_; }

  // Rank `rank`'s ProcessGroup, backend_name() "inprocess"; supports f32,
  // f16 and bf16. InvalidArgument, naming the rank and the world size, for
  // a rank outside [0, size()); ResourceExhausted, for every rank, when the
  // constructor could not start a worker thread (ulimit -u).
  [[nodiscard]] absl::StatusOr<ProcessGroup*> group(int rank);

  // Aborts the world with `status` (if not aborted already): see above.
  // REQUIRES: !status.ok().
  void Abort(absl::Status status);

  // The status that aborted the world (the first failure), or OK.
  [[nodiscard]] absl::Status abort_status() const;

 private:
  const int world_size_;      // Ranks started (0 for a bad request).
  const int requested_size_;  // The constructor's argument, for messages.
  std::unique_ptr<inprocess_internal::WorldState> state_;
  // Why a worker thread could not start, or OK.
  absl::Status start_status_;
  // Destroyed before state_ (they point into it).
  std::vector<std::unique_ptr<inprocess_internal::InProcessGroup>> groups_;
};

}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_INPROCESS_IN_PROCESS_GROUP_H_
