// LocalHooks: ParamHooks for running a model on one rank with plain
// tensors: no chunks, no communication. Each parameter's grad() becomes an
// f32 tensor of its shape holding the sum of the grads handed over in the
// step, on the device the grads come from (a model on a GPU keeps its
// grads there). The single-process reference that ZeroDdp is tested
// against.
//
//   LocalHooks hooks;
//   CZ_RETURN_IF_ERROR(model.Forward(hooks, batch));
//   CZ_RETURN_IF_ERROR(model.Backward(hooks));
//   CZ_RETURN_IF_ERROR(hooks.EndStep());   // order errors, deferred errors
//
// Parameter data is used as it is (it must be materialised where the model
// computes). Thread-safety: one instance per thread.
#ifndef CHUNKZERO_DDP_LOCAL_HOOKS_H_
#define CHUNKZERO_DDP_LOCAL_HOOKS_H_

#include <vector>

#include "absl/status/status.h"
#include "ddp/hook_order.h"
#include "ddp/param_hooks.h"

namespace chunkzero {

class LocalHooks final : public ParamHooks {
 public:
  [[nodiscard]] absl::Status PreForward(
      absl::Span<Parameter* const> params) override;
  [[nodiscard]] absl::Status PostForward(
      absl::Span<Parameter* const> params) override;
  [[nodiscard]] absl::Status PreBackward(
      absl::Span<Parameter* const> params) override;
  [[nodiscard]] absl::Status PostBackward(
      absl::Span<Parameter* const> params) override;
  // The first grad of a step replaces param.grad(); later ones add to it.
  [[nodiscard]] absl::Status HandGrad(Parameter& param,
                                      const Tensor& grad) override;
  void RecordDeferredError(absl::Status status) override;

  // Ends the step: the first deferred error, else the hook order's verdict.
  // The next step's first HandGrad of each parameter starts from zero.
  [[nodiscard]] absl::Status EndStep();

  const HookOrder& order() const { return order_; }

 private:
  HookOrder order_;
  std::vector<absl::Status> deferred_;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_DDP_LOCAL_HOOKS_H_
