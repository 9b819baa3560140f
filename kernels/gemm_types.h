// What a matrix product of the model is asked for, on the CPU
// (kernels/gemm.h) or a GPU (kernels/cuda_gemm.h).
#ifndef CHUNKZERO_KERNELS_GEMM_TYPES_H_
#define CHUNKZERO_KERNELS_GEMM_TYPES_H_

namespace chunkzero {
namespace gemm {

enum class Transpose { kNo, kYes };

// What the products multiply. kBf16 is torch.autocast's bf16 matmul: A and B
// rounded to bf16 (to nearest, ties to even), the products accumulated in
// f32, C in f32 (not rounded).
enum class Precision { kF32, kBf16 };

}  // namespace gemm
}  // namespace chunkzero

#endif  // CHUNKZERO_KERNELS_GEMM_TYPES_H_
