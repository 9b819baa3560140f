// The few CUDA runtime calls tensor/ needs, behind a build switch.
//
//   if (CudaDeviceCount() > 0) {
//     CZ_ASSIGN_OR_RETURN(void* p, CudaMalloc(/*device_index=*/0, bytes));
//     CZ_RETURN_IF_ERROR(CudaMemcpy(p, host, bytes));
//   }
//
// Built with --config=cuda this links libcudart; otherwise every call returns
// Unimplemented and CudaDeviceCount() is 0, so the rest of the library builds
// and tests on machines without CUDA. Thread-safe as the CUDA runtime is;
// CudaMalloc/CudaFree make `device_index` the calling thread's current
// device.
#ifndef CHUNKZERO_TENSOR_CUDA_RUNTIME_H_
#define CHUNKZERO_TENSOR_CUDA_RUNTIME_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace chunkzero {

// True when this binary was built with --config=cuda.
bool BuiltWithCuda();

// Number of visible GPUs; 0 without CUDA or without a driver.
int CudaDeviceCount();

[[nodiscard]] absl::StatusOr<void*> CudaMalloc(int device_index, size_t bytes);
[[nodiscard]] absl::Status CudaFree(int device_index, void* ptr);

// Copies between any two of host and device memory (unified addressing
// decides the direction) and waits for the copy to finish.
[[nodiscard]] absl::Status CudaMemcpy(void* dst, const void* src, size_t bytes);

}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_CUDA_RUNTIME_H_
