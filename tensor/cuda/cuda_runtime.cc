// CUDA build of cuda_runtime.h (selected by --config=cuda).
#include "tensor/cuda/cuda_runtime.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"

namespace chunkzero {
namespace {

absl::Status FromCuda(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
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
  return absl::InternalError(absl::StrCat("cudaSetDevice(", device_index,
                                          "): ", cudaGetErrorString(error)));
}

}  // namespace

ScopedCudaDevice::ScopedCudaDevice(int device_index) {
  if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
  status_ = SetDevice(device_index);
}

ScopedCudaDevice::~ScopedCudaDevice() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

bool BuiltWithCuda() { return true; }

int CudaDeviceCount() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

absl::StatusOr<void*> CudaMalloc(int device_index, size_t bytes) {
  absl::Status status = FromCuda(cudaSetDevice(device_index), "cudaSetDevice");
  if (!status.ok()) return status;
  void* ptr = nullptr;
  status = FromCuda(cudaMalloc(&ptr, bytes == 0 ? 1 : bytes), "cudaMalloc");
  if (!status.ok()) {
    // An allocation failure is recorded as the thread's last error; the
    // caller may recover (a cache emptied, a retry), so clear it lest the
    // next kernel launch check report it.
    cudaGetLastError();
    return absl::Status(status.code(),
                        absl::StrCat(status.message(), " (", bytes,
                                     " bytes on cuda:", device_index, ")"));
  }
  return ptr;
}

absl::Status CudaFree(int device_index, void* ptr) {
  absl::Status status = FromCuda(cudaSetDevice(device_index), "cudaSetDevice");
  if (!status.ok()) return status;
  return FromCuda(cudaFree(ptr), "cudaFree");
}

absl::Status CudaMemcpy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  return FromCuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy");
}

}  // namespace chunkzero

namespace chunkzero {

absl::StatusOr<CudaStream> CudaStreamCreate(int device_index) {
  absl::Status status = SetDevice(device_index);
  if (!status.ok()) return status;
  cudaStream_t stream = nullptr;
  status = FromCuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
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
  absl::Status status = SetDevice(device_index);
  if (!status.ok()) return status;
  cudaEvent_t event = nullptr;
  status =
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
    cudaGetLastError();  // cudaErrorNotReady is not sticky; clear it.
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
  if (!status.ok()) {
    cudaGetLastError();  // As in CudaMalloc: the caller may recover.
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
  absl::Status status = SetDevice(device_index);
  if (!status.ok()) return status;
  CudaMemoryInfo info;
  status = FromCuda(cudaMemGetInfo(&info.free_bytes, &info.total_bytes),
                    "cudaMemGetInfo");
  if (!status.ok()) return status;
  return info;
}

}  // namespace chunkzero
