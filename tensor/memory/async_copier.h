// AsyncCopier: copies between the host and one device that run while the
// caller computes, completing in the order they were issued.
//
//   CZ_ASSIGN_OR_RETURN(std::unique_ptr<AsyncCopier> copier,
//                       AsyncCopier::Create(Device::Cuda(0)));
//   CZ_ASSIGN_OR_RETURN(AsyncCopier::Ticket in,
//                       copier->Copy(host, Device::Cpu(), gpu, Device::Cuda(0),
//                                    bytes));
//   ... compute on something else ...
//   CZ_RETURN_IF_ERROR(copier->Wait(in));   // `host` now holds the bytes
//
// On a GPU the copies run on a CUDA stream of the copier's own (events mark
// the tickets), asynchronous when the host side is pinned memory. Each copy
// is ordered after the work already enqueued on the compute stream (the
// legacy default stream, where chunkzero's kernels run and its collectives
// are waited for), so it reads what that work wrote without the host
// waiting. Between host-backed devices (the simulated one) the copies run
// on a copy thread (tensor/copy_stream.h). The caller keeps both buffers
// valid and untouched until the copy's ticket has been waited for.
//
// Errors: Copy refuses a pair that is not the host and the copier's device
// (InvalidArgument); a failed copy's error is returned by the Wait of its
// ticket or any later one. Thread-safety: not thread-safe (one caller).
// Destruction waits for every copy issued.
#ifndef CHUNKZERO_TENSOR_MEMORY_ASYNC_COPIER_H_
#define CHUNKZERO_TENSOR_MEMORY_ASYNC_COPIER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "tensor/copy_stream.h"
#include "tensor/cuda/cuda_handles.h"
#include "tensor/device.h"
#include "tensor/memory/gpu_memory_runtime.h"

namespace chunkzero {

class AsyncCopier {
 public:
  using Ticket = int64_t;

  // InvalidArgument for the CPU itself (nothing to copy to); a GPU's
  // stream errors otherwise.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<AsyncCopier>> Create(
      Device device);
  ~AsyncCopier();
  AsyncCopier(const AsyncCopier&) = delete;
  AsyncCopier& operator=(const AsyncCopier&) = delete;

  Device device() const { return device_; }

  // Issues a copy of `bytes` from `src` to `dst`, one of them on the host
  // and the other on device().
  [[nodiscard]] absl::StatusOr<Ticket> Copy(void* dst, Device dst_device,
                                            const void* src, Device src_device,
                                            size_t bytes);
  // Blocks until the copy of `ticket` and every earlier one are done.
  [[nodiscard]] absl::Status Wait(Ticket ticket);
  [[nodiscard]] absl::Status WaitAll();

 private:
  explicit AsyncCopier(Device device) : device_(device) {}
  // Makes stream_ wait for what the legacy default stream has enqueued.
  absl::Status OrderAfterComputeStream();

  const Device device_;
  Ticket issued_ = 0;  // Tickets are 1, 2, ...
  // GPU: the stream, the event pool, and each pending ticket's event,
  // oldest first.
  CudaStream stream_ = nullptr;
  std::unique_ptr<CudaMemoryRuntime> gpu_;
  std::deque<std::pair<Ticket, CudaEvent>> events_;
  absl::Status gpu_error_;
  // Host-backed device: what the copy thread has done, and the thread
  // (last, so that it is joined before the state its tasks touch goes).
  Mutex mu_;
  CondVar done_changed_;
  Ticket done_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status thread_error_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<CopyStream> thread_;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_MEMORY_ASYNC_COPIER_H_
