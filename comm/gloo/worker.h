// Worker: the worker thread and the Gloo context of one GlooProcessGroup. It
// runs the group's collectives one at a time in issue order: the header
// exchange, then the data over TCP or through shared memory, with the
// deadlines, the probe of the peers after a timeout, and the abort of the
// group on its first failure (gloo_process_group.h, "How a collective runs"
// and "Timeouts and abort").
//
//   auto worker = std::make_unique<Worker>(rank, size, std::move(context),
//                                          std::move(segments), min_bytes,
//                                          std::move(probe));
//   CZ_RETURN_IF_ERROR(worker->Start());
//   std::unique_ptr<Work> work = worker->Enqueue(
//       DescribeAllReduce(buffer, options), buffer.data, buffer.data,
//       options.timeout);
//
// Internal to the Gloo backend. Thread-safety: every public method is
// thread-safe. Destruction: fails every queued collective with Cancelled,
// aborts the one in flight (Cancelled; its peers see reset connections) and
// joins the thread.
#ifndef CHUNKZERO_COMM_GLOO_WORKER_H_
#define CHUNKZERO_COMM_GLOO_WORKER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "base/mutex.h"
#include "comm/gloo/shared_memory_collectives.h"
#include "comm/gloo/shared_segments.h"
#include "comm/net/peer_probe.h"
#include "comm/types.h"
#include "comm/work.h"

namespace gloo {
namespace rendezvous {
class Context;
}  // namespace rendezvous
namespace transport {
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo

namespace chunkzero {
namespace comm {
namespace gloo_internal {

struct Op;  // One queued collective.

class Worker {
 public:
  // `context`: connected to every rank. `shared_memory`: null when the
  // ranks do not share a host (or it is switched off). `probe`: null for a
  // group of one.
  Worker(int rank, int size, std::shared_ptr<gloo::rendezvous::Context> context,
         std::unique_ptr<SharedSegments> shared_memory,
         size_t min_shared_memory_bytes, std::unique_ptr<PeerProbe> probe);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Starts the worker thread: ResourceExhausted where the kernel refuses
  // one (base/thread.h). REQUIRES: called once, before Enqueue.
  absl::Status Start();

  // Queues `call` (`send` and `recv` per kind as in the in-process backend:
  // Broadcast and AllReduce use recv, the buffer; Reduce uses send and, at
  // the root, recv; AllGather and ReduceScatter both; Barrier neither) and
  // returns its Work. REQUIRES: valid arguments (ProcessGroup checked them).
  std::unique_ptr<Work> Enqueue(CollectiveCall call, const void* send,
                                void* recv, absl::Duration timeout)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The status that aborted the group (its first failure), or OK.
  absl::Status abort_status() const ABSL_LOCKS_EXCLUDED(mu_);

  // See GlooProcessGroup::DoAbort.
  void Abort(const absl::Status& cause) ABSL_LOCKS_EXCLUDED(mu_);

  bool uses_shared_memory() const { return shared_memory_ != nullptr; }
  uint64_t shared_memory_collectives() const {
    return shared_memory_collectives_.load(std::memory_order_relaxed);
  }

 private:
  // Unregisters the unbound buffers it created when it goes out of scope.
  class Tracked;

  void Loop() ABSL_LOCKS_EXCLUDED(mu_);
  // Runs `op` unless the group is aborted; aborts it on failure.
  absl::Status Run(const Op& op) ABSL_LOCKS_EXCLUDED(mu_);
  // Resets every connection, so that the peers' pending Gloo calls fail at
  // once (with "connection reset") rather than at their timeouts, and later
  // calls here throw.
  void CloseConnections();
  // Makes the collective in flight return promptly (see worker.cc).
  void AbortInFlight() ABSL_LOCKS_EXCLUDED(mu_);
  // Runs one collective; Gloo failures throw (see CatchGloo).
  absl::Status Execute(const Op& op, const std::string& context);
  // What a probe of the peers' hosts finds after `op` failed, waiting at
  // most op.timeout (and 3 s) for their answers.
  std::string ProbeFinding(const Op& op);
  // The data phase of a collective whose headers matched.
  absl::Status MoveData(const Op& op, absl::Time deadline,
                        const std::string& context);
  uint32_t Tag(const Op& op) const;
  // Sends `bytes` bytes at all + rank_ * bytes to every peer and receives
  // each peer's into all + peer * bytes, under the slot (prefix, the
  // collective's tag). False if a wait was aborted (see Run()); Gloo's
  // failures, timeouts included, throw. `arrived` marks the ranks heard
  // from.
  bool ExchangeWithPeers(uint8_t prefix, const Op& op, void* all, size_t bytes,
                         absl::Time deadline, std::vector<bool>& arrived);
  // Sends this rank's CallHeader to every peer and receives theirs; returns
  // DeadlineExceeded naming the ranks whose header did not come in time, or
  // InvalidArgument on a mismatch. `*all_ready` says whether every rank's
  // header said kSharedMemoryReady (this rank's says `ready`).
  absl::Status ExchangeHeaders(const Op& op, absl::Time deadline, bool ready,
                               bool* all_ready);
  // Completes once every rank has passed `point` of the collective: a
  // one-byte exchange. Failures throw, as in MoveData.
  absl::Status BarrierAt(SharedMemoryPoint point, const Op& op,
                         absl::Time deadline);
  absl::Status JoinTimeout(const Op& op, const std::vector<bool>& arrived);
  // size() == 1: every collective is a local copy at most.
  absl::Status ExecuteAlone(const Op& op);
  absl::Status RunBroadcast(const Op& op, absl::Time deadline);
  absl::Status RunAllGather(const Op& op, absl::Time deadline);
  // Reduces `n` consecutive blocks of `count` elements at `blocks` into
  // `out`, in rank order (block k came from rank k).
  void ReduceBlocks(void* out, const uint8_t* blocks, size_t count,
                    const CollectiveCall& call) const;
  absl::Status RunReduceScatter(const Op& op, absl::Time deadline);
  absl::Status RunAllReduce(const Op& op, absl::Time deadline);
  absl::Status RunReduce(const Op& op, absl::Time deadline);
  // The worker's scratch, at least `bytes` long (contents undefined). Kept
  // between collectives: a fresh buffer per call cost page faults and
  // zeroing of a whole chunk's bytes on every reduction.
  uint8_t* Scratch(size_t bytes);

  const int rank_;
  const int size_;
  // Shared with Gloo's option objects, which take a shared_ptr<Context>.
  const std::shared_ptr<gloo::rendezvous::Context> context_;
  mutable Mutex mu_;
  CondVar cv_;  // Signalled when queue_ grows or stopping_ is set.
  std::deque<std::unique_ptr<Op>> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool in_flight_ ABSL_GUARDED_BY(mu_) = false;
  // The worker is completing the Work of the collective it just ran.
  bool completing_ ABSL_GUARDED_BY(mu_) = false;
  // Set by AbortInFlight (the destructor's, or Abort's).
  bool aborting_ ABSL_GUARDED_BY(mu_) = false;
  // The unbound buffers of the collective in flight (see Tracked).
  std::vector<gloo::transport::UnboundBuffer*> active_ ABSL_GUARDED_BY(mu_);
  // Unbound buffers of exchanges an abort cut short: Gloo's network thread
  // may still be completing an operation on one (signalling its condition
  // variable) as the wait returns, and an UnboundBuffer must not be
  // destroyed under it. They go with the worker, long after.
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> retired_
      ABSL_GUARDED_BY(mu_);
  // Scratch(); the worker thread's alone.
  std::vector<uint8_t> scratch_;
  // Null when the ranks do not share a host (or it is switched off); the
  // worker thread's alone.
  const std::unique_ptr<SharedSegments> shared_memory_;
  const size_t min_shared_memory_bytes_;
  // Null for a group of one. Used only by the worker thread.
  const std::unique_ptr<PeerProbe> probe_;
  std::atomic<uint64_t> shared_memory_collectives_{0};
  absl::Status abort_status_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace gloo_internal
}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_GLOO_WORKER_H_
