// gemm_internal::CublasGemm without --config=cuda: nothing runs on a GPU.
#include "kernels/internal/cublas_call.h"

namespace chunkzero {
namespace gemm_internal {

absl::Status CublasGemm(gemm::Transpose, gemm::Transpose, int, int, int, float,
                        gemm::DeviceMatrix, gemm::DeviceMatrix, float, float*,
                        int, gemm::Precision, int, int64_t, CudaStream) {
  return absl::UnimplementedError(
      "cuBLAS: this binary was built without --config=cuda");
}

}  // namespace gemm_internal
}  // namespace chunkzero
