// One forward and backward of any LanguageModel on a fixed batch, with the
// loss and every parameter's grad: what the GPU models' tests compare with
// the same model on the CPU.
//
//   const StepResult want = OneStep(*cpu_model, B, T, vocab);
//   const StepResult got = OneStep(*gpu_model, B, T, vocab);
#ifndef CHUNKZERO_MODELS_COMMON_TESTING_ONE_STEP_H_
#define CHUNKZERO_MODELS_COMMON_TESTING_ONE_STEP_H_

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ddp/local_hooks.h"
#include "gtest/gtest.h"
#include "models/common/language_model.h"

namespace chunkzero {
namespace model_testing {

struct StepResult {
  float loss = 0;
  std::map<std::string, std::vector<float>> grads;
};

// Tokens and targets spread over [0, vocab) by fixed strides; a failed
// Forward or Backward fails the calling test.
inline StepResult OneStep(LanguageModel& model, int B, int T, int vocab) {
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) {
    tokens[i] = (i * 31 + 7) % vocab;
    targets[i] = (i * 17 + 3) % vocab;
  }
  LocalHooks hooks;
  StepResult out;
  absl::StatusOr<float> loss = model.Forward(hooks, B, T, tokens, targets);
  EXPECT_TRUE(loss.ok()) << loss.status();
  if (!loss.ok()) return out;
  out.loss = *loss;
  EXPECT_TRUE(model.Backward(hooks, 1.0f).ok());
  EXPECT_TRUE(hooks.EndStep().ok());
  for (Parameter* p : model.Parameters()) {
    out.grads[p->name()] = *p->grad().ToFloats();
  }
  return out;
}

// The Euclidean norm, in double.
inline double Norm(const std::vector<float>& v) {
  double sum = 0;
  for (float x : v) sum += double{x} * x;
  return std::sqrt(sum);
}

}  // namespace model_testing
}  // namespace chunkzero

#endif  // CHUNKZERO_MODELS_COMMON_TESTING_ONE_STEP_H_
