#include "optim/fused_kernels.h"

#include <cstdint>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"
#include "optim/internal/fused_kernels_isa.h"
#include "optim/internal/fused_step_args.h"

namespace chunkzero {
namespace {

namespace oi = optim_internal;

// The ISA must run here; then fused_step_args.h's rules.
absl::Status CheckArgs(absl::string_view op, KernelIsa isa, size_t n,
                       std::initializer_list<const void*> required,
                       const void* grad, DType grad_dtype,
                       const void* param_out, DType out_dtype) {
  if (!IsKernelIsaSupported(isa)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": this CPU cannot run ", KernelIsaName(isa)));
  }
  return oi::CheckFusedArgs(op, n, required, grad, grad_dtype, param_out,
                            out_dtype);
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
      isa, oi::FoldAdamStep(step),
      {param, exp_avg, exp_avg_sq, grad, grad_dtype, param_out, out_dtype}, n);
  return absl::OkStatus();
}

absl::Status FusedSgd(KernelIsa isa, const SgdStep& step, float* param,
                      float* momentum_buffer, const void* grad,
                      DType grad_dtype, void* param_out, DType out_dtype,
                      size_t n) {
  const oi::SgdConstants c = oi::FoldSgdStep(step);
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
