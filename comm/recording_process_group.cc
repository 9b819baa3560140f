#include "comm/recording_process_group.h"

#include <atomic>
#include <utility>

#include "absl/time/clock.h"
#include "comm/argument_checks.h"
#include "comm/forwarding_process_group.h"

namespace chunkzero {
namespace comm {

uint64_t PayloadBytes(const CollectiveCall& call, int world_size) {
  const uint64_t buffer = call.count * ElementSize(call.dtype);
  switch (call.kind) {
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kReduce:
    case CollectiveKind::kAllReduce:
      return buffer;
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:
      return buffer * static_cast<uint64_t>(world_size);
    case CollectiveKind::kBarrier:
      return 0;
  }
  return 0;
}

double BusBytesFactor(CollectiveKind kind, int world_size) {
  const double n = world_size;
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return 2.0 * (n - 1) / n;
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:
      return (n - 1) / n;
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kReduce:
      return 1.0;
    case CollectiveKind::kBarrier:
      return 0.0;
  }
  return 0.0;
}

CollectiveStats RecordingSnapshot::Total() const {
  CollectiveStats total;
  for (const CollectiveStats& s : per_kind) {
    total.calls += s.calls;
    total.payload_bytes += s.payload_bytes;
    total.bus_bytes += s.bus_bytes;
  }
  return total;
}

namespace {

// A Work that adds the time its caller spends blocked in its waits to the
// group's counters, and counts the waits by kind. (A template, so that it
// need not name the group's private counters type.)
template <typename Counters>
class TimedWork final : public Work {
 public:
  TimedWork(std::unique_ptr<Work> inner, std::shared_ptr<Counters> counters)
      : inner_(std::move(inner)), counters_(std::move(counters)) {}
  bool IsCompleted() override { return inner_->IsCompleted(); }
  absl::Status DoWait(absl::Time deadline) override {
    ++counters_->host_waits;
    const absl::Time start = absl::Now();
    absl::Status status = inner_->Wait(deadline);
    counters_->blocked_ns += absl::ToInt64Nanoseconds(absl::Now() - start);
    return status;
  }
  // The inner backend decides whether the host blocks; time it either way.
  absl::Status DoWaitOnStream(CudaStream stream) override {
    ++counters_->stream_waits;
    const absl::Time start = absl::Now();
    absl::Status status = inner_->WaitOnStream(stream);
    counters_->blocked_ns += absl::ToInt64Nanoseconds(absl::Now() - start);
    return status;
  }

 private:
  std::unique_ptr<Work> inner_;
  std::shared_ptr<Counters> counters_;
};

}  // namespace

std::unique_ptr<Work> RecordingProcessGroup::Timed(absl::Time issued,
                                                   std::unique_ptr<Work> work) {
  waits_->blocked_ns += absl::ToInt64Nanoseconds(absl::Now() - issued);
  return std::make_unique<TimedWork<WaitCounters>>(std::move(work), waits_);
}

RecordingProcessGroup::RecordingProcessGroup(ProcessGroup& inner,
                                             size_t max_logged_calls)
    : ForwardingProcessGroup(inner), max_logged_calls_(max_logged_calls) {}

void RecordingProcessGroup::Record(const CollectiveCall& call) {
  const uint64_t bytes = PayloadBytes(call, size());
  MutexLock lock(&mu_);
  if (calls_.size() < max_logged_calls_) {
    calls_.push_back(call);
  } else {
    ++calls_not_logged_;
  }
  const int k = static_cast<int>(call.kind);
  ++counts_[k];
  payload_bytes_[k] += bytes;
}

RecordingSnapshot RecordingProcessGroup::SnapshotLocked() const {
  RecordingSnapshot snapshot;
  snapshot.calls = calls_;
  snapshot.calls_not_logged = calls_not_logged_;
  snapshot.blocked = absl::Nanoseconds(waits_->blocked_ns.load());
  snapshot.host_waits = waits_->host_waits.load();
  snapshot.stream_waits = waits_->stream_waits.load();
  for (int k = 0; k < kNumCollectiveKinds; ++k) {
    CollectiveStats& s = snapshot.per_kind[k];
    s.calls = counts_[k];
    s.payload_bytes = payload_bytes_[k];
    s.bus_bytes = static_cast<double>(payload_bytes_[k]) *
                  BusBytesFactor(static_cast<CollectiveKind>(k), size());
  }
  return snapshot;
}

RecordingSnapshot RecordingProcessGroup::Snapshot() const {
  MutexLock lock(&mu_);
  return SnapshotLocked();
}

void RecordingProcessGroup::Reset() {
  MutexLock lock(&mu_);
  calls_.clear();
  calls_not_logged_ = 0;
  counts_ = {};
  payload_bytes_ = {};
  waits_->Reset();
}

RecordingSnapshot RecordingProcessGroup::SnapshotAndReset() {
  MutexLock lock(&mu_);
  RecordingSnapshot snapshot = SnapshotLocked();
  calls_.clear();
  calls_not_logged_ = 0;
  counts_ = {};
  payload_bytes_ = {};
  waits_->Reset();
  return snapshot;
}

void RecordingProcessGroup::Restore(const RecordingSnapshot& snapshot) {
  MutexLock lock(&mu_);
  calls_ = snapshot.calls;
  calls_not_logged_ = snapshot.calls_not_logged;
  for (int k = 0; k < kNumCollectiveKinds; ++k) {
    counts_[k] = snapshot.per_kind[k].calls;
    payload_bytes_[k] = snapshot.per_kind[k].payload_bytes;
  }
  waits_->blocked_ns = absl::ToInt64Nanoseconds(snapshot.blocked);
  waits_->host_waits = snapshot.host_waits;
  waits_->stream_waits = snapshot.stream_waits;
}

std::unique_ptr<Work> RecordingProcessGroup::DoBroadcast(
    MutableBuffer buffer, const BroadcastOptions& options) {
  Record(DescribeBroadcast(buffer, options));
  const absl::Time issued = absl::Now();
  return Timed(issued, inner().Broadcast(buffer, options));
}

std::unique_ptr<Work> RecordingProcessGroup::DoReduce(
    ConstBuffer send, MutableBuffer recv, const ReduceOptions& options) {
  Record(DescribeReduce(send, options));
  const absl::Time issued = absl::Now();
  return Timed(issued, inner().Reduce(send, recv, options));
}

std::unique_ptr<Work> RecordingProcessGroup::DoAllReduce(
    MutableBuffer buffer, const AllReduceOptions& options) {
  Record(DescribeAllReduce(buffer, options));
  const absl::Time issued = absl::Now();
  return Timed(issued, inner().AllReduce(buffer, options));
}

std::unique_ptr<Work> RecordingProcessGroup::DoAllGather(
    ConstBuffer send, MutableBuffer recv, const AllGatherOptions& options) {
  Record(DescribeAllGather(send, options));
  const absl::Time issued = absl::Now();
  return Timed(issued, inner().AllGather(send, recv, options));
}

std::unique_ptr<Work> RecordingProcessGroup::DoReduceScatter(
    ConstBuffer send, MutableBuffer recv, const ReduceScatterOptions& options) {
  Record(DescribeReduceScatter(recv, options));
  const absl::Time issued = absl::Now();
  return Timed(issued, inner().ReduceScatter(send, recv, options));
}

std::unique_ptr<Work> RecordingProcessGroup::DoBarrier(
    const BarrierOptions& options) {
  Record(DescribeBarrier(options));
  const absl::Time issued = absl::Now();
  return Timed(issued, inner().Barrier(options));
}

}  // namespace comm
}  // namespace chunkzero
