// CUDA build of cuda_runtime.h (selected by --config=cuda).
#include "tensor/cuda/cuda_runtime.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"

namespace chunkzero {
namespace {

// Every failing call's error is also recorded as the thread's last error.
// A non-sticky one (a bad argument, an invalid device, memory exhausted)
// would then be reported by the next kernel launch's check as that
// kernel's own, so it is cleared here, where it happened; a sticky error
// (the context is lost) stays whatever is done.
absl::Status FromCuda(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();
  const absl::StatusCode code = error == cudaErrorMemoryAllocation
                                    ? absl::StatusCode::kResourceExhausted
                                    : absl::StatusCode::kInternal;
  return absl::Status(code,
                      absl::StrCat(what, ": ", cudaGetErrorString(error)));
}

cudaStream_t Raw(CudaStream stream) {
  return reinterpret_cast<cudaStream_t>(stream);
}
cudaEvent_t Raw(CudaEvent event) {
  return reinterpret_cast<cudaEvent_t>(event);
}

absl::Status SetDevice(int device_index) {
  const cudaError_t error = cudaSetDevice(device_index);
  if (error == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();  // Not sticky: see FromCuda.
  return absl::InternalError(absl::StrCat("cudaSetDevice(", device_index,
                                          "): ", cudaGetErrorString(error)));
}

}  // namespace

ScopedCudaDevice::ScopedCudaDevice(int device_index) {
  if (cudaGetDevice(&previous_) != cudaSuccess) {
    cudaGetLastError();
    previous_ = -1;
  }
  status_ = SetDevice(device_index);
}

ScopedCudaDevice::~ScopedCudaDevice() {
  if (previous_ >= 0 && cudaSetDevice(previous_) != cudaSuccess) {
    cudaGetLastError();  // Nothing to report it to; do not leave it behind.
  }
}

int CudaCurrentDevice() {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return device;
}

absl::Status CudaPendingError() {
  const cudaError_t error = cudaPeekAtLastError();
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("pending CUDA error: ", cudaGetErrorString(error)));
}

bool BuiltWithCuda() { return true; }

int CudaDeviceCount() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

absl::StatusOr<void*> CudaMalloc(int device_index, size_t bytes) {
  ScopedCudaDevice on_gpu(device_index);
  if (!on_gpu.status().ok()) return on_gpu.status();
  void* ptr = nullptr;
  // A failure is cleared (FromCuda): the caller may recover (a cache
  // emptied, a retry).
  const absl::Status status =
      FromCuda(cudaMalloc(&ptr, bytes == 0 ? 1 : bytes), "cudaMalloc");
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat(status.message(), " (", bytes,
                                     " bytes on cuda:", device_index, ")"));
  }
  return ptr;
}

absl::Status CudaFree(int device_index, void* ptr) {
  ScopedCudaDevice on_gpu(device_index);
  if (!on_gpu.status().ok()) return on_gpu.status();
  return FromCuda(cudaFree(ptr), "cudaFree");
}

absl::Status CudaMemcpy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  return FromCuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy");
}

}  // namespace chunkzero

namespace chunkzero {

absl::StatusOr<CudaStream> CudaStreamCreate(int device_index) {
  ScopedCudaDevice on_gpu(device_index);
  if (!on_gpu.status().ok()) return on_gpu.status();
  cudaStream_t stream = nullptr;
  const absl::Status status =
      FromCuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
               "cudaStreamCreateWithFlags");
  if (!status.ok()) return status;
  return reinterpret_cast<CudaStream>(stream);
}

absl::Status CudaStreamDestroy(CudaStream stream) {
  return FromCuda(cudaStreamDestroy(Raw(stream)), "cudaStreamDestroy");
}

absl::Status CudaStreamSynchronize(CudaStream stream) {
  return FromCuda(cudaStreamSynchronize(Raw(stream)), "cudaStreamSynchronize");
}

absl::Status CudaStreamWaitEvent(CudaStream stream, CudaEvent event) {
  return FromCuda(cudaStreamWaitEvent(Raw(stream), Raw(event), 0),
                  "cudaStreamWaitEvent");
}

absl::StatusOr<CudaEvent> CudaEventCreate(int device_index, bool timing) {
  ScopedCudaDevice on_gpu(device_index);
  if (!on_gpu.status().ok()) return on_gpu.status();
  cudaEvent_t event = nullptr;
  const absl::Status status =
      FromCuda(cudaEventCreateWithFlags(
                   &event, timing ? cudaEventDefault : cudaEventDisableTiming),
               "cudaEventCreateWithFlags");
  if (!status.ok()) return status;
  return reinterpret_cast<CudaEvent>(event);
}

absl::StatusOr<float> CudaEventElapsedMs(CudaEvent start, CudaEvent end) {
  float ms = 0;
  absl::Status status = FromCuda(
      cudaEventElapsedTime(&ms, Raw(start), Raw(end)), "cudaEventElapsedTime");
  if (!status.ok()) return status;
  return ms;
}

absl::Status CudaEventDestroy(CudaEvent event) {
  return FromCuda(cudaEventDestroy(Raw(event)), "cudaEventDestroy");
}

absl::Status CudaEventRecord(CudaEvent event, CudaStream stream) {
  return FromCuda(cudaEventRecord(Raw(event), Raw(stream)), "cudaEventRecord");
}

absl::StatusOr<bool> CudaEventQuery(CudaEvent event) {
  const cudaError_t error = cudaEventQuery(Raw(event));
  if (error == cudaSuccess) return true;
  if (error == cudaErrorNotReady) {
    // Not a failure, but some runtimes record it as the last error (PyTorch
    // clears it too); it is not sticky.
    cudaGetLastError();
    return false;
  }
  return FromCuda(error, "cudaEventQuery");
}

absl::Status CudaEventSynchronize(CudaEvent event) {
  return FromCuda(cudaEventSynchronize(Raw(event)), "cudaEventSynchronize");
}

absl::Status CudaMemcpyAsync(void* dst, const void* src, size_t bytes,
                             CudaStream stream) {
  if (bytes == 0) return absl::OkStatus();
  return FromCuda(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, Raw(stream)),
      "cudaMemcpyAsync");
}

absl::StatusOr<void*> CudaHostAlloc(size_t bytes) {
  void* ptr = nullptr;
  const absl::Status status = FromCuda(
      cudaHostAlloc(&ptr, bytes == 0 ? 1 : bytes, cudaHostAllocPortable),
      "cudaHostAlloc");
  if (!status.ok()) {  // Cleared (FromCuda): the caller may recover.
    return absl::Status(status.code(),
                        absl::StrCat(status.message(), " (", bytes,
                                     " bytes of pinned memory)"));
  }
  return ptr;
}

absl::Status CudaHostFree(void* ptr) {
  return FromCuda(cudaFreeHost(ptr), "cudaFreeHost");
}

absl::StatusOr<bool> CudaIsPinned(const void* ptr) {
  cudaPointerAttributes attributes;
  const absl::Status status = FromCuda(
      cudaPointerGetAttributes(&attributes, ptr), "cudaPointerGetAttributes");
  if (!status.ok()) return status;
  return attributes.type == cudaMemoryTypeHost;
}

bool CudaIsDeviceMemory(const void* ptr) {
  if (ptr == nullptr) return false;
  cudaPointerAttributes attributes;
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    cudaGetLastError();  // Not a CUDA pointer (or no GPU): not sticky.
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice ||
         attributes.type == cudaMemoryTypeManaged;
}

absl::StatusOr<CudaMemoryInfo> CudaMemGetInfo(int device_index) {
  ScopedCudaDevice on_gpu(device_index);
  if (!on_gpu.status().ok()) return on_gpu.status();
  CudaMemoryInfo info;
  const absl::Status status = FromCuda(
      cudaMemGetInfo(&info.free_bytes, &info.total_bytes), "cudaMemGetInfo");
  if (!status.ok()) return status;
  return info;
}

}  // namespace chunkzero
