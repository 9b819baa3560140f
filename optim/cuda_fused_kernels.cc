// One source for both builds: the argument checks, then the kernels
// (optim/internal/cuda_fused_kernels_nvcc.h), which without --config=cuda
// are a stub that returns kNoCuda (Unimplemented here).
#include "optim/cuda_fused_kernels.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "optim/internal/cuda_fused_kernels_nvcc.h"
#include "optim/internal/fused_step_args.h"

namespace chunkzero {
namespace {

namespace oi = optim_internal;

oi::cuda::Element ElementOf(DType dtype, const void* array) {
  if (array == nullptr) return oi::cuda::Element::kNone;
  switch (dtype) {
    case DType::kF16:
      return oi::cuda::Element::kF16;
    case DType::kBF16:
      return oi::cuda::Element::kBF16;
    default:  // CheckFusedArgs allowed only the compute dtypes.
      return oi::cuda::Element::kF32;
  }
}

// OK, Unimplemented without CUDA, Internal for a failed launch.
absl::Status Launched(int error, const char* op, size_t n) {
  if (error == 0) return absl::OkStatus();
  const std::string message = absl::StrCat(
      op, " over ", n, " elements on the GPU: ", oi::cuda::ErrorName(error));
  return error == oi::cuda::kNoCuda ? absl::UnimplementedError(message)
                                    : absl::InternalError(message);
}

}  // namespace

absl::Status CudaFusedAdam(const AdamStep& step, float* param, float* exp_avg,
                           float* exp_avg_sq, const void* grad,
                           DType grad_dtype, void* param_out, DType out_dtype,
                           size_t n, CudaStream stream) {
  const char* op = "CudaFusedAdam";
  if (absl::Status status =
          oi::CheckFusedArgs(op, n, {param, exp_avg, exp_avg_sq, grad}, grad,
                             grad_dtype, param_out, out_dtype);
      !status.ok()) {
    return status;
  }
  return Launched(
      oi::cuda::Adam(oi::FoldAdamStep(step), param, exp_avg, exp_avg_sq, grad,
                     ElementOf(grad_dtype, grad), param_out,
                     ElementOf(out_dtype, param_out), n, stream),
      op, n);
}

absl::Status CudaFusedSgd(const SgdStep& step, float* param,
                          float* momentum_buffer, const void* grad,
                          DType grad_dtype, void* param_out, DType out_dtype,
                          size_t n, CudaStream stream) {
  const char* op = "CudaFusedSgd";
  const oi::SgdConstants c = oi::FoldSgdStep(step);
  const bool uses_buffer = c.momentum_mode != oi::Momentum::kNone;
  if (absl::Status status = oi::CheckFusedArgs(
          op, n, {param, grad, uses_buffer ? momentum_buffer : param}, grad,
          grad_dtype, param_out, out_dtype);
      !status.ok()) {
    return status;
  }
  return Launched(
      oi::cuda::Sgd(c, param, uses_buffer ? momentum_buffer : nullptr, grad,
                    ElementOf(grad_dtype, grad), param_out,
                    ElementOf(out_dtype, param_out), n, stream),
      op, n);
}

absl::Status CudaAccumulateGradAndRestore(float* acc, const void* grad,
                                          DType grad_dtype, bool first,
                                          const float* master, void* param_out,
                                          DType out_dtype, size_t n,
                                          CudaStream stream) {
  const char* op = "CudaAccumulateGradAndRestore";
  if (absl::Status status = oi::CheckFusedArgs(
          op, n, {acc, grad, master}, grad, grad_dtype, param_out, out_dtype);
      !status.ok()) {
    return status;
  }
  return Launched(oi::cuda::Accumulate(
                      first, acc, grad, ElementOf(grad_dtype, grad), master,
                      param_out, ElementOf(out_dtype, param_out), n, stream),
                  op, n);
}

}  // namespace chunkzero
