#include "ddp/local_hooks.h"

#include <vector>

#include "base/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

using ::testing::ElementsAre;

// y = w * x (elementwise), used twice: the grads of both uses add up.
absl::Status TwiceForwardBackward(ParamHooks& hooks, Parameter& w) {
  for (int use = 0; use < 2; ++use) {
    CZ_ASSIGN_OR_RETURN(HookScope scope, HookScope::Forward(hooks, {&w}));
    CZ_RETURN_IF_ERROR(scope.Exit());
  }
  for (int use = 0; use < 2; ++use) {
    CZ_ASSIGN_OR_RETURN(HookScope scope, HookScope::Backward(hooks, {&w}));
    CZ_ASSIGN_OR_RETURN(
        Tensor g, Tensor::FromFloats({1.0f + use, 10.0f * (use + 1)}, {2}));
    CZ_RETURN_IF_ERROR(hooks.HandGrad(w, g));
    CZ_RETURN_IF_ERROR(scope.Exit());
  }
  return absl::OkStatus();
}

TEST(LocalHooks, AccumulatesGradsPerStep) {
  Parameter w("w", *Tensor::FromFloats({1, 2}, {2}));
  LocalHooks hooks;
  for (int step = 0; step < 2; ++step) {
    ASSERT_TRUE(TwiceForwardBackward(hooks, w).ok());
    ASSERT_TRUE(hooks.EndStep().ok());
    // 1 + 2 and 10 + 20, freshly each step.
    EXPECT_THAT(*w.grad().ToFloats(), ElementsAre(3, 30));
  }
}

TEST(LocalHooks, RejectsGradsOfTheWrongShapeOrType) {
  Parameter w("w", *Tensor::Zeros({2, 2}, DType::kF32));
  LocalHooks hooks;
  ASSERT_TRUE(hooks.PreBackward({&w}).ok());
  EXPECT_EQ(
      hooks.HandGrad(w, *Tensor::Zeros({4}, DType::kF32)).message(),
      "grad of parameter 'w' is f32[4] on cpu (+0 B), expected f32[2, 2]");
  EXPECT_EQ(hooks.HandGrad(w, *Tensor::Zeros({2, 2}, DType::kF16)).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HookScope, DestructorClosesAndDefersErrors) {
  Parameter w("w", *Tensor::Zeros({1}, DType::kF32));
  LocalHooks hooks;
  {
    absl::StatusOr<HookScope> scope = HookScope::Forward(hooks, {&w});
    ASSERT_TRUE(scope.ok());
    // Left without Exit(): an early return in a model.
  }
  EXPECT_EQ(hooks.order().counts(w).use, HookOrder::Use::kIdle);
  EXPECT_TRUE(hooks.EndStep().ok());

  {
    absl::StatusOr<HookScope> scope = HookScope::Forward(hooks, {&w});
    ASSERT_TRUE(scope.ok());
    // The model closes the use behind the scope's back...
    ASSERT_TRUE(hooks.PostForward({&w}).ok());
  }  // ...so the scope's own PostForward fails, and the step reports it.
  EXPECT_EQ(hooks.EndStep().message(),
            "hook order: PostForward of parameter 'w' while it is not in use");
}

TEST(HookScope, ExitTwiceAndFailedEntry) {
  Parameter w("w", *Tensor::Zeros({1}, DType::kF32));
  LocalHooks hooks;
  absl::StatusOr<HookScope> scope = HookScope::Backward(hooks, {&w});
  ASSERT_TRUE(scope.ok());
  EXPECT_TRUE(scope->Exit().ok());
  EXPECT_EQ(scope->Exit().message(), "hook scope exited twice");
  ASSERT_TRUE(hooks.PreForward({&w}).ok());
  absl::StatusOr<HookScope> again = HookScope::Forward(hooks, {&w});
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(hooks.PostForward({&w}).ok());
  EXPECT_TRUE(hooks.EndStep().ok());
}

}  // namespace
}  // namespace chunkzero
