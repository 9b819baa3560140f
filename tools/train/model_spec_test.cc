#include "tools/train/model_spec.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

ModelSpec Llama(int layers) {
  ModelSpec spec;
  spec.family = ModelFamily::kLlama;
  spec.llama.layers = layers;
  spec.llama.d_model = 16;
  spec.llama.heads = 4;
  spec.llama.kv_heads = 2;
  spec.llama.ffn = 24;
  spec.llama.vocab = 32;
  spec.llama.seq_len = 8;
  return spec;
}

TEST(ModelSpec, ParsesTheFamilies) {
  EXPECT_EQ(*ParseModelFamily("gpt2"), ModelFamily::kGpt2);
  EXPECT_EQ(*ParseModelFamily("llama"), ModelFamily::kLlama);
  EXPECT_THAT(ParseModelFamily("bert").status().message(),
              HasSubstr("--model='bert': want gpt2 or llama"));
  EXPECT_EQ(ModelFamilyName(ModelFamily::kLlama), "llama");
}

TEST(ModelSpec, LlamaPacksInFirstUseOrder) {
  std::vector<std::string> names;
  for (const auto& [name, shape] : Llama(1).FirstUseOrder()) {
    names.push_back(name);
  }
  const std::string l = "model.layers.0.";
  EXPECT_THAT(
      names,
      ElementsAre("model.embed_tokens.weight", l + "input_layernorm.weight",
                  l + "self_attn.q_proj.weight", l + "self_attn.k_proj.weight",
                  l + "self_attn.v_proj.weight", l + "self_attn.o_proj.weight",
                  l + "post_attention_layernorm.weight",
                  l + "mlp.gate_proj.weight", l + "mlp.up_proj.weight",
                  l + "mlp.down_proj.weight", "model.norm.weight",
                  "lm_head.weight"));
}

TEST(ModelSpec, FiguresOfEachFamily) {
  const ModelSpec llama = Llama(2);
  // Per layer 2*16*16 + 2*8*16 + 3*24*16 + 2*16 = 1952.
  EXPECT_EQ(llama.BlockParameters(), 1952);
  EXPECT_EQ(llama.ParameterCount(), 2 * 512 + 2 * 1952 + 16);
  EXPECT_EQ(llama.positions(), 8);
  EXPECT_EQ(llama.Describe(),
            "Llama: 2 layers x 16, 4 heads (2 kv, head_dim 4), ffn 24, "
            "rope_theta 10000");
  EXPECT_EQ(llama.CheckpointConfig().at("kv_heads"), "2");
  EXPECT_EQ(llama.CheckpointConfig().at("model"), "llama");
  // Reals as the shortest decimal that reads back, not 6 digits.
  ModelSpec precise = llama;
  precise.llama.rope_theta = 1234567.0;
  precise.llama.rms_norm_eps = 0.1 + 0.2;
  EXPECT_EQ(precise.CheckpointConfig().at("rope_theta"), "1234567");
  EXPECT_EQ(precise.CheckpointConfig().at("rms_norm_eps"),
            "0.30000000000000004");
  EXPECT_EQ(llama.CheckpointConfig().at("rms_norm_eps"), "1e-05");

  ModelSpec gpt;
  gpt.gpt.layers = 2;
  gpt.gpt.d_model = 8;
  gpt.gpt.heads = 2;
  gpt.gpt.seq_len = 4;
  gpt.gpt.vocab = 10;
  EXPECT_EQ(gpt.BlockParameters(), 12 * 64 + 13 * 8);
  EXPECT_EQ(gpt.ParameterCount(), GptParameterCount(gpt.gpt));
  EXPECT_EQ(gpt.Describe(), "GPT-2: 2 layers x 8, 2 heads");
  EXPECT_EQ(gpt.FirstUseOrder().front().first, "wte.weight");
  EXPECT_EQ(gpt.CheckpointConfig().at("model"), "gpt2");
}

TEST(ModelSpec, CreatesEither) {
  auto llama = Llama(1).Create(1, Device::Cpu(), false);
  ASSERT_TRUE(llama.ok()) << llama.status();
  EXPECT_NE((*llama)->FindParameter("lm_head.weight"), nullptr);
  EXPECT_THAT(Llama(1).Create(1, Device::Cpu(), true).status().message(),
              HasSubstr("only the batched attention"));
  ModelSpec gpt;
  auto made = gpt.Create(1, Device::Cpu(), false);
  ASSERT_TRUE(made.ok());
  EXPECT_NE((*made)->FindParameter("wte.weight"), nullptr);
}

}  // namespace
}  // namespace chunkzero
