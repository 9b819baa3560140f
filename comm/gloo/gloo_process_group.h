// GlooProcessGroup: a ProcessGroup whose ranks talk over TCP through Gloo, so
// they may live in different processes (or on different hosts).
//
//   // Every rank, in its own process, with the same directory:
//   absl::StatusOr<std::unique_ptr<GlooProcessGroup>> g =
//       GlooProcessGroup::CreateWithFileStore(rank, 4, "/tmp/job42");
//   CZ_RETURN_IF_ERROR(comm::AllReduce(**g, MutableBuffer::Of(grads)));
//
// Rendezvous. Create() connects `size` ranks through a gloo rendezvous Store
// that every rank reaches: a shared gloo::rendezvous::HashStore when the
// ranks are threads of one process (tests), a FileStore on a shared
// directory across processes. The store must be fresh (no keys from an
// earlier run) and dedicated to one group; to host several groups on one
// store, give each a gloo::rendezvous::PrefixStore. The store is used only
// inside Create(); it need not outlive the group.
//
// How a collective runs. Each group has one worker thread that executes its
// collectives one at a time in issue order, so a caller continues while its
// collective runs; the k-th collective issued on every rank forms collective
// #k (0-based, gloo tag k mod 2^32). Every collective starts with a header
// exchange: each rank sends a 64-byte description of its call (kind, dtype,
// count, root, op, a hash of the tag and its first 40 characters) to every
// other rank and waits for all of theirs. This is what the in-process backend
// gets from its shared rendezvous, at the cost of one small all-to-all per
// collective:
//  - if a rank has not issued collective #k within options.timeout, the
//    waiting ranks fail with DeadlineExceeded naming the missing rank(s);
//  - if the calls disagree (kind, dtype, count, root, op, tag) every rank
//    fails with InvalidArgument "collective #k mismatch: rank 0 called X,
//    rank j called Y"; no data moves and the group stays usable. (Gloo
//    matches messages by tag only, so without the exchange a mismatch would
//    surface as a timeout or as data of the wrong size, and the `tag`
//    strings of the options could not be checked at all.)
// Then the data moves (N = size(), B = the per-rank byte count of the call):
//  - Broadcast: gloo::broadcast (binomial tree from the root).
//  - AllGather: gloo::allgather (ring); each rank sends and receives
//    (N-1) * B.
//  - ReduceScatter: gloo::alltoall (rank r receives slot r of every rank's
//    send), then rank r reduces the N slots locally in rank order. Each rank
//    sends and receives (N-1) * B: the same volume as a ring reduce-scatter.
//  - AllReduce: the same reduce-scatter over N nearly equal segments of the
//    buffer (gloo::alltoallv), then gloo::allgatherv of the reduced
//    segments: 2 (N-1)/N of the buffer sent and received per rank, as a
//    ring all-reduce.
//  - Reduce: gloo::gather to the root, which reduces locally. The root
//    receives (N-1) * B (a ring reduce would need only about 2 B), and does
//    all the arithmetic; fine for the small reductions it is used for.
//  - Barrier: the header exchange is itself a barrier.
// Ranks on one host. When every rank can open the others' POSIX shared
// memory (/dev/shm), AllGather, ReduceScatter and AllReduce move their data
// through it instead: each rank copies what its peers need into its own
// segment, a one-byte exchange over TCP marks that every rank has written,
// and each rank reads (and reduces) straight from its peers' segments
// (AllReduce: a second exchange, then each rank copies the others' reduced
// segments). That is a memory copy where TCP costs two copies through the
// kernel and its system calls, on the cores that compute. The header
// exchange, the deadlines, mismatch detection and abort stay on TCP as
// above, and the results are the same bits. Each rank's segment grows to
// the largest such collective's per-rank bytes (AllGather: the send;
// ReduceScatter: the whole send; AllReduce: the buffer), up to
// GlooOptions::max_shared_memory_bytes; a collective that would pass it, is
// smaller than GlooOptions::min_shared_memory_bytes, or for which /dev/shm
// has no room, goes over TCP on every rank (each says in its header whether
// its segment is ready). Ranks on several hosts use TCP
// alone (see uses_shared_memory()). No segment name outlives Create().
// Reductions never use Gloo's reduce functions: the local step is the
// reference kernel the in-process backend uses too
// (comm/internal/reduce_kernels), so results are the serial rank-order
// reduction, bit for bit identical to the in-process backend, with f16/bf16
// accumulated in f32 and rounded once. Supported dtypes: f32, f16, bf16; ops:
// sum, avg, max (all of ReduceOp). Memory: AllReduce, ReduceScatter and (at the
// root) Reduce use a scratch buffer as large as the send data; the group
// keeps it, grown to the largest call so far, until it is destroyed.
// Headers are raw structs: all ranks must run on little-endian hosts.
//
// Timeouts and abort. options.timeout starts when the worker begins the
// collective. The header exchange waits at most that long; each later Gloo
// call gets the time left, which Gloo applies to each of its internal waits,
// so the timeout catches missing or dead peers, not a slow but live ring.
// A timeout's message ends with what a probe of the peers' hosts found
// (peer_probe.h): which ranks' hosts cannot be reached (a lost host or
// link), or whose process is gone, or that every host answers (a stopped
// rank); the probe waits at most 3 s.
// The first failure of any kind other than a mismatch (a timeout, a peer that
// closed its connections, a Gloo error) ABORTS the group: it resets every
// connection, so the peers' pending collectives fail promptly with
// Unavailable instead of waiting out their own timeouts, and every later
// collective on this group fails at once with FailedPrecondition quoting the
// first failure (see abort_status()). An aborted group cannot be repaired;
// make a new one (with a new store) on every rank. Gloo's exceptions never
// escape: they become statuses naming the collective, rank and tag.
//
// Signals: Gloo writes to its sockets with writev, which raises SIGPIPE
// when a peer has closed its end (a peer that failed); a process using
// this group should ignore SIGPIPE (the train binary does), or such a peer
// ends it.
//
// Thread-safety: all methods are thread-safe; collectives may be issued from
// any thread (see process_group.h on ordering).
// Destruction: fails every queued collective with Cancelled, aborts a
// collective in flight (Cancelled; its peers see reset connections) and
// joins the worker. REQUIRES: no thread is issuing collectives on the group
// any more.
#ifndef CHUNKZERO_COMM_GLOO_GLOO_PROCESS_GROUP_H_
#define CHUNKZERO_COMM_GLOO_GLOO_PROCESS_GROUP_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/options.h"
#include "comm/process_group.h"

namespace gloo {
namespace rendezvous {
class Store;
}  // namespace rendezvous
}  // namespace gloo

namespace chunkzero {
namespace comm {

namespace gloo_internal {
class Worker;
}  // namespace gloo_internal

struct GlooOptions {
  // The address this rank listens on and advertises to its peers: loopback
  // for ranks on one machine, else this host's name or address.
  std::string hostname = "127.0.0.1";
  // How long Create() waits for every rank to join and connect.
  absl::Duration timeout = kDefaultCollectiveTimeout;
  // The most bytes of shared memory (/dev/shm) this rank's segment may hold
  // when every rank is on one host (see "Ranks on one host" above); 0 keeps
  // all data on TCP.
  size_t max_shared_memory_bytes = std::numeric_limits<size_t>::max();
  // Collectives whose per-rank bytes (as above) are fewer than this stay on
  // TCP even then: below about 1 MiB the extra one-byte exchange costs as
  // much as the copies it saves (collectives_bench, BM_GlooSharedMemoryVsTcp).
  // Every rank decides for itself and says so in its header, so ranks with
  // different values still agree.
  size_t min_shared_memory_bytes = size_t{1} << 20;
  // What every rank of the job must agree on (flags, shapes), compared at
  // the rendezvous together with the world size: a rank started with other
  // values fails at once, naming the first key that differs, instead of
  // waiting for ranks that will never come (comm/rendezvous/job_config.h).
  // Keys and values are free text.
  std::map<std::string, std::string> job_config;
};

class GlooProcessGroup final : public ProcessGroup {
 public:
  // Connects rank `rank` of `size` through `store` (see "Rendezvous" above).
  // Blocks until every rank has joined and all connections are up. Errors:
  // InvalidArgument for a bad rank/size/timeout; FailedPrecondition when a
  // rank's size or options.job_config differs from this rank's (naming both
  // ranks, the key and the two values), or when the store already holds
  // this rank's key (a store left over from an earlier job); DeadlineExceeded
  // naming the ranks that did not join within options.timeout; Unavailable
  // if the connections cannot be made (e.g. an unreachable hostname).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<GlooProcessGroup>> Create(
      int rank, int size, gloo::rendezvous::Store& store,
      const GlooOptions& options = {});

  // Tells the ranks still in Create() on `store` that `rank` will not come
  // (its thread or process could not start, or it failed before joining),
  // so that they fail at once with `why` quoted rather than at their
  // timeout. Create() does this itself for its own failures once its key
  // is in the store. Best effort.
  static void AnnounceGiveUp(gloo::rendezvous::Store& store, int rank,
                             const absl::Status& why);

  // As Create() over a gloo FileStore in `directory` (created if missing),
  // for ranks in separate processes on one machine or a shared filesystem.
  // Use a fresh directory per job: one holding an earlier job's keys is
  // refused (FailedPrecondition). Errors name the directory.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<GlooProcessGroup>>
  CreateWithFileStore(int rank, int size, const std::string& directory,
                      const GlooOptions& options = {});

  ~GlooProcessGroup() override;
  GlooProcessGroup(const GlooProcessGroup&) = delete;
  GlooProcessGroup& operator=(const GlooProcessGroup&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::string_view backend_name() const override { return "gloo"; }
  // Every DType: data moves as bytes and reduces in comm's own kernels.
  bool SupportsDType(DType dtype) const override;

  // The status that aborted the group (its first failure), or OK.
  [[nodiscard]] absl::Status abort_status() const;

  // True if the ranks share a host and their data may move through shared
  // memory (see "Ranks on one host").
  bool uses_shared_memory() const;
  // How many collectives so far moved their data through shared memory.
  uint64_t shared_memory_collectives() const;

 protected:
  std::unique_ptr<Work> DoBroadcast(MutableBuffer buffer,
                                    const BroadcastOptions& options) override;
  std::unique_ptr<Work> DoReduce(ConstBuffer send, MutableBuffer recv,
                                 const ReduceOptions& options) override;
  std::unique_ptr<Work> DoAllReduce(MutableBuffer buffer,
                                    const AllReduceOptions& options) override;
  std::unique_ptr<Work> DoAllGather(ConstBuffer send, MutableBuffer recv,
                                    const AllGatherOptions& options) override;
  std::unique_ptr<Work> DoReduceScatter(
      ConstBuffer send, MutableBuffer recv,
      const ReduceScatterOptions& options) override;
  std::unique_ptr<Work> DoBarrier(const BarrierOptions& options) override;
  // Fails every queued collective, aborts the one in flight (closing the
  // connections, so the peers fail promptly; see "Timeouts and abort"), and
  // returns once the worker holds no caller buffer.
  void DoAbort(const absl::Status& cause) override;

 private:
  GlooProcessGroup(int rank, int size,
                   std::unique_ptr<gloo_internal::Worker> worker);

  const int rank_;
  const int size_;
  std::unique_ptr<gloo_internal::Worker> worker_;
};

}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_GLOO_GLOO_PROCESS_GROUP_H_
