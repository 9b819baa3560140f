#include "comm/forwarding_process_group.h"

namespace chunkzero {
namespace comm {

int ForwardingProcessGroup::rank() const { return inner_.rank(); }

int ForwardingProcessGroup::size() const { return inner_.size(); }

absl::string_view ForwardingProcessGroup::backend_name() const {
  return inner_.backend_name();
}

bool ForwardingProcessGroup::SupportsDType(DType dtype) const {
  return inner_.SupportsDType(dtype);
}

std::unique_ptr<Work> ForwardingProcessGroup::DoBroadcast(
    MutableBuffer buffer, const BroadcastOptions& options) {
  return inner_.Broadcast(buffer, options);
}

std::unique_ptr<Work> ForwardingProcessGroup::DoReduce(
    ConstBuffer send, MutableBuffer recv, const ReduceOptions& options) {
  return inner_.Reduce(send, recv, options);
}

std::unique_ptr<Work> ForwardingProcessGroup::DoAllReduce(
    MutableBuffer buffer, const AllReduceOptions& options) {
  return inner_.AllReduce(buffer, options);
}

std::unique_ptr<Work> ForwardingProcessGroup::DoAllGather(
    ConstBuffer send, MutableBuffer recv, const AllGatherOptions& options) {
  return inner_.AllGather(send, recv, options);
}

std::unique_ptr<Work> ForwardingProcessGroup::DoReduceScatter(
    ConstBuffer send, MutableBuffer recv, const ReduceScatterOptions& options) {
  return inner_.ReduceScatter(send, recv, options);
}

std::unique_ptr<Work> ForwardingProcessGroup::DoBarrier(
    const BarrierOptions& options) {
  return inner_.Barrier(options);
}

void ForwardingProcessGroup::DoAbort(const absl::Status& cause) {
  inner_.Abort(cause);
}

}  // namespace comm
}  // namespace chunkzero
