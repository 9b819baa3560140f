#include "optim/fused_kernels.h"

#include <cstdint>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"
#include "optim/internal/fused_kernels_isa.h"

namespace chunkzero {
namespace {

namespace oi = optim_internal;

// The argument rules of fused_kernels.h: known dtypes, non-null required
// arrays, and param_out either disjoint from grad or the same array of the
// same dtype (grad reuse).
absl::Status CheckArgs(absl::string_view op, KernelIsa isa, size_t n,
                       std::initializer_list<const void*> required,
                       const void* grad, DType grad_dtype,
                       const void* param_out, DType out_dtype) {
  if (!IsKernelIsaSupported(isa)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": this CPU cannot run ", KernelIsaName(isa)));
  }
  for (DType dtype : {grad_dtype, out_dtype}) {
    CZ_RETURN_IF_ERROR(CheckComputeDType(dtype, op));
  }
  if (n == 0) return absl::OkStatus();
  for (const void* array : required) {
    if (array == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": null array for ", n, " elements"));
    }
  }
  if (param_out == nullptr) return absl::OkStatus();
  const auto grad_begin = reinterpret_cast<uintptr_t>(grad);
  const auto out_begin = reinterpret_cast<uintptr_t>(param_out);
  const bool overlap = grad_begin < out_begin + n * ElementSize(out_dtype) &&
                       out_begin < grad_begin + n * ElementSize(grad_dtype);
  if (overlap && (grad_begin != out_begin || grad_dtype != out_dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": param_out (", DTypeName(out_dtype),
                     ") overlaps grad (", DTypeName(grad_dtype),
                     ") without being the same array of the same dtype"));
  }
  return absl::OkStatus();
}

// Derived factors, computed once in f32 (the same for every ISA and thread).
oi::AdamConstants FoldAdamStep(const AdamStep& step) {
  oi::AdamConstants c;
  if (step.weight_decay != 0.0f) {
    c.weight_decay_mode = step.decoupled_weight_decay
                              ? oi::WeightDecay::kDecoupled
                              : oi::WeightDecay::kCoupled;
  }
  c.grad_scale = step.grad_scale;
  c.weight_decay = step.weight_decay;
  c.decay_factor = 1.0f - step.lr * step.weight_decay;
  c.beta1 = step.beta1;
  c.one_minus_beta1 = 1.0f - step.beta1;
  c.beta2 = step.beta2;
  c.one_minus_beta2 = 1.0f - step.beta2;
  c.bias_correction2_sqrt = step.bias_correction2_sqrt;
  c.eps = step.eps;
  c.step_size = step.lr / step.bias_correction1;
  return c;
}

oi::SgdConstants FoldSgdStep(const SgdStep& step) {
  oi::SgdConstants c;
  if (step.momentum != 0.0f) {
    c.momentum_mode =
        step.first_step ? oi::Momentum::kFirst : oi::Momentum::kRunning;
  }
  c.has_weight_decay = step.weight_decay != 0.0f;
  c.nesterov = step.nesterov;
  c.grad_scale = step.grad_scale;
  c.weight_decay = step.weight_decay;
  c.momentum = step.momentum;
  c.one_minus_dampening = 1.0f - step.dampening;
  c.lr = step.lr;
  return c;
}

}  // namespace

namespace optim_internal {

absl::Status FusedAdam(KernelIsa isa, const AdamStep& step, float* param,
                       float* exp_avg, float* exp_avg_sq, const void* grad,
                       DType grad_dtype, void* param_out, DType out_dtype,
                       size_t n) {
  if (absl::Status status =
          CheckArgs("FusedAdam", isa, n, {param, exp_avg, exp_avg_sq, grad},
                    grad, grad_dtype, param_out, out_dtype);
      !status.ok()) {
    return status;
  }
  ParallelAdam(
      isa, FoldAdamStep(step),
      {param, exp_avg, exp_avg_sq, grad, grad_dtype, param_out, out_dtype}, n);
  return absl::OkStatus();
}

absl::Status FusedSgd(KernelIsa isa, const SgdStep& step, float* param,
                      float* momentum_buffer, const void* grad,
                      DType grad_dtype, void* param_out, DType out_dtype,
                      size_t n) {
  const oi::SgdConstants c = FoldSgdStep(step);
  const bool uses_buffer = c.momentum_mode != oi::Momentum::kNone;
  if (absl::Status status =
          CheckArgs("FusedSgd", isa, n,
                    {param, grad, uses_buffer ? momentum_buffer : param}, grad,
                    grad_dtype, param_out, out_dtype);
      !status.ok()) {
    return status;
  }
  ParallelSgd(isa, c,
              {param, uses_buffer ? momentum_buffer : nullptr, grad, grad_dtype,
               param_out, out_dtype},
              n);
  return absl::OkStatus();
}

absl::Status AccumulateGradAndRestore(KernelIsa isa, float* acc,
                                      const void* grad, DType grad_dtype,
                                      bool first, const float* master,
                                      void* param_out, DType out_dtype,
                                      size_t n) {
  if (absl::Status status =
          CheckArgs("AccumulateGradAndRestore", isa, n, {acc, grad, master},
                    grad, grad_dtype, param_out, out_dtype);
      !status.ok()) {
    return status;
  }
  ParallelAccumulate(isa, first,
                     {acc, grad, grad_dtype, master, param_out, out_dtype}, n);
  return absl::OkStatus();
}

}  // namespace optim_internal

absl::Status FusedAdam(const AdamStep& step, float* param, float* exp_avg,
                       float* exp_avg_sq, const void* grad, DType grad_dtype,
                       void* param_out, DType out_dtype, size_t n) {
  return optim_internal::FusedAdam(BestKernelIsa(), step, param, exp_avg,
                                   exp_avg_sq, grad, grad_dtype, param_out,
                                   out_dtype, n);
}

absl::Status FusedSgd(const SgdStep& step, float* param, float* momentum_buffer,
                      const void* grad, DType grad_dtype, void* param_out,
                      DType out_dtype, size_t n) {
  return optim_internal::FusedSgd(BestKernelIsa(), step, param, momentum_buffer,
                                  grad, grad_dtype, param_out, out_dtype, n);
}

absl::Status AccumulateGradAndRestore(float* acc, const void* grad,
                                      DType grad_dtype, bool first,
                                      const float* master, void* param_out,
                                      DType out_dtype, size_t n) {
  return optim_internal::AccumulateGradAndRestore(BestKernelIsa(), acc, grad,
                                                  grad_dtype, first, master,
                                                  param_out, out_dtype, n);
}

}  // namespace chunkzero
