// MatmulHere: one product with f32 accumulation and an f32 result, of f32
// or of bf16 operands, on the calling thread, through oneDNN's matmul
// primitive (its brgemm kernels: AVX-512 FMAs, AVX512-BF16 dot products or
// AMX tiles, as the processor has them).
//
//   MatmulHere(Operands::kBf16, false, true, m, n, k, 1.0f, a_bits, k,
//              b_bits, k, 0.0f, c, ldc);  // c[m, n] = a[m, k] b[n, k]^T
//
// The operands are row-major with the conventions of gemm::Gemm: A is
// m x k, or stored k x m when trans_a; B is k x n, or stored n x k when
// trans_b. oneDNN reads the transposed ones through their strides, at the
// same speed (measured on every pair, docs/PERFORMANCE.md). A primitive is
// made once per shape and kept in a cache of the calling thread, so the
// steady state of a training step creates none; each call gets its scratch
// memory from the calling thread, so threads never share a buffer. OpenMP
// is held to the calling thread (gemm.h: one thread pool in the process).
//
// Private to gemm.cc, which cuts products into tiles and checks their
// arguments.
#ifndef CHUNKZERO_KERNELS_ONEDNN_MATMUL_H_
#define CHUNKZERO_KERNELS_ONEDNN_MATMUL_H_

#include <string>

#include "oneapi/dnnl/dnnl_types.h"

namespace chunkzero {
namespace gemm {
namespace internal {

// What A and B hold: f32 values, or bf16 bit patterns (uint16_t).
enum class Operands { kF32, kBf16 };

// C[m, n] = alpha * op(A) op(B) + beta * C (with beta == 0, C is only
// written). Returns oneDNN's status; nothing throws.
// REQUIRES: m, n, k >= 1; each leading dimension >= its stored row length.
dnnl_status_t MatmulHere(Operands operands, bool trans_a, bool trans_b, int m,
                         int n, int k, float alpha, const void* a, int lda,
                         const void* b, int ldb, float beta, float* c, int ldc);

// The oneDNN implementation that runs a 256 x 1024 x 256 product of
// `operands`, as oneDNN names it ("brg:avx512_core", "brg:avx512_core_bf16",
// "brg:avx512_core_amx", or a "gemm" or "ref" one where no brgemm kernel
// exists), or "" if oneDNN offers none.
std::string MatmulImplementation(Operands operands);

}  // namespace internal
}  // namespace gemm
}  // namespace chunkzero

#endif  // CHUNKZERO_KERNELS_ONEDNN_MATMUL_H_
