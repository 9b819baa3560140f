// Whole-array fused optimizer kernels that take the ISA to run, over the
// per-call constants already folded from the step (see FoldAdamStep in
// optim/fused_kernels.cc). Private to //optim:fused_kernels, which checks
// the arguments and calls these with BestKernelIsa() or the ISA a test or
// benchmark asks for.
//
//   AdamArrays arrays = {param, exp_avg, exp_avg_sq, grad, DType::kF16,
//                        grad, DType::kF16};
//   ParallelAdam(KernelIsa::kAvx512, constants, arrays, n);
//
// Arrays of kParallelMinElements or more are split over ParallelFor
// (base/parallel_for.h) in ranges that start at multiples of 1024 elements,
// so that each range of a 64-byte aligned array is aligned too. Every
// element is computed independently, so neither the ranges nor the thread
// count change any result.
//
// REQUIRES (every function): IsKernelIsaSupported(isa); dtypes in the
// DType enum; non-null arrays (param_out aside) when n > 0; param_out either
// disjoint from grad or the same array of the same dtype; no other overlap.
#ifndef CHUNKZERO_OPTIM_INTERNAL_FUSED_KERNELS_ISA_H_
#define CHUNKZERO_OPTIM_INTERNAL_FUSED_KERNELS_ISA_H_

#include <cstddef>

#include "optim/internal/fused_constants.h"
#include "tensor/cpu/cpu_features.h"
#include "tensor/dtype.h"

namespace chunkzero {
namespace optim_internal {

// Arrays shorter than this run on the calling thread alone (a ParallelFor
// costs a few microseconds; this is ~1.8 MB of Adam traffic).
inline constexpr size_t kParallelMinElements = size_t{1} << 16;
// Each thread gets at least this many elements.
inline constexpr size_t kParallelGrainElements = size_t{1} << 15;

// The arrays of one call; `grad` and `param_out` hold elements of their
// dtypes; param_out may be null. Kernels index them from 0.
struct AdamArrays {
  float* param;
  float* exp_avg;
  float* exp_avg_sq;
  const void* grad;
  DType grad_dtype;
  void* param_out;
  DType out_dtype;
};
struct SgdArrays {
  float* param;
  float* momentum_buffer;  // Null iff momentum_mode == kNone.
  const void* grad;
  DType grad_dtype;
  void* param_out;
  DType out_dtype;
};
struct AccumulateArrays {
  float* acc;
  const void* grad;
  DType grad_dtype;
  const float* master;
  void* param_out;
  DType out_dtype;
};

void ParallelAdam(KernelIsa isa, const AdamConstants& c, const AdamArrays& a,
                  size_t n);
void ParallelSgd(KernelIsa isa, const SgdConstants& c, const SgdArrays& a,
                 size_t n);
void ParallelAccumulate(KernelIsa isa, bool first, const AccumulateArrays& a,
                        size_t n);

}  // namespace optim_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_OPTIM_INTERNAL_FUSED_KERNELS_ISA_H_
