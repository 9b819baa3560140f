#include "ddp/local_hooks.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "tensor/ops/axpy_tensor.h"

namespace chunkzero {

absl::Status LocalHooks::PreForward(absl::Span<Parameter* const> params) {
  return order_.PreForward(params);
}

absl::Status LocalHooks::PostForward(absl::Span<Parameter* const> params) {
  return order_.PostForward(params);
}

absl::Status LocalHooks::PreBackward(absl::Span<Parameter* const> params) {
  return order_.PreBackward(params);
}

absl::Status LocalHooks::PostBackward(absl::Span<Parameter* const> params) {
  return order_.PostBackward(params);
}

absl::Status LocalHooks::HandGrad(Parameter& param, const Tensor& grad) {
  if (grad.dtype() != DType::kF32 || grad.shape() != param.shape()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grad of parameter '", param.name(), "' is ", grad.DebugString(),
        ", expected f32", ShapeToString(param.shape())));
  }
  const bool first = order_.counts(param).grads == 0;
  CZ_RETURN_IF_ERROR(order_.Grad(param));
  if (first) {
    CZ_ASSIGN_OR_RETURN(Tensor copy, grad.Clone());
    param.set_grad(std::move(copy));
    return absl::OkStatus();
  }
  Tensor sum = param.grad();
  return AxpyTensor(sum, 1.0f, grad);
}

void LocalHooks::RecordDeferredError(absl::Status status) {
  deferred_.push_back(std::move(status));
}

absl::Status LocalHooks::EndStep() {
  absl::Status order = order_.EndStep();
  if (!deferred_.empty()) {
    absl::Status first = deferred_.front();
    deferred_.clear();
    return first;
  }
  return order;
}

}  // namespace chunkzero
