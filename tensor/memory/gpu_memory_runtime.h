// What a stream-ordered allocator needs from a GPU runtime: device memory
// and events that tell when a stream's work has finished.
//
//   CudaMemoryRuntime runtime(/*device_index=*/0);     // the real one
//   StreamOrderedAllocator allocator(&runtime, compute_stream);
//
// An interface so that the allocator's logic (when a block may be handed
// out again, what happens when memory runs out) is tested on machines
// without a GPU against a fake
// (tensor/memory/testing/fake_gpu_memory_runtime.h). Implementations must be
// thread-safe.
#ifndef CHUNKZERO_TENSOR_MEMORY_GPU_MEMORY_RUNTIME_H_
#define CHUNKZERO_TENSOR_MEMORY_GPU_MEMORY_RUNTIME_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "tensor/cuda/cuda_handles.h"
#include "tensor/device.h"

namespace chunkzero {

class GpuMemoryRuntime {
 public:
  virtual ~GpuMemoryRuntime() = default;

  virtual Device device() const = 0;

  // Device memory; ResourceExhausted when the device has too little free.
  [[nodiscard]] virtual absl::StatusOr<void*> Malloc(size_t bytes) = 0;
  [[nodiscard]] virtual absl::Status Free(void* ptr) = 0;

  // An event recorded on `stream` now: done once the work enqueued there
  // before this call has finished. Pass it to ReleaseEvent when no longer
  // needed.
  [[nodiscard]] virtual absl::StatusOr<CudaEvent> RecordEvent(
      CudaStream stream) = 0;
  // Whether the event's work has finished, without waiting.
  [[nodiscard]] virtual absl::StatusOr<bool> EventDone(CudaEvent event) = 0;
  // Waits on the host until the event's work has finished.
  [[nodiscard]] virtual absl::Status WaitEvent(CudaEvent event) = 0;
  virtual void ReleaseEvent(CudaEvent event) = 0;
};

// The CUDA runtime's implementation for GPU `device_index`, with a pool of
// events so that recording one costs no cudaEventCreate in the steady
// state. Each call selects the GPU and restores the caller's after
// (ScopedCudaDevice). Also the event pool of the NCCL API and of
// AsyncCopier. In a build without CUDA every call fails with
// Unimplemented.
class CudaMemoryRuntime final : public GpuMemoryRuntime {
 public:
  explicit CudaMemoryRuntime(int device_index) : device_index_(device_index) {}
  CudaMemoryRuntime(const CudaMemoryRuntime&) = delete;
  CudaMemoryRuntime& operator=(const CudaMemoryRuntime&) = delete;
  ~CudaMemoryRuntime() override;

  Device device() const override { return Device::Cuda(device_index_); }
  [[nodiscard]] absl::StatusOr<void*> Malloc(size_t bytes) override;
  [[nodiscard]] absl::Status Free(void* ptr) override;
  [[nodiscard]] absl::StatusOr<CudaEvent> RecordEvent(
      CudaStream stream) override;
  [[nodiscard]] absl::StatusOr<bool> EventDone(CudaEvent event) override;
  [[nodiscard]] absl::Status WaitEvent(CudaEvent event) override;
  void ReleaseEvent(CudaEvent event) override;

 private:
  const int device_index_;
  Mutex mu_;
  std::vector<CudaEvent> idle_events_ ABSL_GUARDED_BY(mu_);
};

}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_MEMORY_GPU_MEMORY_RUNTIME_H_
