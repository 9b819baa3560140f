// The cuBLAS call behind CudaGemm (kernels/cuda_gemm.h), after its
// arguments were checked: the CUDA build's cublasGemmStridedBatchedEx, or
// Unimplemented without --config=cuda.
#ifndef CHUNKZERO_KERNELS_INTERNAL_CUBLAS_CALL_H_
#define CHUNKZERO_KERNELS_INTERNAL_CUBLAS_CALL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda_gemm.h"

namespace chunkzero {
namespace gemm_internal {

// Row-major arguments, as CudaGemm's; valid.
[[nodiscard]] absl::Status CublasGemm(gemm::Transpose trans_a,
                                      gemm::Transpose trans_b, int m, int n,
                                      int k, float alpha, gemm::DeviceMatrix a,
                                      gemm::DeviceMatrix b, float beta,
                                      float* c, int ldc,
                                      gemm::Precision precision, int batch,
                                      int64_t stride_c, CudaStream stream);

}  // namespace gemm_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_KERNELS_INTERNAL_CUBLAS_CALL_H_
