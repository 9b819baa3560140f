#include "comm/fault_injecting_process_group.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/argument_checks.h"

namespace chunkzero {
namespace comm {

FaultPlan& FaultPlan::FailCall(int64_t index, absl::Status status) {
  rules_.push_back(
      {index, std::nullopt, std::move(status), absl::ZeroDuration()});
  return *this;
}

FaultPlan& FaultPlan::FailKind(CollectiveKind kind, absl::Status status) {
  rules_.push_back(
      {std::nullopt, kind, std::move(status), absl::ZeroDuration()});
  return *this;
}

FaultPlan& FaultPlan::StallCall(int64_t index, absl::Duration duration) {
  rules_.push_back({index, std::nullopt, absl::OkStatus(), duration});
  return *this;
}

FaultPlan& FaultPlan::StallKind(CollectiveKind kind, absl::Duration duration) {
  rules_.push_back({std::nullopt, kind, absl::OkStatus(), duration});
  return *this;
}

const FaultPlan::Rule* FaultPlan::Find(int64_t index,
                                       CollectiveKind kind) const {
  for (const Rule& rule : rules_) {
    if ((rule.index.has_value() && *rule.index == index) ||
        (rule.kind.has_value() && *rule.kind == kind)) {
      return &rule;
    }
  }
  return nullptr;
}

FaultInjectingProcessGroup::FaultInjectingProcessGroup(ProcessGroup& inner,
                                                       FaultPlan plan)
    : ForwardingProcessGroup(inner), plan_(std::move(plan)) {}

std::unique_ptr<Work> FaultInjectingProcessGroup::Inject(
    const CollectiveCall& call) {
  const int64_t index = next_index_.fetch_add(1);
  const FaultPlan::Rule* rule = plan_.Find(index, call.kind);
  if (rule == nullptr) return nullptr;
  if (!rule->fail.ok()) {
    return MakeCompletedWork(absl::Status(
        rule->fail.code(),
        absl::StrCat("injected fault: rank ", rank(), ": call #", index, " ",
                     call.ToString(), ": ", rule->fail.message())));
  }
  absl::SleepFor(rule->stall);
  return nullptr;
}

std::unique_ptr<Work> FaultInjectingProcessGroup::DoBroadcast(
    MutableBuffer buffer, const BroadcastOptions& options) {
  if (auto w = Inject(DescribeBroadcast(buffer, options))) return w;
  return inner().Broadcast(buffer, options);
}

std::unique_ptr<Work> FaultInjectingProcessGroup::DoReduce(
    ConstBuffer send, MutableBuffer recv, const ReduceOptions& options) {
  if (auto w = Inject(DescribeReduce(send, options))) return w;
  return inner().Reduce(send, recv, options);
}

std::unique_ptr<Work> FaultInjectingProcessGroup::DoAllReduce(
    MutableBuffer buffer, const AllReduceOptions& options) {
  if (auto w = Inject(DescribeAllReduce(buffer, options))) return w;
  return inner().AllReduce(buffer, options);
}

std::unique_ptr<Work> FaultInjectingProcessGroup::DoAllGather(
    ConstBuffer send, MutableBuffer recv, const AllGatherOptions& options) {
  if (auto w = Inject(DescribeAllGather(send, options))) return w;
  return inner().AllGather(send, recv, options);
}

std::unique_ptr<Work> FaultInjectingProcessGroup::DoReduceScatter(
    ConstBuffer send, MutableBuffer recv, const ReduceScatterOptions& options) {
  if (auto w = Inject(DescribeReduceScatter(recv, options))) return w;
  return inner().ReduceScatter(send, recv, options);
}

std::unique_ptr<Work> FaultInjectingProcessGroup::DoBarrier(
    const BarrierOptions& options) {
  if (auto w = Inject(DescribeBarrier(options))) return w;
  return inner().Barrier(options);
}

}  // namespace comm
}  // namespace chunkzero
