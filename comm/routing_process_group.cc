#include "comm/routing_process_group.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "tensor/cuda/cuda_runtime.h"

namespace chunkzero {
namespace comm {

RoutingProcessGroup::RoutingProcessGroup(ProcessGroup* device,
                                         ProcessGroup* host, OnDevice on_device)
    : ForwardingProcessGroup(*host),
      device_(device),
      on_device_(on_device != nullptr ? std::move(on_device)
                                      : OnDevice(CudaIsDeviceMemory)),
      name_(absl::StrCat(device->backend_name(), "+", host->backend_name())) {}

bool RoutingProcessGroup::SupportsDType(DType dtype) const {
  return device_->SupportsDType(dtype) && inner().SupportsDType(dtype);
}

ProcessGroup* RoutingProcessGroup::Route(const void* a, size_t a_count,
                                         const void* b, size_t b_count) const {
  int device = 0, host = 0;
  for (auto [data, count] : {std::pair{a, a_count}, std::pair{b, b_count}}) {
    if (data == nullptr || count == 0) continue;
    (on_device_(data) ? device : host) += 1;
  }
  if (device > 0 && host > 0) return nullptr;
  return device > 0 ? device_ : &inner();
}

std::unique_ptr<Work> RoutingProcessGroup::Mixed(CollectiveKind kind) const {
  return MakeCompletedWork(absl::InvalidArgumentError(
      absl::StrCat("rank ", rank(), ": ", CollectiveKindName(kind),
                   " with one buffer in GPU memory and one in host memory (",
                   name_, " runs each collective on one side)")));
}

std::unique_ptr<Work> RoutingProcessGroup::DoBroadcast(
    MutableBuffer buffer, const BroadcastOptions& options) {
  return Route(buffer.data, buffer.count, nullptr, 0)
      ->Broadcast(buffer, options);
}

std::unique_ptr<Work> RoutingProcessGroup::DoReduce(
    ConstBuffer send, MutableBuffer recv, const ReduceOptions& options) {
  ProcessGroup* group = Route(send.data, send.count, recv.data, recv.count);
  if (group == nullptr) return Mixed(CollectiveKind::kReduce);
  return group->Reduce(send, recv, options);
}

std::unique_ptr<Work> RoutingProcessGroup::DoAllReduce(
    MutableBuffer buffer, const AllReduceOptions& options) {
  return Route(buffer.data, buffer.count, nullptr, 0)
      ->AllReduce(buffer, options);
}

std::unique_ptr<Work> RoutingProcessGroup::DoAllGather(
    ConstBuffer send, MutableBuffer recv, const AllGatherOptions& options) {
  ProcessGroup* group = Route(send.data, send.count, recv.data, recv.count);
  if (group == nullptr) return Mixed(CollectiveKind::kAllGather);
  return group->AllGather(send, recv, options);
}

std::unique_ptr<Work> RoutingProcessGroup::DoReduceScatter(
    ConstBuffer send, MutableBuffer recv, const ReduceScatterOptions& options) {
  ProcessGroup* group = Route(send.data, send.count, recv.data, recv.count);
  if (group == nullptr) return Mixed(CollectiveKind::kReduceScatter);
  return group->ReduceScatter(send, recv, options);
}

}  // namespace comm
}  // namespace chunkzero
