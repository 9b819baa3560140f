// Plain C++ fused optimizer kernels: the fallback on any CPU and the
// reference that the vector kernels match bit for bit.
#include "optim/internal/fused_kernel_table.h"

namespace chunkzero {
namespace optim_internal {
namespace {

struct ScalarLoops {
  template <typename G, typename O, WeightDecay kMode>
  static void Adam(const AdamConstants& c, float* param, float* exp_avg,
                   float* exp_avg_sq, const typename G::T* grad,
                   typename O::T* param_out, size_t n) {
    ScalarAdam<G, O, kMode>(c, param, exp_avg, exp_avg_sq, grad, param_out, n);
  }
  template <typename G, typename O>
  static void Sgd(const SgdConstants& c, float* param, float* momentum_buffer,
                  const typename G::T* grad, typename O::T* param_out,
                  size_t n) {
    ScalarSgd<G, O>(c, param, momentum_buffer, grad, param_out, n);
  }
  template <typename G, typename O>
  static void Accumulate(bool first, float* acc, const typename G::T* grad,
                         const float* master, typename O::T* param_out,
                         size_t n) {
    ScalarAccumulate<G, O>(first, acc, grad, master, param_out, n);
  }
};

}  // namespace

const FusedKernelTable& ScalarFusedKernels() {
  static const FusedKernelTable table = MakeFusedKernelTable<ScalarLoops>();
  return table;
}

const FusedKernelTable& GetFusedKernelTable(KernelIsa isa) {
#if CHUNKZERO_KERNELS_X86
  if (isa == KernelIsa::kAvx512) return Avx512FusedKernels();
  if (isa == KernelIsa::kAvx2) return Avx2FusedKernels();
#endif
  return ScalarFusedKernels();
}

}  // namespace optim_internal
}  // namespace chunkzero
