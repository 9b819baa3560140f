// CudaGemm: the model's matrix products on a GPU, through cuBLAS.
//
//   CZ_RETURN_IF_ERROR(CudaGemm(kNo, kYes, m, n, k, 1.0f, {a, k}, {b, k},
//                               0.0f, c, n, gemm::Precision::kBf16));
//
// The contract of gemm::Gemm (kernels/gemm.h), on device memory:
// row-major C[m, n] = alpha op(A) op(B) + beta C, with `batch` products
// side by side (matrix i of each operand `stride` elements after matrix
// i - 1), as the attention's heads need. Every pointer is memory of the
// current GPU. The products are enqueued on `stream` (the compute stream,
// kComputeStream, unless given) and the host does not wait for them.
//
// Precision. kF32 multiplies f32 values in f32 (SGEMM arithmetic: no TF32,
// no reduced-precision reductions). kBf16 multiplies bf16 bit patterns
// (A and B hold uint16_t) on tensor cores, accumulating the exact products
// in f32 into an f32 C: torch.autocast's bf16 matmul, as on the CPU. The
// order of the additions is cuBLAS's, so results match the CPU products
// to rounding, not bit for bit.
//
// Errors: InvalidArgument for negative sizes, a batch below 1, or a leading
// dimension shorter than its stored row, checked before anything runs;
// Internal naming cuBLAS's error; Unimplemented without --config=cuda.
// Thread-safety: any thread may call it; each thread uses its own cuBLAS
// handle per GPU.
#ifndef CHUNKZERO_KERNELS_CUDA_GEMM_H_
#define CHUNKZERO_KERNELS_CUDA_GEMM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/gemm_types.h"
#include "tensor/cuda/cuda_handles.h"

namespace chunkzero {
namespace gemm {

// An operand in GPU memory: f32 values for kF32 products, bf16 bit
// patterns for kBf16; its leading dimension; and in a batch, the elements
// from one matrix to the next.
struct DeviceMatrix {
  const void* data = nullptr;
  int ld = 0;
  int64_t stride = 0;
};

[[nodiscard]] absl::Status CudaGemm(Transpose trans_a, Transpose trans_b, int m,
                                    int n, int k, float alpha, DeviceMatrix a,
                                    DeviceMatrix b, float beta, float* c,
                                    int ldc, Precision precision, int batch = 1,
                                    int64_t stride_c = 0,
                                    CudaStream stream = kComputeStream);

}  // namespace gemm
}  // namespace chunkzero

#endif  // CHUNKZERO_KERNELS_CUDA_GEMM_H_
