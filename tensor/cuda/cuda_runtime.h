// The few CUDA runtime calls tensor/ needs, behind a build switch.
//
//   if (CudaDeviceCount() > 0) {
//     CZ_ASSIGN_OR_RETURN(void* p, CudaMalloc(/*device_index=*/0, bytes));
//     CZ_RETURN_IF_ERROR(CudaMemcpy(p, host, bytes));
//   }
//
// Built with --config=cuda this links libcudart; otherwise every call returns
// Unimplemented and CudaDeviceCount() is 0, so the rest of the library builds
// and tests on machines without CUDA. Thread-safe as the CUDA runtime is.
// A call given a device_index selects that GPU for itself and restores the
// calling thread's current GPU before it returns. A call that fails clears
// the CUDA error it left (unless the context is lost), so that the next
// kernel launch does not report it as its own.
#ifndef CHUNKZERO_TENSOR_CUDA_CUDA_RUNTIME_H_
#define CHUNKZERO_TENSOR_CUDA_CUDA_RUNTIME_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensor/cuda/cuda_handles.h"

namespace chunkzero {

// True when this binary was built with --config=cuda.
bool BuiltWithCuda();

// Number of visible GPUs; 0 without CUDA or without a driver.
int CudaDeviceCount();

// The calling thread's current GPU; -1 without CUDA or a GPU.
int CudaCurrentDevice();
// The error the thread's last CUDA call left behind, without clearing it
// (OK if none): what the next launch check would report.
[[nodiscard]] absl::Status CudaPendingError();

// Makes GPU `device_index` the calling thread's current GPU for the scope
// and restores the previous one after, so that events, streams (the legacy
// default stream above all) and kernels meet in one context whichever
// thread calls. status() says whether the GPU could be selected
// (Unimplemented without CUDA).
class ScopedCudaDevice {
 public:
  explicit ScopedCudaDevice(int device_index);
  ~ScopedCudaDevice();
  ScopedCudaDevice(const ScopedCudaDevice&) = delete;
  ScopedCudaDevice& operator=(const ScopedCudaDevice&) = delete;
  const absl::Status& status() const { return status_; }

 private:
  int previous_ = -1;
  absl::Status status_;
};

[[nodiscard]] absl::StatusOr<void*> CudaMalloc(int device_index, size_t bytes);
[[nodiscard]] absl::Status CudaFree(int device_index, void* ptr);

// Copies between any two of host and device memory (unified addressing
// decides the direction) and waits for the copy to finish.
[[nodiscard]] absl::Status CudaMemcpy(void* dst, const void* src, size_t bytes);

// ---- Streams and events ----
//
// Handles: tensor/cuda/cuda_handles.h. Streams made here do not synchronise
// with the null (legacy default) stream.

[[nodiscard]] absl::StatusOr<CudaStream> CudaStreamCreate(int device_index);
[[nodiscard]] absl::Status CudaStreamDestroy(CudaStream stream);
// Waits on the host for everything enqueued on `stream` so far.
[[nodiscard]] absl::Status CudaStreamSynchronize(CudaStream stream);
// Makes work enqueued on `stream` from now on wait for `event`, without the
// host waiting.
[[nodiscard]] absl::Status CudaStreamWaitEvent(CudaStream stream,
                                               CudaEvent event);

// Events for ordering and completion; without `timing` (the cheap kind)
// unless they are to be passed to CudaEventElapsedMs.
[[nodiscard]] absl::StatusOr<CudaEvent> CudaEventCreate(int device_index,
                                                        bool timing = false);
// Milliseconds between two completed timing events.
[[nodiscard]] absl::StatusOr<float> CudaEventElapsedMs(CudaEvent start,
                                                       CudaEvent end);
[[nodiscard]] absl::Status CudaEventDestroy(CudaEvent event);
[[nodiscard]] absl::Status CudaEventRecord(CudaEvent event, CudaStream stream);
// True once the work the event last recorded has finished (or if it was
// never recorded); an error if that work failed.
[[nodiscard]] absl::StatusOr<bool> CudaEventQuery(CudaEvent event);
[[nodiscard]] absl::Status CudaEventSynchronize(CudaEvent event);

// Enqueues a copy on `stream` and returns at once. Host memory must be
// pinned (CudaHostAlloc) for the copy to overlap anything; from pageable
// memory CUDA stages it and may return only when it is done.
[[nodiscard]] absl::Status CudaMemcpyAsync(void* dst, const void* src,
                                           size_t bytes, CudaStream stream);

// ---- Pinned (page-locked) host memory ----
//
// Host memory the GPU's copy engines read and write directly, so that
// copies run asynchronously at full bus speed. Portable: usable with every
// GPU of the process.
[[nodiscard]] absl::StatusOr<void*> CudaHostAlloc(size_t bytes);
[[nodiscard]] absl::Status CudaHostFree(void* ptr);
// True if `ptr` points into memory from CudaHostAlloc.
[[nodiscard]] absl::StatusOr<bool> CudaIsPinned(const void* ptr);
// True if `ptr` points into a GPU's memory (cudaMalloc, or managed
// memory); false for host memory, pinned or not, and without CUDA or a GPU.
bool CudaIsDeviceMemory(const void* ptr);

// Free and total memory of a GPU, in bytes.
struct CudaMemoryInfo {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};
[[nodiscard]] absl::StatusOr<CudaMemoryInfo> CudaMemGetInfo(int device_index);

}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_CUDA_CUDA_RUNTIME_H_
