// Plain C++ kernels: the fallback on any CPU and the reference that the
// vector kernels match bit for bit.
#include "tensor/internal/kernel_table.h"

namespace chunkzero {
namespace kernels_internal {
namespace {

template <typename To, typename From>
void Cast(typename To::T* out, const typename From::T* in, size_t n,
          bool /*stream*/) {
  ScalarCast<To, From>(out, in, n);
}

template <typename D>
double BlockSumSquares(const typename D::T* x, size_t n) {
  double lanes[kSumLanes] = {};
  ScalarAddSquares<D>(lanes, x, n);
  return CombineLanes(lanes);
}

}  // namespace

const KernelTable& ScalarKernels() {
  static const KernelTable table = [] {
    KernelTable t;
    t.cast_f32_to_f16 = &Cast<F16, F32>;
    t.cast_f16_to_f32 = &Cast<F32, F16>;
    t.cast_f32_to_bf16 = &Cast<BF16, F32>;
    t.cast_bf16_to_f32 = &Cast<F32, BF16>;
    t.scale_f32 = &ScalarScale<F32>;
    t.scale_f16 = &ScalarScale<F16>;
    t.scale_bf16 = &ScalarScale<BF16>;
    t.axpy_f32 = &ScalarAxpy<F32>;
    t.axpy_f16 = &ScalarAxpy<F16>;
    t.axpy_bf16 = &ScalarAxpy<BF16>;
    t.has_inf_or_nan_f32 = &ScalarHasInfOrNan<F32>;
    t.has_inf_or_nan_f16 = &ScalarHasInfOrNan<F16>;
    t.has_inf_or_nan_bf16 = &ScalarHasInfOrNan<BF16>;
    t.block_sum_squares_f32 = &BlockSumSquares<F32>;
    t.block_sum_squares_f16 = &BlockSumSquares<F16>;
    t.block_sum_squares_bf16 = &BlockSumSquares<BF16>;
    return t;
  }();
  return table;
}

const KernelTable& GetKernelTable(KernelIsa isa) {
#if CHUNKZERO_KERNELS_X86
  if (isa == KernelIsa::kAvx512) return Avx512Kernels();
  if (isa == KernelIsa::kAvx2) return Avx2Kernels();
#endif
  return ScalarKernels();
}

}  // namespace kernels_internal
}  // namespace chunkzero
