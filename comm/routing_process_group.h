// RoutingProcessGroup: one ProcessGroup over two, each collective going to
// the one that can reach its buffers: GPU memory to a device backend
// (NCCL, or a host backend staged through the host), host memory to a host
// backend (Gloo, in-process).
//
//   RoutingProcessGroup group(nccl.get(), gloo.get());
//   comm::AllReduce(group, grads_on_gpu);          // NCCL
//   comm::AllReduce(group, MutableBuffer::Of(v));  // Gloo: v is host memory
//
// This is how a job on GPUs runs its chunks' collectives on NCCL while the
// small host-side agreements (a step's loss, the unused-parameter flags,
// the optimizer's norms) stay on the host, as PyTorch keeps a Gloo group
// beside NCCL for CPU tensors. Every rank routes the same call the same way
// (by where its buffers are), so each inner group sees the same calls in
// the same order on every rank. A Barrier goes to the host group.
//
// Where a buffer is: `on_device(data)`, by default CudaIsDeviceMemory
// (tensor/cuda/cuda_runtime.h). Buffers with no elements have no say. A call
// whose buffers are on both sides fails with InvalidArgument naming the
// rank and the op, without reaching either group (so the peers wait for it
// until their timeout, as for any argument error).
//
// The host group is the inner group of a ForwardingProcessGroup (rank, size
// and Barrier are its); collectives on device buffers are diverted to the
// device group. Argument errors are found by whichever inner group gets the
// call, and name that group (ArgumentChecks::kDelegated).
//
// Ownership: does not own the inner groups, which must outlive it and have
// this group's rank and size. Thread-safety: thread-safe as the inner
// groups are.
#ifndef CHUNKZERO_COMM_ROUTING_PROCESS_GROUP_H_
#define CHUNKZERO_COMM_ROUTING_PROCESS_GROUP_H_

#include <functional>
#include <memory>
#include <string>

#include "comm/forwarding_process_group.h"
#include "comm/process_group.h"

namespace chunkzero {
namespace comm {

class RoutingProcessGroup final : public ForwardingProcessGroup {
 public:
  using OnDevice = std::function<bool(const void* data)>;

  // REQUIRES: device and host have the same rank and size.
  RoutingProcessGroup(ProcessGroup* device, ProcessGroup* host,
                      OnDevice on_device = nullptr);

  // "<device>+<host>", e.g. "nccl+gloo".
  absl::string_view backend_name() const override { return name_; }
  // A dtype both inner groups support.
  bool SupportsDType(DType dtype) const override;

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
  // DoBarrier goes to the host group.
  // Aborts both inner groups: a collective in flight may be on either.
  void DoAbort(const absl::Status& cause) override {
    device_->Abort(cause);
    inner().Abort(cause);
  }

 private:
  // The group for a call whose buffers are `a` and `b` (null or empty: no
  // say), or null when they are on both sides.
  ProcessGroup* Route(const void* a, size_t a_count, const void* b,
                      size_t b_count) const;
  // The already-failed Work of a call with buffers on both sides.
  std::unique_ptr<Work> Mixed(CollectiveKind kind) const;

  ProcessGroup* const device_;
  const OnDevice on_device_;
  const std::string name_;
};

}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_ROUTING_PROCESS_GROUP_H_
