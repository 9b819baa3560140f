#include "models/gpt2/gpt_checkpoint.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ddp/local_hooks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/safetensors/safetensors.h"
#include "models/common/config_keys.h"
#include "models/common/testing/config_keys_testing.h"

namespace chunkzero {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/" + name;
}

GptConfig SmallConfig() {
  GptConfig c;
  c.layers = 2;
  c.d_model = 8;
  c.heads = 2;
  c.seq_len = 6;
  c.vocab = 13;
  return c;
}

std::string Bytes(const Tensor& t) {
  return std::string(static_cast<const char*>(t.raw_data()), t.nbytes());
}

float Loss(GptModel& model) {
  LocalHooks hooks;
  std::vector<int32_t> tokens = {1, 5, 7, 2, 12, 0};
  return *model.Forward(hooks, 2, 3, tokens, tokens);
}

TEST(GptCheckpointTest, SaveAndReadRoundTrip) {
  auto model = *GptModel::Create(SmallConfig(), 42);
  const std::string path = TempPath("gpt.safetensors");
  ASSERT_TRUE(SaveGptModel(*model, path).ok());

  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Read(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata().at("format"), "pt");
  std::vector<std::string> expected;
  for (Parameter* p : model->Parameters()) {
    expected.push_back("transformer." + p->name());
  }
  EXPECT_EQ(file->names(), expected);  // Declaration order, f32.
  EXPECT_EQ(*file->dtype("transformer.h.1.mlp.c_fc.weight"), "F32");

  absl::StatusOr<GptCheckpoint> ckpt = ReadGptCheckpoint(path, 2);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ(ckpt->config.layers, 2);
  EXPECT_EQ(ckpt->config.d_model, 8);
  EXPECT_EQ(ckpt->config.heads, 2);
  EXPECT_EQ(ckpt->config.seq_len, 6);
  EXPECT_EQ(ckpt->config.vocab, 13);
  ASSERT_EQ(ckpt->state.size(), model->Parameters().size());
  for (Parameter* p : model->Parameters()) {
    EXPECT_EQ(Bytes(ckpt->state.at(p->name())), Bytes(p->data())) << p->name();
  }
  auto loaded = *GptModel::Create(ckpt->config, 7);
  ASSERT_TRUE(loaded->LoadStateDict(ckpt->state).ok());
  EXPECT_EQ(Loss(*loaded), Loss(*model));
}

TEST(GptCheckpointTest, DirectoryRoundTripsOneFileAndSharded) {
  auto model = *GptModel::Create(SmallConfig(), 42);
  std::map<std::string, Tensor> state;
  for (Parameter* p : model->Parameters()) state[p->name()] = p->data();
  for (int64_t shard : {int64_t{1} << 20, int64_t{600}}) {
    const std::string dir = TempPath(absl::StrCat("gpt_dir_", shard));
    ASSERT_TRUE(WriteGptDirectory(dir, state, 2, shard).ok());
    absl::StatusOr<GptCheckpoint> ckpt = ReadGptDirectory(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    EXPECT_EQ(ckpt->config.heads, 2);  // From config.json.
    EXPECT_EQ(ckpt->config.seq_len, 6);
    for (Parameter* p : model->Parameters()) {
      EXPECT_EQ(Bytes(ckpt->state.at(p->name())), Bytes(p->data()))
          << p->name();
    }
  }
}

TEST(GptCheckpointTest, DirectoryConfigsItCannotTakeAreRefusedByKey) {
  const nlohmann::json base =
      nlohmann::json::parse(GptConfigJson(SmallConfig()));
  EXPECT_EQ(GptConfigFromJson(base, "c")->heads, 2);
  const struct {
    const char* key;
    nlohmann::json value;
    const char* message;
  } cases[] = {
      {"activation_function", "relu", "\"activation_function\" is \"relu\""},
      {"n_inner", 64, "\"n_inner\" is 64; the MLP is 4 n_embd wide"},
      {"layer_norm_epsilon", 1e-6, "\"layer_norm_epsilon\" is 1e-06"},
      {"add_cross_attention", true, "\"add_cross_attention\" is true"},
      {"n_head", 3, "must be a multiple of GptConfig.heads (3)"},
      {"model_type", "llama", "\"model_type\" is \"llama\", want \"gpt2\""},
      {"n_layer", "2", "\"n_layer\" is \"2\", want a positive integer"},
  };
  for (const auto& [key, value, message] : cases) {
    nlohmann::json config = base;
    config[key] = value;
    EXPECT_THAT(GptConfigFromJson(config, "d/config.json").status().message(),
                HasSubstr(message))
        << key;
  }
}

TEST(GptCheckpointTest, NonFiniteWeightsAreNotWritten) {
  auto model = *GptModel::Create(SmallConfig(), 42);
  std::map<std::string, Tensor> state;
  for (Parameter* p : model->Parameters()) state[p->name()] = p->data();
  state.at("h.1.ln_2.bias").data<float>()[3] =
      std::numeric_limits<float>::quiet_NaN();
  const std::string path = TempPath("nan.safetensors");
  const absl::Status status = WriteGptCheckpoint(path, state);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            absl::StrCat("writing GPT-2 checkpoint ", path,
                         ": tensor 'h.1.ln_2.bias' holds Inf or NaN; such a "
                         "model is unusable, so nothing was written"));
  EXPECT_FALSE(SafetensorsFile::Read(path).ok());
}

TEST(GptCheckpointTest, HalfModelIsSavedAsF32) {
  auto model = *GptModel::Create(SmallConfig(), 3, DType::kBF16);
  const std::string path = TempPath("gpt_bf16.safetensors");
  ASSERT_TRUE(SaveGptModel(*model, path).ok());
  GptCheckpoint ckpt = *ReadGptCheckpoint(path, 4);
  EXPECT_EQ(ckpt.config.heads, 4);
  for (Parameter* p : model->Parameters()) {
    EXPECT_EQ(ckpt.state.at(p->name()).dtype(), DType::kF32);
    EXPECT_EQ(*ckpt.state.at(p->name()).ToFloats(), *p->data().ToFloats());
  }
}

// config.json as GPT2LMHeadModel(GPT2Config(...)).save_pretrained writes
// it in transformers 4.57.6 and 5.25.0 (sizes set to SmallConfig's).
constexpr const char* kTransformersGpt2Configs[] = {
    R"({"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": 0.1, "bos_token_id": 50256, "embd_pdrop": 0.1,
        "eos_token_id": 50256, "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_embd": 8,
        "n_head": 2, "n_inner": null, "n_layer": 2, "n_positions": 6,
        "reorder_and_upcast_attn": false, "resid_pdrop": 0.1,
        "scale_attn_by_inverse_layer_idx": false, "scale_attn_weights": true,
        "summary_activation": null, "summary_first_dropout": 0.1,
        "summary_proj_to_labels": true, "summary_type": "cls_index",
        "summary_use_proj": true, "torch_dtype": "float32",
        "transformers_version": "4.57.6", "use_cache": true,
        "vocab_size": 13})",
    R"({"activation_function": "gelu_new", "add_cross_attention": false,
        "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
        "bos_token_id": 50256, "dtype": "float32", "embd_pdrop": 0.1,
        "eos_token_id": 50256, "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_embd": 8,
        "n_head": 2, "n_inner": null, "n_layer": 2, "n_positions": 6,
        "pad_token_id": null, "reorder_and_upcast_attn": false,
        "resid_pdrop": 0.1, "scale_attn_by_inverse_layer_idx": false,
        "scale_attn_weights": true, "summary_activation": null,
        "summary_first_dropout": 0.1, "summary_proj_to_labels": true,
        "summary_type": "cls_index", "summary_use_proj": true,
        "tie_word_embeddings": true, "transformers_version": "5.25.0",
        "use_cache": true, "vocab_size": 13})",
    // The hub's gpt2 (an older writer): n_ctx and task_specific_params.
    R"({"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": 0.1, "bos_token_id": 50256, "embd_pdrop": 0.1,
        "eos_token_id": 50256, "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 6,
        "n_embd": 8, "n_head": 2, "n_layer": 2, "n_positions": 6,
        "resid_pdrop": 0.1, "summary_activation": null,
        "summary_first_dropout": 0.1, "summary_proj_to_labels": true,
        "summary_type": "cls_index", "summary_use_proj": true,
        "task_specific_params": {"text-generation": {"do_sample": true,
        "max_length": 50}}, "vocab_size": 13})",
};

// A value other than `v` (of its type where it has one).
nlohmann::json OtherValue(const nlohmann::json& v) {
  if (v.is_boolean()) return !v.get<bool>();
  if (v.is_string()) return v.get<std::string>() + "_other";
  if (v.is_number()) return v.get<double>() * 2 + 1;
  if (v.is_null()) return 1;
  return nlohmann::json::object();
}

bool SameConfig(const GptConfig& a, const GptConfig& b) {
  return a.layers == b.layers && a.d_model == b.d_model && a.heads == b.heads &&
         a.seq_len == b.seq_len && a.vocab == b.vocab;
}

// Every key transformers writes is read, refused unless the model computes
// it, or of no effect: none is dropped unseen.
TEST(GptCheckpointTest, EveryKeyTransformersWritesIsRuledOn) {
  for (const char* text : kTransformersGpt2Configs) {
    config_keys_testing::ExpectEveryKeyIsRuledOn<GptConfig>(
        nlohmann::json::parse(text), GptConfigKeyRules(),
        [](const nlohmann::json& j) { return GptConfigFromJson(j, "c.json"); },
        SameConfig, OtherValue);
    EXPECT_TRUE(
        SameConfig(*GptConfigFromJson(nlohmann::json::parse(text), "c.json"),
                   SmallConfig()));
  }
}

TEST(GptCheckpointTest, WhatTheModelDoesNotComputeIsRefusedByKey) {
  const nlohmann::json base =
      nlohmann::json::parse(kTransformersGpt2Configs[1]);
  const struct {
    const char* key;
    nlohmann::json value;
    const char* message;
  } cases[] = {
      {"scale_attn_weights", false,
       "d/config.json: \"scale_attn_weights\" is false; the attention "
       "scores are always scaled by 1 / sqrt(head size)"},
      {"tie_word_embeddings", false,
       "d/config.json: \"tie_word_embeddings\" is false; the output layer "
       "is the token embedding wte; an untied lm_head is not supported"},
      {"reorder_and_upcast_attn", true, "\"reorder_and_upcast_attn\" is true"},
      {"n_ctx", 1024, "\"n_ctx\" is 1024; it must equal n_positions (6)"},
      {"n_inner", 32, nullptr},  // 4 n_embd: the same MLP.
      {"activation_function", "gelu_pytorch_tanh", nullptr},
  };
  for (const auto& [key, value, message] : cases) {
    SCOPED_TRACE(key);
    nlohmann::json config = base;
    config[key] = value;
    const absl::StatusOr<GptConfig> read =
        GptConfigFromJson(config, "d/config.json");
    if (message == nullptr) {
      EXPECT_TRUE(read.ok()) << read.status();
    } else {
      EXPECT_THAT(std::string(read.status().message()), HasSubstr(message));
    }
  }
  // A hostile value is quoted short, with what it is.
  nlohmann::json hostile = base;
  hostile["model_type"] = std::string(60'000'000, 'x');
  const absl::Status s = GptConfigFromJson(hostile, "d/config.json").status();
  EXPECT_LT(s.message().size(), 200u);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("(a string of 60000000 bytes), want \"gpt2\""));
}

// What Hugging Face writes: GPT2LMHeadModel's "transformer."-prefixed
// names or GPT2Model's bare ones, the causal-mask buffers and the tied
// lm_head copy; here also a mix of dtypes.
std::vector<std::pair<std::string, Tensor>> HuggingFaceTensors(GptModel& model,
                                                               bool prefix) {
  const GptConfig& c = model.config();
  const std::string pre = prefix ? "transformer." : "";
  std::vector<std::pair<std::string, Tensor>> out;
  for (Parameter* p : model.Parameters()) {
    Tensor t = p->data();
    if (absl::StrContains(p->name(), "c_fc")) {
      t = *Tensor::FromFloats(*t.ToFloats(), t.shape(), DType::kF16);
    }
    out.push_back({pre + p->name(), t});
  }
  for (int l = 0; l < c.layers; ++l) {
    out.push_back({absl::StrCat(pre, "h.", l, ".attn.bias"),
                   *Tensor::Zeros({1, 1, c.seq_len, c.seq_len}, DType::kF32)});
    out.push_back({absl::StrCat(pre, "h.", l, ".attn.masked_bias"),
                   *Tensor::FromFloats({-1e4f}, {})});
  }
  out.push_back({"lm_head.weight", model.Parameters()[0]->data()});
  return out;
}

TEST(GptCheckpointTest, ReadsHuggingFaceLayouts) {
  auto model = *GptModel::Create(SmallConfig(), 5);
  for (bool prefix : {true, false}) {
    SCOPED_TRACE(prefix);
    const std::string path = TempPath("hf.safetensors");
    ASSERT_TRUE(
        WriteSafetensors(path, HuggingFaceTensors(*model, prefix)).ok());
    absl::StatusOr<GptCheckpoint> ckpt = ReadGptCheckpoint(path, 2);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    EXPECT_EQ(ckpt->config.layers, 2);
    EXPECT_EQ(ckpt->state.size(), model->Parameters().size());
    EXPECT_EQ(ckpt->state.at("h.0.mlp.c_fc.weight").dtype(), DType::kF16);
    EXPECT_EQ(Bytes(ckpt->state.at("wte.weight")),
              Bytes(model->Parameters()[0]->data()));
    auto loaded = *GptModel::Create(ckpt->config, 1);
    ASSERT_TRUE(loaded->LoadStateDict(ckpt->state).ok());
  }
}

// A saved untied model's head differs from wte: refused, not dropped.
TEST(GptCheckpointTest, AnLmHeadThatIsNotWtesCopyIsRefused) {
  auto model = *GptModel::Create(SmallConfig(), 5);
  std::vector<std::pair<std::string, Tensor>> tensors =
      HuggingFaceTensors(*model, true);
  const std::string path = TempPath("untied.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  EXPECT_TRUE(ReadGptCheckpoint(path, 2).ok());  // The tied copy.
  Tensor head = *Tensor::FromFloats(*tensors.back().second.ToFloats(),
                                    tensors.back().second.shape());
  head.data<float>()[3] += 1;
  tensors.back().second = head;
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  const absl::Status s = ReadGptCheckpoint(path, 2).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("tensor 'lm_head.weight' is not a copy of "
                        "'wte.weight': the output layer is the token "
                        "embedding, and an untied lm_head is not supported"));
}

TEST(GptCheckpointTest, BadCheckpointsNameFileAndTensor) {
  auto model = *GptModel::Create(SmallConfig(), 5);
  const std::vector<std::pair<std::string, Tensor>> good =
      HuggingFaceTensors(*model, true);
  struct Case {
    const char* what;
    std::function<void(std::vector<std::pair<std::string, Tensor>>&)> edit;
    const char* names;
  };
  auto drop = [](const char* name) {
    return [name](std::vector<std::pair<std::string, Tensor>>& t) {
      for (auto it = t.begin(); it != t.end(); ++it) {
        if (it->first == name) {
          t.erase(it);
          return;
        }
      }
    };
  };
  const Case cases[] = {
      {"missing", drop("transformer.h.1.mlp.c_fc.bias"),
       "missing tensor 'h.1.mlp.c_fc.bias'"},
      {"missing wte", drop("transformer.wte.weight"),
       "missing tensor 'wte.weight'"},
      {"mis-shaped",
       [drop](auto& t) {
         t.push_back({"h.0.ln_1.weight", *Tensor::Zeros({9}, DType::kF32)});
         drop("transformer.h.0.ln_1.weight")(t);
       },
       "tensor 'h.0.ln_1.weight' is [9], expected [8]"},
      {"extra",
       [](auto& t) {
         t.push_back(
             {"transformer.h.0.extra", *Tensor::Zeros({1}, DType::kF32)});
       },
       "unexpected tensor 'h.0.extra'"},
      {"twice",
       [](auto& t) {
         t.push_back({"ln_f.bias", *Tensor::Zeros({8}, DType::kF32)});
       },
       "'ln_f.bias' appears with and without"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    std::vector<std::pair<std::string, Tensor>> tensors = good;
    c.edit(tensors);
    const std::string path = TempPath("bad.safetensors");
    ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
    const absl::Status s = ReadGptCheckpoint(path, 2).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr(path));
    EXPECT_THAT(s.message(), HasSubstr(c.names));
  }

  const std::string path = TempPath("good.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, good).ok());
  absl::Status s = ReadGptCheckpoint(path, 3).status();  // 8 % 3 != 0
  EXPECT_THAT(s.message(), HasSubstr("GptConfig.heads"));
  EXPECT_THAT(s.message(), HasSubstr(path));

  // Truncated: the last tensor's data is cut.
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in),
                 std::istreambuf_iterator<char>());
  }
  const std::string cut = TempPath("cut.safetensors");
  std::ofstream(cut, std::ios::binary).write(bytes.data(), bytes.size() - 10);
  s = ReadGptCheckpoint(cut, 2).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr(cut));
  EXPECT_THAT(s.message(), HasSubstr("lm_head.weight"));

  // Writing an incomplete state dict names what is missing.
  std::map<std::string, Tensor> state;
  for (Parameter* p : model->Parameters()) state[p->name()] = p->data();
  state.erase("h.1.attn.c_proj.bias");
  s = WriteGptCheckpoint(TempPath("w.safetensors"), state);
  EXPECT_THAT(s.message(), HasSubstr("'h.1.attn.c_proj.bias'"));
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
}

// `bytes`, a file WriteSafetensors wrote, with tensor `name`'s dtype string
// replaced by `dtype` (its length field follows the header; the data stays).
std::string WithDType(const std::string& bytes, const std::string& name,
                      const std::string& dtype) {
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  std::string header = bytes.substr(8, n);
  const std::string data = bytes.substr(8 + n);
  const std::string key = "\"" + name + "\":{\"dtype\":\"";
  const size_t at = header.find(key) + key.size();
  EXPECT_NE(header.find(key), std::string::npos) << name;
  header.replace(at, header.find('"', at) - at, dtype);
  n = header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

// A GPT-2 file whose weights are not F32, F16 or BF16 is refused as it is
// read, naming the file, the tensor and its dtype, and before anything reads
// the values (an F64 file used to load, and --init then failed in
// HasInfOrNan with "f64 is not f32, f16 or bf16", naming neither the file
// nor the tensor; I8 and BOOL were Unimplemented).
TEST(GptCheckpointTest, WeightsOfOtherDTypesAreRefused) {
  auto model = *GptModel::Create(SmallConfig(), 5);
  const std::string path = TempPath("dtype.safetensors");
  // Every tensor F64, as a converter might write them: the first one in the
  // file is named.
  std::vector<std::pair<std::string, Tensor>> f64;
  for (Parameter* p : model->Parameters()) {
    f64.push_back({p->name(), *Tensor::Zeros(p->data().shape(), DType::kF64)});
  }
  ASSERT_TRUE(WriteSafetensors(path, f64).ok());
  EXPECT_EQ(ReadGptCheckpoint(path, 2).status(),
            absl::InvalidArgumentError(absl::StrCat(
                "GPT-2 safetensors file ", path,
                ": tensor 'wte.weight' is F64; GPT-2 weights must be F32, F16 "
                "or BF16")));
  // One tensor in each of the other dtypes a safetensors file may hold,
  // written as a dtype of its element size and relabelled.
  struct Case {
    const char* dtype;
    DType written;
  };
  const Case cases[] = {
      {"F64", DType::kF64}, {"I64", DType::kI64},    {"U64", DType::kI64},
      {"I32", DType::kI32}, {"U32", DType::kI32},    {"I16", DType::kF16},
      {"U16", DType::kF16}, {"I8", DType::kU8},      {"U8", DType::kU8},
      {"BOOL", DType::kU8}, {"F8_E4M3", DType::kU8}, {"F8_E5M2", DType::kU8},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.dtype);
    std::vector<std::pair<std::string, Tensor>> tensors =
        HuggingFaceTensors(*model, true);
    for (auto& [name, t] : tensors) {
      if (name == "transformer.h.1.attn.c_proj.weight") {
        t = *Tensor::Zeros(t.shape(), c.written);
      }
    }
    ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
    const std::string bytes = WithDType(
        ReadBytes(path), "transformer.h.1.attn.c_proj.weight", c.dtype);
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        .write(bytes.data(), bytes.size());
    ASSERT_EQ(*SafetensorsFile::Read(path)->dtype(
                  "transformer.h.1.attn.c_proj.weight"),
              c.dtype);
    EXPECT_EQ(ReadGptCheckpoint(path, 2).status(),
              absl::InvalidArgumentError(absl::StrCat(
                  "GPT-2 safetensors file ", path,
                  ": tensor 'transformer.h.1.attn.c_proj.weight' is ", c.dtype,
                  "; GPT-2 weights must be F32, F16 or BF16")));
  }
  // The buffers it ignores may be of any dtype (some files hold the causal
  // mask as BOOL).
  std::vector<std::pair<std::string, Tensor>> tensors =
      HuggingFaceTensors(*model, true);
  for (auto& [name, t] : tensors) {
    if (name == "transformer.h.0.attn.bias") {
      t = *Tensor::Zeros(t.shape(), DType::kU8);
    }
  }
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  const std::string bytes =
      WithDType(ReadBytes(path), "transformer.h.0.attn.bias", "BOOL");
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), bytes.size());
  EXPECT_TRUE(ReadGptCheckpoint(path, 2).ok());
}

// Tensor names from the file go into errors C-escaped, so the message is
// one printable line whatever bytes the file's names hold.
TEST(GptCheckpointTest, NamesInErrorsAreEscaped) {
  auto model = *GptModel::Create(SmallConfig(), 5);
  struct Case {
    std::string extra;    // Added to a good file.
    std::string message;  // After "GPT-2 safetensors file <path>: ".
  };
  const Case cases[] = {
      {std::string("transformer.h.0.x\n\x1b[2J\0", 23),
       "unexpected tensor 'h.0.x\\n\\x1b[2J\\x00'"},
      {"h.1.it's\r", "unexpected tensor 'h.1.it\\'s\\r'"},
      {"ln_f.bias",
       "tensor 'ln_f.bias' appears with and without "
       "'transformer.'"},
  };
  const std::string path = TempPath("names.safetensors");
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    std::vector<std::pair<std::string, Tensor>> tensors =
        HuggingFaceTensors(*model, true);
    tensors.push_back({c.extra, *Tensor::Zeros({8}, DType::kF32)});
    ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
    EXPECT_EQ(ReadGptCheckpoint(path, 2).status(),
              absl::InvalidArgumentError(absl::StrCat("GPT-2 safetensors file ",
                                                      path, ": ", c.message)));
  }
}

}  // namespace
}  // namespace chunkzero
