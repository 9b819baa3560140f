// Plain C++ kernels: the fallback on any CPU and the reference that the
// vector kernels match bit for bit.
#include "tensor/cpu/internal/kernel_table.h"

namespace chunkzero {
namespace kernels_internal {
namespace {

struct ScalarLoops {
  template <typename To, typename From>
  static void Cast(typename To::T* out, const typename From::T* in, size_t n,
                   bool /*stream*/) {
    ScalarCast<To, From>(out, in, n);
  }
  template <typename D>
  static void Scale(typename D::T* x, float a, size_t n) {
    ScalarScale<D>(x, a, n);
  }
  template <typename D>
  static void Axpy(typename D::T* y, float a, const typename D::T* x,
                   size_t n) {
    ScalarAxpy<D>(y, a, x, n);
  }
  template <typename D>
  static bool HasInfOrNan(const typename D::T* x, size_t n) {
    return ScalarHasInfOrNan<D>(x, n);
  }
  template <typename D>
  static double BlockSumSquares(const typename D::T* x, size_t n) {
    double lanes[kSumLanes] = {};
    ScalarAddSquares<D>(lanes, x, n);
    return CombineLanes(lanes);
  }
};

}  // namespace

const KernelTable& ScalarKernels() {
  static const KernelTable table = MakeKernelTable<ScalarLoops>();
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
