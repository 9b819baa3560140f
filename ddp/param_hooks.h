// The hooks a model calls around every layer or op that uses parameters,
// and HookScope, the guard that pairs them.
//
//   absl::Status Layer::Forward(ParamHooks& hooks, ...) {
//     CZ_ASSIGN_OR_RETURN(HookScope scope,
//                         HookScope::Forward(hooks, {&weight_, &bias_}));
//     ... compute with weight_.data(), bias_.data() ...
//     return scope.Exit();
//   }
//   absl::Status Layer::Backward(ParamHooks& hooks, ...) {
//     CZ_ASSIGN_OR_RETURN(HookScope scope,
//                         HookScope::Backward(hooks, {&weight_, &bias_}));
//     ... compute dweight (f32, weight_'s shape) ...
//     CZ_RETURN_IF_ERROR(hooks.HandGrad(weight_, dweight));
//     return scope.Exit();
//   }
//
// Contract: every use of a parameter in forward sits between PreForward and
// PostForward, every use in backward between PreBackward and PostBackward;
// its gradient for that use is handed over with HandGrad (f32, the
// parameter's shape) after PreBackward, before or after PostBackward. A
// parameter used several times in a step (tied or repeated layers) gets one
// scope per use and one HandGrad per use; the grads add up. Calls out of
// order are errors naming the parameter (ddp/hook_order.h checks them).
//
// ZeroDdp (ddp/zero_ddp.h) also holds a model to these, each slip an error
// naming the parameter rather than a wrong update:
// - one HandGrad per forward use: a parameter used k times in the step's
//   forward has k grads by its end;
// - weights are read before their HandGrad: the last grad of the step is
//   written into the parameter's own chunk slice (grad reuse), so from
//   then until the optimizer step data() holds the grad, and a read of it
//   (or a backward scope opened on it) fails the step;
// - under an Engine, hooks run only inside Engine::Step or the forward-only
//   pass of Engine::Evaluate (no use counted, no backward, no grad);
//   anywhere else they refuse every call.
// Outside any scope, data() is the weights where the chunk keeps them (the
// replicated layout, a chunk not yet released) and not materialised
// elsewhere.
//
// HookScope makes the pairing hard to get wrong: Exit() runs the post hook
// and returns its status; a scope left without Exit() (an early return)
// runs the post hook from its destructor and hands any error to
// RecordDeferredError, so the step still fails with it.
#ifndef CHUNKZERO_DDP_PARAM_HOOKS_H_
#define CHUNKZERO_DDP_PARAM_HOOKS_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ddp/parameter.h"
#include "tensor/tensor.h"

namespace chunkzero {

class ParamHooks {
 public:
  virtual ~ParamHooks() = default;

  // Before / after `params` are used by a forward op. Before returns, their
  // data() is materialised.
  [[nodiscard]] virtual absl::Status PreForward(
      absl::Span<Parameter* const> params) = 0;
  [[nodiscard]] virtual absl::Status PostForward(
      absl::Span<Parameter* const> params) = 0;
  // Before / after `params` are used by a backward op.
  [[nodiscard]] virtual absl::Status PreBackward(
      absl::Span<Parameter* const> params) = 0;
  [[nodiscard]] virtual absl::Status PostBackward(
      absl::Span<Parameter* const> params) = 0;
  // d(loss)/d(param) for one use: f32, param.shape().
  [[nodiscard]] virtual absl::Status HandGrad(Parameter& param,
                                              const Tensor& grad) = 0;
  // An error found where it could not be returned; the step reports it.
  virtual void RecordDeferredError(absl::Status status) = 0;
};

class [[nodiscard]] HookScope {
 public:
  // Runs PreForward (PreBackward) on `params`; the scope then owns the
  // matching post hook.
  [[nodiscard]] static absl::StatusOr<HookScope> Forward(
      ParamHooks& hooks, std::vector<Parameter*> params);
  [[nodiscard]] static absl::StatusOr<HookScope> Backward(
      ParamHooks& hooks, std::vector<Parameter*> params);

  HookScope(HookScope&& other) noexcept;
  HookScope& operator=(HookScope&&) = delete;
  HookScope(const HookScope&) = delete;
  // Runs the post hook if Exit() was not called; errors go to
  // RecordDeferredError.
  ~HookScope();

  // Runs the post hook and returns its status. A second Exit() is
  // FailedPrecondition.
  [[nodiscard]] absl::Status Exit();

 private:
  HookScope(ParamHooks* hooks, std::vector<Parameter*> params, bool backward)
      : hooks_(hooks), params_(std::move(params)), backward_(backward) {}

  ParamHooks* hooks_;  // nullptr once exited or moved from.
  std::vector<Parameter*> params_;
  bool backward_;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_DDP_PARAM_HOOKS_H_
