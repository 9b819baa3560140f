#include "comm/in_flight_tracker.h"

#include <algorithm>
#include <utility>

namespace chunkzero {
namespace comm {
namespace {

// The caller's handle; the tracker keeps the same Work.
class SharedWork final : public Work {
 public:
  explicit SharedWork(std::shared_ptr<Work> inner) : inner_(std::move(inner)) {}
  bool IsCompleted() override { return inner_->IsCompleted(); }

 protected:
  absl::Status DoWait(absl::Time deadline) override {
    return inner_->Wait(deadline);
  }
  absl::Status DoWaitOnStream(CudaStream stream) override {
    return inner_->WaitOnStream(stream);
  }

 private:
  const std::shared_ptr<Work> inner_;
};

}  // namespace

int64_t InFlightTracker::in_flight() {
  MutexLock lock(&mu_);
  PruneLocked();
  return static_cast<int64_t>(issued_.size());
}

int64_t InFlightTracker::AbortIfInFlight(const absl::Status& cause) {
  const int64_t running = in_flight();
  if (running > 0) inner().Abort(cause);
  return running;
}

void InFlightTracker::PruneLocked() {
  issued_.erase(std::remove_if(issued_.begin(), issued_.end(),
                               [](const std::shared_ptr<Work>& work) {
                                 return work->IsCompleted();
                               }),
                issued_.end());
}

std::unique_ptr<Work> InFlightTracker::Track(std::unique_ptr<Work> work) {
  std::shared_ptr<Work> shared = std::move(work);
  MutexLock lock(&mu_);
  // Collectives mostly complete in issue order: the list stays as short as
  // what is in flight.
  PruneLocked();
  issued_.push_back(shared);
  return std::make_unique<SharedWork>(std::move(shared));
}

std::unique_ptr<Work> InFlightTracker::DoBroadcast(
    MutableBuffer buffer, const BroadcastOptions& options) {
  return Track(inner().Broadcast(buffer, options));
}

std::unique_ptr<Work> InFlightTracker::DoReduce(ConstBuffer send,
                                                MutableBuffer recv,
                                                const ReduceOptions& options) {
  return Track(inner().Reduce(send, recv, options));
}

std::unique_ptr<Work> InFlightTracker::DoAllReduce(
    MutableBuffer buffer, const AllReduceOptions& options) {
  return Track(inner().AllReduce(buffer, options));
}

std::unique_ptr<Work> InFlightTracker::DoAllGather(
    ConstBuffer send, MutableBuffer recv, const AllGatherOptions& options) {
  return Track(inner().AllGather(send, recv, options));
}

std::unique_ptr<Work> InFlightTracker::DoReduceScatter(
    ConstBuffer send, MutableBuffer recv, const ReduceScatterOptions& options) {
  return Track(inner().ReduceScatter(send, recv, options));
}

std::unique_ptr<Work> InFlightTracker::DoBarrier(
    const BarrierOptions& options) {
  return Track(inner().Barrier(options));
}

}  // namespace comm
}  // namespace chunkzero
