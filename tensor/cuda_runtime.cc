// CUDA build of cuda_runtime.h (selected by --config=cuda).
#include "tensor/cuda_runtime.h"

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

}  // namespace

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
