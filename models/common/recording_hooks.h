// RecordingHooks: ParamHooks for models' tests. Logs every hook call
// ("PreForward wte.weight,wpe.weight"), keeps each HandGrad's values by
// parameter in the order handed, and checks the order as LocalHooks does
// (ddp/hook_order.h).
#ifndef CHUNKZERO_MODELS_COMMON_RECORDING_HOOKS_H_
#define CHUNKZERO_MODELS_COMMON_RECORDING_HOOKS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ddp/hook_order.h"
#include "ddp/param_hooks.h"
#include "gtest/gtest.h"

namespace chunkzero {

class RecordingHooks final : public ParamHooks {
 public:
  absl::Status PreForward(absl::Span<Parameter* const> params) override {
    Log("PreForward", params);
    return order_.PreForward(params);
  }
  absl::Status PostForward(absl::Span<Parameter* const> params) override {
    Log("PostForward", params);
    return order_.PostForward(params);
  }
  absl::Status PreBackward(absl::Span<Parameter* const> params) override {
    Log("PreBackward", params);
    return order_.PreBackward(params);
  }
  absl::Status PostBackward(absl::Span<Parameter* const> params) override {
    Log("PostBackward", params);
    return order_.PostBackward(params);
  }
  absl::Status HandGrad(Parameter& param, const Tensor& grad) override {
    calls.push_back("HandGrad " + param.name());
    EXPECT_EQ(grad.dtype(), DType::kF32);
    EXPECT_EQ(grad.shape(), param.shape()) << param.name();
    grads[param.name()].push_back(*grad.ToFloats());
    return order_.Grad(param);
  }
  void RecordDeferredError(absl::Status status) override {
    ADD_FAILURE() << status;
  }
  // Ends the step for the order check.
  absl::Status EndStep() { return order_.EndStep(); }

  std::vector<std::string> calls;
  // Every grad handed, by parameter, in the order handed.
  std::map<std::string, std::vector<std::vector<float>>> grads;

 private:
  void Log(const char* call, absl::Span<Parameter* const> params) {
    std::vector<std::string> names;
    for (const Parameter* p : params) names.push_back(p->name());
    calls.push_back(absl::StrCat(call, " ", absl::StrJoin(names, ",")));
  }
  HookOrder order_;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_MODELS_COMMON_RECORDING_HOOKS_H_
