#include "comm/process_group.h"

#include <utility>

#include "comm/argument_checks.h"

namespace chunkzero {
namespace comm {

std::unique_ptr<Work> ProcessGroup::Broadcast(MutableBuffer buffer,
                                              const BroadcastOptions& options) {
  if (checks_ == ArgumentChecks::kAtEntry) {
    if (absl::Status s = CheckBroadcastArgs(*this, buffer, options); !s.ok()) {
      return MakeCompletedWork(std::move(s));
    }
  }
  return DoBroadcast(buffer, options);
}

std::unique_ptr<Work> ProcessGroup::Reduce(ConstBuffer send, MutableBuffer recv,
                                           const ReduceOptions& options) {
  if (checks_ == ArgumentChecks::kAtEntry) {
    if (absl::Status s = CheckReduceArgs(*this, send, recv, options); !s.ok()) {
      return MakeCompletedWork(std::move(s));
    }
  }
  return DoReduce(send, recv, options);
}

std::unique_ptr<Work> ProcessGroup::AllReduce(MutableBuffer buffer,
                                              const AllReduceOptions& options) {
  if (checks_ == ArgumentChecks::kAtEntry) {
    if (absl::Status s = CheckAllReduceArgs(*this, buffer, options); !s.ok()) {
      return MakeCompletedWork(std::move(s));
    }
  }
  return DoAllReduce(buffer, options);
}

std::unique_ptr<Work> ProcessGroup::AllGather(ConstBuffer send,
                                              MutableBuffer recv,
                                              const AllGatherOptions& options) {
  if (checks_ == ArgumentChecks::kAtEntry) {
    if (absl::Status s = CheckAllGatherArgs(*this, send, recv, options);
        !s.ok()) {
      return MakeCompletedWork(std::move(s));
    }
  }
  return DoAllGather(send, recv, options);
}

std::unique_ptr<Work> ProcessGroup::ReduceScatter(
    ConstBuffer send, MutableBuffer recv, const ReduceScatterOptions& options) {
  if (checks_ == ArgumentChecks::kAtEntry) {
    if (absl::Status s = CheckReduceScatterArgs(*this, send, recv, options);
        !s.ok()) {
      return MakeCompletedWork(std::move(s));
    }
  }
  return DoReduceScatter(send, recv, options);
}

absl::Status Broadcast(ProcessGroup& group, MutableBuffer buffer,
                       const BroadcastOptions& options) {
  return group.Broadcast(buffer, options)->Wait();
}

absl::Status Reduce(ProcessGroup& group, ConstBuffer send, MutableBuffer recv,
                    const ReduceOptions& options) {
  return group.Reduce(send, recv, options)->Wait();
}

absl::Status AllReduce(ProcessGroup& group, MutableBuffer buffer,
                       const AllReduceOptions& options) {
  return group.AllReduce(buffer, options)->Wait();
}

absl::Status AllGather(ProcessGroup& group, ConstBuffer send,
                       MutableBuffer recv, const AllGatherOptions& options) {
  return group.AllGather(send, recv, options)->Wait();
}

absl::Status ReduceScatter(ProcessGroup& group, ConstBuffer send,
                           MutableBuffer recv,
                           const ReduceScatterOptions& options) {
  return group.ReduceScatter(send, recv, options)->Wait();
}

absl::Status Barrier(ProcessGroup& group, const BarrierOptions& options) {
  return group.Barrier(options)->Wait();
}

}  // namespace comm
}  // namespace chunkzero
