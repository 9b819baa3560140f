#include "ddp/hook_order.h"

#include "gtest/gtest.h"

namespace chunkzero {
namespace {

Parameter MakeParam(const char* name) {
  return Parameter(name, *Tensor::Zeros({2}, DType::kF32));
}

TEST(HookOrder, ForwardThenBackwardCountsUses) {
  Parameter w = MakeParam("fc.weight"), b = MakeParam("fc.bias");
  HookOrder order;
  ASSERT_TRUE(order.PreForward({&w, &b}).ok());
  EXPECT_EQ(order.counts(w).use, HookOrder::Use::kForward);
  ASSERT_TRUE(order.PostForward({&w, &b}).ok());
  ASSERT_TRUE(order.PreBackward({&w, &b}).ok());
  ASSERT_TRUE(order.Grad(w).ok());
  ASSERT_TRUE(order.PostBackward({&w, &b}).ok());
  ASSERT_TRUE(order.Grad(b).ok());  // After post-backward is fine.
  HookOrder::Counts c = order.counts(w);
  EXPECT_EQ(c.forward_uses, 1);
  EXPECT_EQ(c.backward_uses, 1);
  EXPECT_EQ(c.grads, 1);
  EXPECT_TRUE(order.EndStep().ok());
  EXPECT_EQ(order.counts(w).forward_uses, 0);
}

TEST(HookOrder, ATiedParameterGetsOneGradPerUse) {
  Parameter wte = MakeParam("wte.weight");
  HookOrder order;
  for (int use = 0; use < 2; ++use) {
    ASSERT_TRUE(order.PreForward({&wte}).ok());
    ASSERT_TRUE(order.PostForward({&wte}).ok());
  }
  for (int use = 0; use < 2; ++use) {
    ASSERT_TRUE(order.PreBackward({&wte}).ok());
    ASSERT_TRUE(order.Grad(wte).ok());
    ASSERT_TRUE(order.PostBackward({&wte}).ok());
  }
  absl::Status third = order.Grad(wte);
  EXPECT_EQ(third.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(third.message(),
            "hook order: grad 3 of parameter 'wte.weight' handed over after 2 "
            "backward use(s) in this step");
  EXPECT_EQ(order.counts(wte).forward_uses, 2);
}

TEST(HookOrder, OutOfOrderCallsNameTheParameterAndChangeNothing) {
  Parameter w = MakeParam("h.0.mlp.c_fc.weight"), b = MakeParam("b");
  HookOrder order;
  EXPECT_EQ(order.PostForward({&w}).message(),
            "hook order: PostForward of parameter 'h.0.mlp.c_fc.weight' while "
            "it is not in use");
  ASSERT_TRUE(order.PreForward({&w}).ok());
  EXPECT_EQ(order.PreForward({&b, &w}).message(),
            "hook order: PreForward of parameter 'h.0.mlp.c_fc.weight' while "
            "it is in a forward use");
  EXPECT_EQ(order.counts(b).use, HookOrder::Use::kIdle);  // Unchanged.
  EXPECT_EQ(order.PostBackward({&w}).message(),
            "hook order: PostBackward of parameter 'h.0.mlp.c_fc.weight' "
            "while it is in a forward use");
  EXPECT_EQ(order.PreBackward({&b, &b}).message(),
            "hook order: PreBackward lists parameter 'b' twice");
  EXPECT_EQ(order.Grad(b).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(order.EndStep().message(),
            "hook order: the step ended with parameters still in use: "
            "'h.0.mlp.c_fc.weight' (in a forward use)");
  EXPECT_TRUE(order.EndStep().ok());  // A fresh step.
}

TEST(HookOrder, ForwardDuringBackwardIsRecomputation) {
  Parameter w = MakeParam("w");
  HookOrder order;
  ASSERT_TRUE(order.PreForward({&w}).ok());
  ASSERT_TRUE(order.PostForward({&w}).ok());
  ASSERT_TRUE(order.PreBackward({&w}).ok());
  ASSERT_TRUE(order.PostBackward({&w}).ok());
  ASSERT_TRUE(order.PreForward({&w}).ok());
  ASSERT_TRUE(order.PostForward({&w}).ok());
  EXPECT_EQ(order.counts(w).forward_uses, 2);
}

TEST(JoinName, DotsNestedNames) {
  EXPECT_EQ(JoinName("h.0", "attn.c_attn.weight"), "h.0.attn.c_attn.weight");
  EXPECT_EQ(JoinName("", "wte.weight"), "wte.weight");
}

}  // namespace
}  // namespace chunkzero
