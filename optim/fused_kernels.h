// Fused mixed-precision optimizer kernels: one pass over a shard that reads
// the gradient (f32, f16 or bf16), updates the fp32 master weights and the
// optimizer states in place, and writes the updated weights back in the
// compute dtype.
//
//   AdamStep step;                          // lr, betas, eps, ...
//   step.bias_correction1 = 1 - std::pow(step.beta1, t);
//   step.bias_correction2_sqrt = std::sqrt(1 - std::pow(step.beta2, t));
//   CZ_RETURN_IF_ERROR(FusedAdam(step, master, exp_avg, exp_avg_sq,
//                                grad16, DType::kF16, /*param_out=*/grad16,
//                                DType::kF16, n));   // grad reuse
//
// Element math (PyTorch's names and semantics), in f32, in exactly this
// order, never with a fused multiply-add:
//   g = f32(grad[i]) * grad_scale
//   Adam:  p = param[i]
//          weight_decay != 0, Adam:   g = g + weight_decay * p
//          weight_decay != 0, AdamW:  p = p * (1 - lr * weight_decay)
//          m = beta1 * m + (1 - beta1) * g
//          v = beta2 * v + (1 - beta2) * (g * g)
//          denom = sqrt(v) / bias_correction2_sqrt + eps
//          p = p - (lr / bias_correction1) * (m / denom)
//   SGD:   p = param[i]
//          weight_decay != 0:  g = g + weight_decay * p
//          momentum != 0:      buf = first_step ? g
//                                    : momentum * buf + (1 - dampening) * g
//                              g = nesterov ? g + momentum * buf : buf
//          p = p - lr * g
//   then param[i] = p, the states are stored, param_out[i] = round(p).
// Factors derived from the step (1 - beta1, lr / bias_correction1,
// 1 - lr * weight_decay, ...) are computed once per call in f32. Rounding to
// f16/bf16 is to nearest even, as in tensor/half.h.
//
// Results are bit-identical whichever implementation runs (AVX-512,
// AVX2+F16C or plain C++, see tensor/cpu/cpu_features.h) and however many
// threads run it, except for the payload of a NaN made from several NaN
// inputs. Inf and NaN propagate as IEEE arithmetic says. Arrays of 64K
// elements or more are split over threads (base/parallel_for.h).
//
// Thread-safety: any number of threads may run kernels at once on disjoint
// arrays. The results assume the default floating-point environment (MXCSR
// with round-to-nearest and no DAZ/FTZ).
#ifndef CHUNKZERO_OPTIM_FUSED_KERNELS_H_
#define CHUNKZERO_OPTIM_FUSED_KERNELS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "optim/fused_step.h"
#include "tensor/cpu/cpu_features.h"
#include "tensor/dtype.h"

namespace chunkzero {

// Array rules shared by the three kernels (n elements each):
//  - `grad` holds `grad_dtype` (f32, f16 or bf16) elements; the f32 arrays
//    (param / master, states, acc) are updated in place.
//  - `param_out` receives the updated param rounded to `out_dtype`; it may
//    be null (then only the f32 arrays are written).
//  - `param_out` may be the very same memory as `grad` (grad reuse: the
//    grad lives in the param's compute-dtype slot), which requires
//    grad_dtype == out_dtype. REQUIRES: no other arrays overlap.
// Each returns InvalidArgument, having written nothing, for a required array
// that is null while n > 0, a dtype outside the DType enum, or a param_out
// that overlaps grad other than as the same array of the same dtype.

// One fused Adam/AdamW pass over param, exp_avg, exp_avg_sq (f32, in place).
[[nodiscard]] absl::Status FusedAdam(const AdamStep& step, float* param,
                                     float* exp_avg, float* exp_avg_sq,
                                     const void* grad, DType grad_dtype,
                                     void* param_out, DType out_dtype,
                                     size_t n);

// One fused SGD pass over param (f32, in place). momentum_buffer may be null
// iff step.momentum == 0 (it is neither read nor written then).
[[nodiscard]] absl::Status FusedSgd(const SgdStep& step, float* param,
                                    float* momentum_buffer, const void* grad,
                                    DType grad_dtype, void* param_out,
                                    DType out_dtype, size_t n);

// Gradient accumulation over micro-batches with grad reuse:
//   acc[i] = (first ? 0 : acc[i]) + f32(grad[i])
//   param_out[i] = out_dtype(master[i])
// which restores the weights that the grad overwrote. `master` is only read.
[[nodiscard]] absl::Status AccumulateGradAndRestore(
    float* acc, const void* grad, DType grad_dtype, bool first,
    const float* master, void* param_out, DType out_dtype, size_t n);

namespace optim_internal {

// The same kernels run with the implementation `isa` instead of
// BestKernelIsa(), for tests and benchmarks. Same arguments, results and
// errors as above; also InvalidArgument if !IsKernelIsaSupported(isa).
[[nodiscard]] absl::Status FusedAdam(KernelIsa isa, const AdamStep& step,
                                     float* param, float* exp_avg,
                                     float* exp_avg_sq, const void* grad,
                                     DType grad_dtype, void* param_out,
                                     DType out_dtype, size_t n);
[[nodiscard]] absl::Status FusedSgd(KernelIsa isa, const SgdStep& step,
                                    float* param, float* momentum_buffer,
                                    const void* grad, DType grad_dtype,
                                    void* param_out, DType out_dtype, size_t n);
[[nodiscard]] absl::Status AccumulateGradAndRestore(
    KernelIsa isa, float* acc, const void* grad, DType grad_dtype, bool first,
    const float* master, void* param_out, DType out_dtype, size_t n);

}  // namespace optim_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_OPTIM_FUSED_KERNELS_H_
