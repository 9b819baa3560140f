#include "comm/process_group.h"

namespace chunkzero {
namespace comm {

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
