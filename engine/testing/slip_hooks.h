// SlipHooks: ParamHooks that pass every call on to the hooks they wrap,
// but for the slips a test makes them commit, as a model of one's own
// might: a HandGrad dropped, a weight read after its grad, a backward scope
// opened again after the grad.
//
//   SlipHooks slipping(hooks);
//   slipping.drop_grad_of = "fc2.bias";
//   CZ_RETURN_IF_ERROR(model.Backward(slipping));
#ifndef CHUNKZERO_ENGINE_TESTING_SLIP_HOOKS_H_
#define CHUNKZERO_ENGINE_TESTING_SLIP_HOOKS_H_

#include <string>
#include <utility>

#include "base/status_macros.h"
#include "ddp/param_hooks.h"

namespace chunkzero {
namespace engine_testing {

// Hooks that pass every call on, but for what a test makes them do wrong.
class SlipHooks : public ParamHooks {
 public:
  explicit SlipHooks(ParamHooks& inner) : inner_(inner) {}
  // HandGrad for this parameter is dropped (a model that forgot it).
  std::string drop_grad_of;
  // After this parameter's HandGrad, its data() is read (a backward that
  // reads the weight after handing its grad).
  std::string read_after_grad_of;
  // After this parameter's HandGrad, a backward scope is opened on it
  // again (its status is what HandGrad returns).
  std::string scope_after_grad_of;

  absl::Status PreForward(absl::Span<Parameter* const> p) override {
    return inner_.PreForward(p);
  }
  absl::Status PostForward(absl::Span<Parameter* const> p) override {
    return inner_.PostForward(p);
  }
  absl::Status PreBackward(absl::Span<Parameter* const> p) override {
    return inner_.PreBackward(p);
  }
  absl::Status PostBackward(absl::Span<Parameter* const> p) override {
    return inner_.PostBackward(p);
  }
  absl::Status HandGrad(Parameter& param, const Tensor& grad) override {
    if (param.name() == drop_grad_of) return absl::OkStatus();
    CZ_RETURN_IF_ERROR(inner_.HandGrad(param, grad));
    if (param.name() == read_after_grad_of) {
      const float* w = param.data().data<float>();
      read_ = w != nullptr ? w[0] : 0;
    }
    if (param.name() == scope_after_grad_of) {
      Parameter* const again[] = {&param};
      return inner_.PreBackward(again);
    }
    return absl::OkStatus();
  }
  void RecordDeferredError(absl::Status status) override {
    inner_.RecordDeferredError(std::move(status));
  }

 private:
  ParamHooks& inner_;
  float read_ = 0;
};

}  // namespace engine_testing
}  // namespace chunkzero

#endif  // CHUNKZERO_ENGINE_TESTING_SLIP_HOOKS_H_
