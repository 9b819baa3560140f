#include "models/llama/llama_checkpoint.h"

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/pretrained/pretrained_directory.h"
#include "io/pretrained/pretrained_export.h"
#include "io/safetensors/safetensors.h"
#include "models/common/config_keys.h"
#include "models/common/testing/config_keys_testing.h"

namespace chunkzero {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using Json = nlohmann::json;

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp",
                                       "/llama_checkpoint_test/", name);
  fs::remove_all(dir);
  return dir;
}

LlamaConfig Tiny(bool tied) {
  LlamaConfig c;
  c.layers = 2;
  c.d_model = 16;
  c.heads = 4;
  c.kv_heads = 2;
  c.ffn = 24;
  c.vocab = 32;
  c.seq_len = 8;
  c.rope_theta = 500000;
  c.rms_norm_eps = 1e-6;
  c.tie_word_embeddings = tied;
  return c;
}

std::map<std::string, Tensor> State(const LlamaConfig& c) {
  auto model = *LlamaModel::Create(c, 7, DType::kBF16);
  std::map<std::string, Tensor> state;
  for (Parameter* p : model->Parameters()) state[p->name()] = p->data();
  return state;
}

void WriteJson(const std::string& path, const Json& json) {
  const std::string text = json.dump();
  ASSERT_TRUE(WriteFileAtomically(path, [&](int fd, const std::string& tmp) {
                return WriteAll(fd, text.data(), text.size(), tmp);
              }).ok());
}

TEST(LlamaCheckpoint, DirectoryRoundTripsOneFileAndSharded) {
  for (bool tied : {false, true}) {
    for (int64_t shard : {int64_t{1} << 30, int64_t{4096}}) {
      SCOPED_TRACE(absl::StrCat("tied ", tied, " shard ", shard));
      const LlamaConfig c = Tiny(tied);
      const auto state = State(c);
      const std::string dir = TestDir("round");
      ASSERT_TRUE(WriteLlamaDirectory(dir, c, state, shard).ok());
      EXPECT_EQ(fs::exists(dir + "/model.safetensors.index.json"),
                shard == 4096);
      absl::StatusOr<LlamaCheckpoint> read = ReadLlamaDirectory(dir);
      ASSERT_TRUE(read.ok()) << read.status();
      EXPECT_EQ(read->config.kv_heads, 2);
      EXPECT_EQ(read->config.rope_theta, 500000);
      EXPECT_EQ(read->config.rms_norm_eps, 1e-6);
      EXPECT_EQ(read->config.tie_word_embeddings, tied);
      ASSERT_EQ(read->state.size(), state.size());
      for (const auto& [name, tensor] : state) {
        // Written as f32: the bf16 values exactly.
        EXPECT_EQ(read->state.at(name).dtype(), DType::kF32) << name;
        EXPECT_EQ(*read->state.at(name).ToFloats(), *tensor.ToFloats()) << name;
      }
    }
  }
}

TEST(LlamaCheckpoint, ConfigAsTransformersFourAndFiveWriteIt) {
  Json four = Json::parse(LlamaConfigJson(Tiny(false)));
  EXPECT_EQ(four["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(four["rope_theta"], 500000.0);
  EXPECT_EQ(four["rope_parameters"]["rope_theta"], 500000.0);
  Json five = four;
  five.erase("rope_theta");
  five["rope_parameters"]["rope_theta"] = 1e6;
  EXPECT_EQ(LlamaConfigFromJson(five, "c")->rope_theta, 1e6);
  four.erase("rope_parameters");
  four["rope_theta"] = 250000;
  EXPECT_EQ(LlamaConfigFromJson(four, "c")->rope_theta, 250000);
  // transformers' defaults for keys left out.
  Json bare = {{"model_type", "llama"},   {"num_hidden_layers", 1},
               {"hidden_size", 64},       {"num_attention_heads", 4},
               {"intermediate_size", 96}, {"vocab_size", 10}};
  const LlamaConfig c = *LlamaConfigFromJson(bare, "c");
  EXPECT_EQ(c.kv_heads, 4);
  EXPECT_EQ(c.resolved_head_dim(), 16);
  EXPECT_EQ(c.seq_len, 2048);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope_theta, 10000);
  EXPECT_FALSE(c.tie_word_embeddings);
}

TEST(LlamaCheckpoint, RefusesWhatTheModelDoesNotComputeNamingTheKey) {
  const Json base = Json::parse(LlamaConfigJson(Tiny(false)));
  const struct {
    const char* key;
    Json value;
    const char* message;
  } cases[] = {
      {"rope_scaling",
       {{"rope_type", "llama3"}, {"factor", 8.0}},
       "\"rope_scaling\" is {\"factor\":8.0,\"rope_type\":\"llama3\"}; rope "
       "scaling is not supported"},
      {"attention_bias", true,
       "\"attention_bias\" is true; the model has no "
       "biases"},
      {"mlp_bias", true, "\"mlp_bias\" is true"},
      {"sliding_window", 4096, "\"sliding_window\" is 4096"},
      {"hidden_act", "gelu", "\"hidden_act\" is \"gelu\""},
      {"model_type", "mistral",
       "\"model_type\" is \"mistral\", want \"llama\""},
      {"num_key_value_heads", 3, "must be a multiple of num_key_value_heads"},
      {"hidden_size", -4, "\"hidden_size\" is -4, want a positive integer"},
      {"rope_parameters",
       {{"rope_type", "yarn"}, {"rope_theta", 1e4}},
       "only rope_type \"default\""},
  };
  for (const auto& [key, value, message] : cases) {
    Json config = base;
    config[key] = value;
    const absl::Status s =
        LlamaConfigFromJson(config, "dir/config.json").status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << key;
    EXPECT_THAT(s.message(), HasSubstr(message)) << key;
    EXPECT_THAT(s.message(), HasSubstr("dir/config.json")) << key;
  }
}

// config.json as LlamaForCausalLM(LlamaConfig(...)).save_pretrained writes
// it in transformers 4.57.6 and 5.25.0 (sizes set to Tiny's).
constexpr const char* kTransformersLlamaConfigs[] = {
    R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false,
        "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
        "head_dim": 4, "hidden_act": "silu", "hidden_size": 16,
        "initializer_range": 0.02, "intermediate_size": 24,
        "max_position_embeddings": 8, "mlp_bias": false, "model_type": "llama",
        "num_attention_heads": 4, "num_hidden_layers": 2,
        "num_key_value_heads": 2, "pretraining_tp": 1, "rms_norm_eps": 1e-06,
        "rope_scaling": null, "rope_theta": 500000.0,
        "tie_word_embeddings": false, "torch_dtype": "float32",
        "transformers_version": "4.57.6", "use_cache": true,
        "vocab_size": 32})",
    R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false,
        "attention_dropout": 0.0, "bos_token_id": 1, "dtype": "float32",
        "eos_token_id": 2, "head_dim": 4, "hidden_act": "silu",
        "hidden_size": 16, "initializer_range": 0.02,
        "intermediate_size": 24, "max_position_embeddings": 8,
        "mlp_bias": false, "model_type": "llama", "num_attention_heads": 4,
        "num_hidden_layers": 2, "num_key_value_heads": 2, "pad_token_id": null,
        "pretraining_tp": 1, "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"},
        "tie_word_embeddings": false, "transformers_version": "5.25.0",
        "use_cache": true, "vocab_size": 32})",
};

Json OtherValue(const Json& v) {
  if (v.is_boolean()) return !v.get<bool>();
  if (v.is_string()) return v.get<std::string>() + "_other";
  if (v.is_number()) return v.get<double>() * 2 + 1;
  if (v.is_null()) return {{"rope_type", "linear"}, {"factor", 2.0}};
  return {{"rope_type", "default"}, {"rope_theta", 7.0}};
}

bool SameConfig(const LlamaConfig& a, const LlamaConfig& b) {
  return a.layers == b.layers && a.d_model == b.d_model && a.heads == b.heads &&
         a.kv_heads == b.kv_heads &&
         a.resolved_head_dim() == b.resolved_head_dim() && a.ffn == b.ffn &&
         a.vocab == b.vocab && a.seq_len == b.seq_len &&
         a.rope_theta == b.rope_theta && a.rms_norm_eps == b.rms_norm_eps &&
         a.tie_word_embeddings == b.tie_word_embeddings;
}

// Every key transformers writes is read, refused unless the model computes
// it, or of no effect: none is dropped unseen.
TEST(LlamaCheckpoint, EveryKeyTransformersWritesIsRuledOn) {
  for (const char* text : kTransformersLlamaConfigs) {
    config_keys_testing::ExpectEveryKeyIsRuledOn<LlamaConfig>(
        Json::parse(text), LlamaConfigKeyRules(),
        [](const Json& j) { return LlamaConfigFromJson(j, "c.json"); },
        SameConfig, OtherValue);
    EXPECT_TRUE(SameConfig(*LlamaConfigFromJson(Json::parse(text), "c.json"),
                           Tiny(false)));
  }
}

// A base whose rotary frequencies or angles overflow f32 is refused naming
// the key, instead of training to NaN.
TEST(LlamaCheckpoint, ARopeThetaWhoseAnglesAreNotFiniteIsRefused) {
  Json config = Json::parse(kTransformersLlamaConfigs[0]);
  for (double theta : {1e-300, 1e-46, 1e39}) {
    SCOPED_TRACE(theta);
    config["rope_theta"] = theta;
    const absl::Status s = LlamaConfigFromJson(config, "c.json").status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("c.json: Llama config: rope_theta = "));
  }
  config["rope_theta"] = 1e-300;
  EXPECT_THAT(
      std::string(LlamaConfigFromJson(config, "c.json").status().message()),
      HasSubstr("rope_theta = 1e-300 gives rotary frequencies (1 / "
                "theta^(2i / head_dim)) or angles (position x frequency, "
                "positions up to 7) that are not finite in f32, at pair 0 of "
                "a head 4 wide"));
  for (double theta : {1e-30, 0.5, 1e30}) {
    config["rope_theta"] = theta;
    EXPECT_TRUE(LlamaConfigFromJson(config, "c.json").ok()) << theta;
  }
  EXPECT_EQ(RopeThetaProblem(10000, 128, 131072), "");
  // Wider heads reach larger exponents: the top pair's angle overflows.
  EXPECT_THAT(RopeThetaProblem(1e-36, 128, 2048),
              HasSubstr("not finite in f32, at pair 63 of a head 128 wide"));
  EXPECT_EQ(RopeThetaProblem(1e-36, 4, 2048), "");
}

TEST(LlamaCheckpoint, TensorsMustBeTheConfigsNamingTheOffender) {
  const LlamaConfig c = Tiny(false);
  const std::string dir = TestDir("bad");
  ASSERT_TRUE(WriteLlamaDirectory(dir, c, State(c), int64_t{1} << 30).ok());
  // A config whose sizes the tensors do not have.
  Json config = Json::parse(LlamaConfigJson(c));
  config["intermediate_size"] = 32;
  WriteJson(dir + "/config.json", config);
  EXPECT_THAT(ReadLlamaDirectory(dir).status().message(),
              HasSubstr("tensor 'model.layers.0.mlp.gate_proj.weight' is "
                        "[24, 16], expected [32, 16]"));
  // More layers than any file could hold: the first missing one is named,
  // without listing 2^31 - 1 layers' names first.
  config = Json::parse(LlamaConfigJson(c));
  config["num_hidden_layers"] = 2147483647;
  WriteJson(dir + "/config.json", config);
  EXPECT_THAT(ReadLlamaDirectory(dir).status().message(),
              HasSubstr("missing tensor 'model.layers.2.self_attn.q_proj."
                        "weight'"));
  // Untied but without lm_head.weight; a stray tensor; F64 weights.
  auto write = [&](std::vector<std::pair<std::string, Tensor>> tensors) {
    ASSERT_TRUE(WritePretrainedDirectory(dir, LlamaConfigJson(c), tensors,
                                         int64_t{1} << 30)
                    .ok());
  };
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, t] : State(c)) {
    if (name != "lm_head.weight") tensors.push_back({name, t});
  }
  write(tensors);
  EXPECT_THAT(ReadLlamaDirectory(dir).status().message(),
              HasSubstr("missing tensor 'lm_head.weight'"));
  tensors.push_back({"lm_head.weight", State(c).at("lm_head.weight")});
  tensors.push_back({"model.extra", *Tensor::FromFloats({1}, {1})});
  write(tensors);
  EXPECT_THAT(ReadLlamaDirectory(dir).status().message(),
              HasSubstr("unexpected tensor 'model.extra'"));
  tensors.pop_back();
  tensors[0].second = *tensors[0].second.To(Device::Cpu());
  Tensor f64 = *Tensor::Empty(tensors[0].second.shape(), DType::kF64);
  tensors[0].second = f64;
  write(tensors);
  EXPECT_THAT(ReadLlamaDirectory(dir).status().message(),
              HasSubstr("is F64; Llama weights must be F32, F16 or BF16"));
}

TEST(LlamaCheckpoint, PrefixlessNamesAndIgnoredBuffers) {
  LlamaConfig c = Tiny(true);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, t] : State(c)) {
    tensors.push_back({name.substr(6), t});  // Without "model.".
  }
  tensors.push_back({"layers.0.self_attn.rotary_emb.inv_freq",
                     *Tensor::FromFloats({1, 2}, {2})});
  tensors.push_back(
      {"lm_head.weight", State(c).at("model.embed_tokens.weight")});
  const std::string dir = TestDir("prefixless");
  ASSERT_TRUE(WritePretrainedDirectory(dir, LlamaConfigJson(c), tensors,
                                       int64_t{1} << 30)
                  .ok());
  absl::StatusOr<LlamaCheckpoint> read = ReadLlamaDirectory(dir);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->state.size(), State(c).size());
  EXPECT_TRUE(read->state.count("model.norm.weight"));
}

TEST(LlamaCheckpoint, WritingRefusesNonFiniteAndMissingTensors) {
  const LlamaConfig c = Tiny(false);
  auto state = State(c);
  state.erase("model.norm.weight");
  const std::string dir = TestDir("refused");
  EXPECT_THAT(WriteLlamaDirectory(dir, c, state, 1 << 20).message(),
              HasSubstr("no tensor 'model.norm.weight'"));
  state = State(c);
  state["model.norm.weight"] = *Tensor::FromFloats(
      std::vector<float>(16, std::numeric_limits<float>::infinity()), {16});
  EXPECT_THAT(WriteLlamaDirectory(dir, c, state, 1 << 20).message(),
              HasSubstr("'model.norm.weight' holds Inf or NaN"));
  EXPECT_FALSE(fs::exists(dir + "/config.json"));
}

}  // namespace
}  // namespace chunkzero
