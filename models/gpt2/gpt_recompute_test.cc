// Activation checkpointing in GptModel: a checkpointed block's forward runs
// again in Backward, through the same hooks, and every loss and grad is the
// same bits as when its activations are kept.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/parallel_for.h"
#include "ddp/hook_order.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/gemm.h"
#include "models/common/recording_hooks.h"
#include "models/gpt2/gpt_model.h"

namespace chunkzero {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

GptConfig TinyConfig(int layers) {
  GptConfig c;
  c.layers = layers;
  c.d_model = 8;
  c.heads = 2;
  c.seq_len = 6;
  c.vocab = 11;
  return c;
}

std::vector<int32_t> Tokens(int n, int vocab, int offset) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (7 * i + offset) % vocab;
  return t;
}

struct Pass {
  std::vector<float> losses;
  std::map<std::string, std::vector<std::vector<float>>> grads;
  std::vector<std::string> calls;
};

// Two steps of two shapes (buffers made again in between), no optimizer.
Pass TwoSteps(DType dtype, gemm::Precision precision,
              ActivationCheckpointing ac, int layers) {
  auto model = *GptModel::Create(TinyConfig(layers), 17, dtype);
  model->set_matmul_precision(precision);
  EXPECT_TRUE(model->SetActivationCheckpointing(ac).ok());
  Pass pass;
  RecordingHooks hooks;
  for (auto [batch, seq] : {std::pair{2, 5}, std::pair{1, 6}}) {
    const int n = batch * seq;
    absl::StatusOr<float> loss = model->Forward(
        hooks, batch, seq, Tokens(n, 11, batch), Tokens(n, 11, batch + 3));
    EXPECT_TRUE(loss.ok()) << loss.status();
    pass.losses.push_back(*loss);
    EXPECT_TRUE(model->Backward(hooks, 2.0f).ok());
    EXPECT_TRUE(hooks.EndStep().ok());
  }
  pass.grads = std::move(hooks.grads);
  pass.calls = std::move(hooks.calls);
  return pass;
}

TEST(GptRecomputeTest, SameBitsAsKeepingInEveryPrecision) {
  struct Case {
    DType dtype;
    gemm::Precision precision;
  };
  for (const Case& c : {Case{DType::kF32, gemm::Precision::kF32},
                        Case{DType::kF16, gemm::Precision::kF32},
                        Case{DType::kBF16, gemm::Precision::kF32},
                        Case{DType::kBF16, gemm::Precision::kBf16}}) {
    const Pass plain = TwoSteps(c.dtype, c.precision, {}, 3);
    for (int every : {1, 2, 3, 7}) {
      SCOPED_TRACE(absl::StrCat(
          DTypeName(c.dtype),
          c.precision == gemm::Precision::kBf16 ? " bf16 products" : "",
          " every:", every));
      const Pass checkpointed =
          TwoSteps(c.dtype, c.precision, ActivationCheckpointing{every}, 3);
      EXPECT_THAT(checkpointed.losses, ElementsAreArray(plain.losses));
      // Each parameter's grads, every one handed, are the same bits (the
      // order they came in is the calls').
      EXPECT_EQ(checkpointed.grads, plain.grads);
      EXPECT_EQ(checkpointed.grads.size(), plain.grads.size());
    }
  }
}

// Two blocks, every:2: block 0 is checkpointed, block 1 keeps its
// activations. Backward runs block 0's four forward scopes again, in
// forward order, right before block 0's backward scopes; grads are handed
// once per backward use, as without checkpointing.
TEST(GptRecomputeTest, CheckpointedBlockRunsItsForwardScopesAgainInBackward) {
  const Pass pass = TwoSteps(DType::kF32, gemm::Precision::kF32,
                             ActivationCheckpointing{2}, 2);
  auto block = [](int l) {
    const std::string h = absl::StrCat("h.", l, ".");
    return std::vector<std::string>{
        absl::StrCat(h, "ln_1.weight,", h, "ln_1.bias"),
        absl::StrCat(h, "attn.c_attn.weight,", h, "attn.c_attn.bias,", h,
                     "attn.c_proj.weight,", h, "attn.c_proj.bias"),
        absl::StrCat(h, "ln_2.weight,", h, "ln_2.bias"),
        absl::StrCat(h, "mlp.c_fc.weight,", h, "mlp.c_fc.bias,", h,
                     "mlp.c_proj.weight,", h, "mlp.c_proj.bias")};
  };
  const std::string emb = "wte.weight,wpe.weight";
  const std::string lnf = "ln_f.weight,ln_f.bias";
  std::vector<std::string> expected;
  auto forward = [&](const std::string& s) {
    expected.push_back("PreForward " + s);
    expected.push_back("PostForward " + s);
  };
  auto backward = [&](const std::string& s) {
    expected.push_back("PreBackward " + s);
    std::vector<std::string> names = absl::StrSplit(s, ',');
    // The output projection's grads first (gpt_model.h).
    if (names.size() == 4) {
      std::rotate(names.begin(), names.begin() + 2, names.end());
    }
    for (const std::string& name : names) {
      expected.push_back(absl::StrCat("HandGrad ", name));
    }
    expected.push_back("PostBackward " + s);
  };
  forward(emb);
  for (int l : {0, 1}) {
    for (const std::string& s : block(l)) forward(s);
  }
  forward(lnf);
  forward("wte.weight");
  backward("wte.weight");
  backward(lnf);
  for (int l : {1, 0}) {
    if (l == 0) {
      for (const std::string& s : block(0)) forward(s);  // Recomputed.
    }
    const std::vector<std::string> scopes = block(l);
    for (auto it = scopes.rbegin(); it != scopes.rend(); ++it) backward(*it);
  }
  backward(emb);
  ASSERT_EQ(pass.calls.size(), 2 * expected.size());  // Two steps.
  EXPECT_THAT(std::vector<std::string>(pass.calls.begin(),
                                       pass.calls.begin() + expected.size()),
              ElementsAreArray(expected));
}

// TinyConfig(2) (C 8, NH 2, V 11) at batch 2 x seq 3 (N 6, A = B NH T^2 =
// 36). A block's slot is 15 N C + 4 N + A = 780 floats; every block's
// output N C = 48 floats stays. Kept without checkpointing: tokens and
// targets 2 x 24 B, f64 row losses 48 B, and floats: 2 slots (1560), 2
// outputs (96), embeddings 48, ln_f 48 + 12, probabilities 66 = 1830
// floats, 7320 B + 96 B = 7416 B. With `layers` one shared slot (3120 B)
// is the recompute buffer, refilled for each of the 2 blocks, and what is
// kept drops by both slots to 7416 - 6240 = 1176 B. Backward's scratch,
// 2 N C + T^2 + 3 T C / NH = 141 floats (564 B) on one thread, is in
// neither;
// workspace_bytes() adds it and the 288-float (1152 B) grad buffer.
TEST(GptRecomputeTest, ActivationBytesAndWorkspaceAreExact) {
  const ScopedParallelThreads one(1);
  auto model = *GptModel::Create(TinyConfig(2), 3);
  GptModel::ActivationBytes plain = model->activation_bytes(2, 3);
  EXPECT_EQ(plain.kept, 7416);
  EXPECT_EQ(plain.recomputed, 0);
  EXPECT_EQ(plain.recompute_buffer, 0);
  RecordingHooks hooks;
  const std::vector<int32_t> tokens = Tokens(6, 11, 1);
  ASSERT_TRUE(model->Forward(hooks, 2, 3, tokens, tokens).ok());
  EXPECT_EQ(model->workspace_bytes(), 1152 + 7416 + 564);

  ASSERT_TRUE(model->SetActivationCheckpointing({1}).ok());
  // The slots changed: the pending Backward is dropped.
  EXPECT_EQ(model->Backward(hooks).code(),
            absl::StatusCode::kFailedPrecondition);
  const GptModel::ActivationBytes layers = model->activation_bytes(2, 3);
  EXPECT_EQ(layers.kept, 1176);
  EXPECT_EQ(layers.recompute_buffer, 3120);
  EXPECT_EQ(layers.recomputed, 6240);
  RecordingHooks again;
  ASSERT_TRUE(model->Forward(again, 2, 3, tokens, tokens).ok());
  EXPECT_EQ(model->workspace_bytes(), 1152 + 1176 + 3120 + 564);
  ASSERT_TRUE(model->Backward(again).ok());
  ASSERT_TRUE(again.EndStep().ok());

  // every:2 of 3 blocks: blocks 0 and 2 share a slot, block 1 keeps one.
  auto three = *GptModel::Create(TinyConfig(3), 3);
  ASSERT_TRUE(three->SetActivationCheckpointing({2}).ok());
  const GptModel::ActivationBytes every2 = three->activation_bytes(2, 3);
  EXPECT_EQ(every2.recompute_buffer, 3120);
  EXPECT_EQ(every2.recomputed, 2 * 3120);
  EXPECT_EQ(every2.kept, 1176 + 192 + 3120);  // A third output, block 1.
}

TEST(GptRecomputeTest, RefusesANegativeInterval) {
  auto model = *GptModel::Create(TinyConfig(2), 3);
  const absl::Status refused =
      model->SetActivationCheckpointing(ActivationCheckpointing{-2});
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("every -2"));
  EXPECT_EQ(model->activation_checkpointing().every, 0);
}

}  // namespace
}  // namespace chunkzero
