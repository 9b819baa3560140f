#include "tensor/memory/async_copier.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "tensor/cuda/cuda_runtime.h"
#include "tensor/memory/allocator.h"

namespace chunkzero {

absl::StatusOr<std::unique_ptr<AsyncCopier>> AsyncCopier::Create(
    Device device) {
  if (device == Device::Cpu()) {
    return absl::InvalidArgumentError(
        "AsyncCopier: the CPU is the host; give the device to copy to");
  }
  std::unique_ptr<AsyncCopier> copier(new AsyncCopier(device));
  if (device.is_host_accessible()) {
    copier->thread_ = std::make_unique<CopyStream>();
    return copier;
  }
  absl::StatusOr<CudaStream> stream = CudaStreamCreate(device.index());
  if (!stream.ok()) {
    return absl::Status(stream.status().code(),
                        absl::StrCat("AsyncCopier for ", device.ToString(),
                                     ": ", stream.status().message()));
  }
  copier->stream_ = *stream;
  copier->gpu_ = std::make_unique<CudaMemoryRuntime>(device.index());
  return copier;
}

AsyncCopier::~AsyncCopier() {
  WaitAll().IgnoreError();  // Nobody is left to hear about a failed copy.
  if (stream_ != nullptr) {
    const ScopedCudaDevice device(device_.index());
    CudaStreamDestroy(stream_).IgnoreError();
  }
}

absl::StatusOr<AsyncCopier::Ticket> AsyncCopier::Copy(void* dst,
                                                      Device dst_device,
                                                      const void* src,
                                                      Device src_device,
                                                      size_t bytes) {
  const bool to_device = dst_device == device_ && src_device == Device::Cpu();
  const bool from_device = src_device == device_ && dst_device == Device::Cpu();
  if (!to_device && !from_device) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AsyncCopier for ", device_.ToString(), ": cannot copy from ",
        src_device.ToString(), " to ", dst_device.ToString()));
  }
  const Ticket ticket = ++issued_;
  if (thread_ != nullptr) {
    thread_->Enqueue([this, ticket, dst, dst_device, src, src_device, bytes] {
      const absl::Status copied =
          CopyBytes(dst, dst_device, src, src_device, bytes);
      MutexLock lock(&mu_);
      thread_error_.Update(copied);
      done_ = ticket;
      done_changed_.SignalAll();
    });
    return ticket;
  }
  absl::Status copied = OrderAfterComputeStream();
  if (copied.ok()) copied = CudaMemcpyAsync(dst, src, bytes, stream_);
  absl::StatusOr<CudaEvent> event = copied.ok()
                                        ? gpu_->RecordEvent(stream_)
                                        : absl::StatusOr<CudaEvent>(copied);
  if (event.ok()) {
    events_.emplace_back(ticket, *event);
    return ticket;
  }
  const absl::Status& status = event.status();
  gpu_error_.Update(absl::Status(
      status.code(),
      absl::StrCat("copy of ", bytes, " bytes to ", dst_device.ToString(), ": ",
                   status.message())));
  return ticket;  // Its Wait reports the error.
}

absl::Status AsyncCopier::OrderAfterComputeStream() {
  absl::StatusOr<CudaEvent> computed = gpu_->RecordEvent(kComputeStream);
  if (!computed.ok()) return computed.status();
  const absl::Status waiting = CudaStreamWaitEvent(stream_, *computed);
  // The wait has captured the event's work; the event may be reused.
  gpu_->ReleaseEvent(*computed);
  return waiting;
}

absl::Status AsyncCopier::Wait(Ticket ticket) {
  if (thread_ != nullptr) {
    MutexLock lock(&mu_);
    while (done_ < ticket) done_changed_.Wait(&mu_);
    return thread_error_;
  }
  while (!events_.empty() && events_.front().first <= ticket) {
    const CudaEvent event = events_.front().second;
    events_.pop_front();
    gpu_error_.Update(gpu_->WaitEvent(event));
    gpu_->ReleaseEvent(event);
  }
  return gpu_error_;
}

absl::Status AsyncCopier::WaitAll() { return Wait(issued_); }

}  // namespace chunkzero
