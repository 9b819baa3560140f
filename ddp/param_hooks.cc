#include "ddp/param_hooks.h"

#include <utility>

#include "base/status_macros.h"

namespace chunkzero {

absl::StatusOr<HookScope> HookScope::Forward(ParamHooks& hooks,
                                             std::vector<Parameter*> params) {
  CZ_RETURN_IF_ERROR(hooks.PreForward(params));
  return HookScope(&hooks, std::move(params), /*backward=*/false);
}

absl::StatusOr<HookScope> HookScope::Backward(ParamHooks& hooks,
                                              std::vector<Parameter*> params) {
  CZ_RETURN_IF_ERROR(hooks.PreBackward(params));
  return HookScope(&hooks, std::move(params), /*backward=*/true);
}

HookScope::HookScope(HookScope&& other) noexcept
    : hooks_(std::exchange(other.hooks_, nullptr)),
      params_(std::move(other.params_)),
      backward_(other.backward_) {}

HookScope::~HookScope() {
  if (hooks_ == nullptr) return;
  ParamHooks* hooks = hooks_;
  absl::Status status = Exit();
  if (!status.ok()) hooks->RecordDeferredError(std::move(status));
}

absl::Status HookScope::Exit() {
  if (hooks_ == nullptr) {
    return absl::FailedPreconditionError("hook scope exited twice");
  }
  ParamHooks* hooks = std::exchange(hooks_, nullptr);
  return backward_ ? hooks->PostBackward(params_) : hooks->PostForward(params_);
}

}  // namespace chunkzero
