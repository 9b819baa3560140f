#include "optim/internal/fused_step_args.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace chunkzero {
namespace optim_internal {

absl::Status CheckFusedArgs(absl::string_view op, size_t n,
                            std::initializer_list<const void*> required,
                            const void* grad, DType grad_dtype,
                            const void* param_out, DType out_dtype) {
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

AdamConstants FoldAdamStep(const AdamStep& step) {
  AdamConstants c;
  if (step.weight_decay != 0.0f) {
    c.weight_decay_mode = step.decoupled_weight_decay ? WeightDecay::kDecoupled
                                                      : WeightDecay::kCoupled;
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

SgdConstants FoldSgdStep(const SgdStep& step) {
  SgdConstants c;
  if (step.momentum != 0.0f) {
    c.momentum_mode = step.first_step ? Momentum::kFirst : Momentum::kRunning;
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

}  // namespace optim_internal
}  // namespace chunkzero
