// InFlightTracker: a decorator that knows which of the collectives issued
// through it are still running, so that whoever owns their buffers can stop
// them before freeing the buffers.
//
//   InFlightTracker tracked(group);  // the owner's collectives go through it
//   ...                              // a failure returns with one in flight
//   tracked.AbortIfInFlight(absl::CancelledError("rank 1 gave up"));
//   // Now nothing reads or writes the owner's buffers: free them.
//
// A Work's handle may be dropped while its collective runs (work.h), and a
// failure returns from the middle of a step with prefetches in flight; a
// peer that comes late would then read or write memory freed meanwhile.
// ChunkManager keeps its chunks' collectives in one of these and, when it
// is destroyed with any still running, aborts its group first
// (ProcessGroup::Abort returns once none is).
//
// Ownership: does not own `inner`, which must outlive it.
// Thread-safety: thread-safe as `inner` is.
#ifndef CHUNKZERO_COMM_IN_FLIGHT_TRACKER_H_
#define CHUNKZERO_COMM_IN_FLIGHT_TRACKER_H_

#include <cstdint>
#include <deque>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "base/mutex.h"
#include "comm/forwarding_process_group.h"
#include "comm/process_group.h"

namespace chunkzero {
namespace comm {

class InFlightTracker final : public ForwardingProcessGroup {
 public:
  explicit InFlightTracker(ProcessGroup& inner)
      : ForwardingProcessGroup(inner) {}
  InFlightTracker(const InFlightTracker&) = delete;
  InFlightTracker& operator=(const InFlightTracker&) = delete;

  // Collectives issued through this decorator that have not completed.
  int64_t in_flight() ABSL_LOCKS_EXCLUDED(mu_);

  // When any collective is in flight, aborts the inner group with `cause`
  // (ProcessGroup::Abort), so that none is once this returns. Returns how
  // many were in flight; with none, does nothing (the group stays usable).
  // REQUIRES: !cause.ok().
  int64_t AbortIfInFlight(const absl::Status& cause) ABSL_LOCKS_EXCLUDED(mu_);

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

 private:
  // Keeps `work` (shared with the handle returned) until it completes.
  std::unique_ptr<Work> Track(std::unique_ptr<Work> work)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets the collectives that have completed.
  void PruneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Mutex mu_;
  std::deque<std::shared_ptr<Work>> issued_ ABSL_GUARDED_BY(mu_);
};

}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_IN_FLIGHT_TRACKER_H_
