#include "models/gpt2/gpt_checkpoint.h"

#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/file.h"
#include "base/status_macros.h"
#include "io/json/json_text.h"
#include "io/pretrained/pretrained_directory.h"
#include "io/pretrained/pretrained_export.h"
#include "io/safetensors/safetensors.h"
#include "models/common/config_keys.h"
#include "models/common/export_tensor.h"

namespace chunkzero {
namespace {

constexpr absl::string_view kPrefix = "transformer.";

// The attention mask buffers Hugging Face files carry beside the
// parameters.
bool Ignored(absl::string_view name) {
  return absl::EndsWith(name, ".attn.bias") ||
         absl::EndsWith(name, ".attn.masked_bias");
}

// The output layer GPT2LMHeadModel ties to wte: a file may hold a copy.
constexpr char kLmHead[] = "lm_head.weight";

// Whether two tensors hold the same values (of any float dtypes).
absl::StatusOr<bool> SameValues(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  if (a.dtype() == b.dtype()) {
    return std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
  }
  CZ_ASSIGN_OR_RETURN(const std::vector<float> x, a.ToFloats());
  CZ_ASSIGN_OR_RETURN(const std::vector<float> y, b.ToFloats());
  return x == y;
}

// The config that `shapes` (parameter name -> shape) describe, checked to
// hold exactly the parameters of that config. `where` starts each error.
absl::StatusOr<GptConfig> InferConfig(
    const std::map<std::string, Shape>& shapes, int heads,
    absl::string_view where) {
  auto error = [&](auto&&... what) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", what...));
  };
  for (const char* name : {"wte.weight", "wpe.weight"}) {
    auto it = shapes.find(name);
    if (it == shapes.end()) return error("missing tensor '", name, "'");
    if (it->second.size() != 2) {
      return error("tensor '", name, "' is ", ShapeToString(it->second),
                   ", expected 2 dimensions");
    }
  }
  GptConfig config;
  config.vocab = static_cast<int>(shapes.at("wte.weight")[0]);
  config.d_model = static_cast<int>(shapes.at("wte.weight")[1]);
  config.seq_len = static_cast<int>(shapes.at("wpe.weight")[0]);
  config.heads = heads;
  config.layers = 0;
  for (const auto& [name, shape] : shapes) {
    if (!absl::StartsWith(name, "h.")) continue;
    const size_t dot = name.find('.', 2);
    int layer;
    if (dot == std::string::npos ||
        !absl::SimpleAtoi(absl::string_view(name).substr(2, dot - 2), &layer) ||
        layer < 0 || layer > 100000) {
      return error("unexpected tensor ", QuoteForMessage(name));
    }
    config.layers = std::max(config.layers, layer + 1);
  }
  if (absl::Status s = config.Validate(); !s.ok()) {
    return error(s.message(), " (from the tensor shapes)");
  }
  const std::vector<std::pair<std::string, Shape>> expected =
      GptParameterShapes(config);
  for (const auto& [name, shape] : expected) {
    auto it = shapes.find(name);
    if (it == shapes.end()) return error("missing tensor '", name, "'");
    if (it->second != shape) {
      return error("tensor '", name, "' is ", ShapeToString(it->second),
                   ", expected ", ShapeToString(shape));
    }
  }
  if (shapes.size() != expected.size()) {
    for (const auto& [name, shape] : shapes) {
      bool known = false;
      for (const auto& e : expected) known = known || e.first == name;
      if (!known) return error("unexpected tensor ", QuoteForMessage(name));
    }
  }
  return config;
}

// The parameters of a file or directory of GPT-2 tensors (`source`: a
// SafetensorsFile or a PretrainedDirectory), named `where` in errors.
template <typename Source>
absl::StatusOr<GptCheckpoint> ReadGptTensors(const Source& source, int heads,
                                             const std::string& where) {
  std::map<std::string, std::string> file_names;  // Parameter -> in file.
  std::map<std::string, Shape> shapes;
  std::string lm_head;  // Its name in the file, if there.
  for (const std::string& file_name : source.names()) {
    absl::string_view name = file_name;
    absl::ConsumePrefix(&name, kPrefix);
    if (Ignored(name)) continue;
    if (name == kLmHead) {
      if (!lm_head.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": tensor '", kLmHead,
                         "' appears with and without '", kPrefix, "'"));
      }
      lm_head = file_name;
      continue;
    }
    if (!file_names.emplace(std::string(name), file_name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": tensor ", QuoteForMessage(name),
                       " appears with and without '", kPrefix, "'"));
    }
    CZ_ASSIGN_OR_RETURN(shapes[std::string(name)], source.shape(file_name));
  }
  GptCheckpoint out;
  CZ_ASSIGN_OR_RETURN(out.config, InferConfig(shapes, heads, where));
  // The model computes in these. Checked in file order, before any value
  // is read (the reader knows every dtype it lists: no escaping needed).
  for (const std::string& file_name : source.names()) {
    absl::string_view name = file_name;
    absl::ConsumePrefix(&name, kPrefix);
    if (Ignored(name)) continue;
    CZ_ASSIGN_OR_RETURN(const std::string dtype, source.dtype(file_name));
    if (dtype != "F32" && dtype != "F16" && dtype != "BF16") {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": tensor ", QuoteForMessage(file_name), " is ",
                       dtype, "; GPT-2 weights must be F32, F16 or BF16"));
    }
  }
  for (const auto& [name, file_name] : file_names) {
    CZ_ASSIGN_OR_RETURN(out.state[name], source.Get(file_name));
  }
  // A tensor the model does not use is never dropped unseen: an lm_head
  // that is not wte's copy (a model saved untied) is refused.
  if (!lm_head.empty()) {
    CZ_ASSIGN_OR_RETURN(const Tensor head, source.Get(lm_head));
    CZ_ASSIGN_OR_RETURN(const bool tied,
                        SameValues(head, out.state.at("wte.weight")));
    if (!tied) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": tensor ", QuoteForMessage(lm_head),
          " is not a copy of 'wte.weight': the output layer is the token "
          "embedding, and an untied lm_head is not supported"));
    }
  }
  return out;
}

// The tensors to write: f32, finite, "transformer."-prefixed, in
// declaration order; the config they describe.
absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> ExportTensors(
    const std::map<std::string, Tensor>& state, const std::string& where,
    GptConfig* config) {
  std::map<std::string, Shape> shapes;
  for (const auto& [name, t] : state) shapes[name] = t.shape();
  // Any head count divides d_model; the shapes do not depend on it.
  CZ_ASSIGN_OR_RETURN(*config, InferConfig(shapes, 1, where));
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, shape] : GptParameterShapes(*config)) {
    CZ_ASSIGN_OR_RETURN(Tensor f32, ExportTensor(state.at(name), name, where));
    tensors.emplace_back(absl::StrCat(kPrefix, name), std::move(f32));
  }
  return tensors;
}

// config.json's integer `key`, positive.
absl::StatusOr<int> ConfigInt(const nlohmann::json& config, const char* key,
                              const std::string& source) {
  auto it = config.find(key);
  if (it == config.end() || !it->is_number_integer() ||
      it->get<int64_t>() < 1 || it->get<int64_t>() > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": \"", key, "\" is ",
                     it == config.end() ? "missing" : JsonForMessage(*it),
                     ", want a positive integer"));
  }
  return static_cast<int>(it->get<int64_t>());
}

}  // namespace

absl::StatusOr<GptCheckpoint> ReadGptCheckpoint(const std::string& path,
                                                int heads) {
  CZ_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Read(path));
  return ReadGptTensors(file, heads,
                        absl::StrCat("GPT-2 safetensors file ", path));
}

const std::vector<ConfigKeyRule>& GptConfigKeyRules() {
  using U = ConfigKeyUse;
  static const auto* const kRules =
      new std::vector<ConfigKeyRule>(WithCommonConfigKeyRules({
          {"model_type", U::kRead, {}, "must be \"gpt2\""},
          {"n_layer", U::kRead, {}, "the number of blocks"},
          {"n_embd", U::kRead, {}, "the width"},
          {"n_head", U::kRead, {}, "the attention heads"},
          {"n_positions", U::kRead, {}, "the learned positions"},
          {"n_ctx", U::kRead, {}, "older files' n_positions; must equal it"},
          {"vocab_size", U::kRead, {}, "the vocabulary"},
          {"n_inner", U::kRead, {}, "null or 4 n_embd: the MLP's width"},
          {"activation_function",
           U::kMustBe,
           {"gelu_new", "gelu_pytorch_tanh"},
           "the MLP is GELU, tanh form (gelu_new or gelu_pytorch_tanh)"},
          {"layer_norm_epsilon", U::kMustBe, {1e-5}, "the LayerNorms use 1e-5"},
          {"scale_attn_weights",
           U::kMustBe,
           {true},
           "the attention scores are always scaled by 1 / sqrt(head size)"},
          {"scale_attn_by_inverse_layer_idx",
           U::kMustBe,
           {false},
           "scaling the attention by 1 / (layer + 1) is not supported"},
          {"reorder_and_upcast_attn",
           U::kMustBe,
           {false},
           "the attention is not reordered and upcast"},
          {"add_cross_attention",
           U::kMustBe,
           {false},
           "cross-attention is not supported"},
          {"tie_word_embeddings",
           U::kMustBe,
           {true},
           "the output layer is the token embedding wte; an untied lm_head is "
           "not supported"},
          {"attn_pdrop", U::kNoEffect, {}, "dropout: chunkzero applies none"},
          {"embd_pdrop", U::kNoEffect, {}, "dropout: chunkzero applies none"},
          {"resid_pdrop", U::kNoEffect, {}, "dropout: chunkzero applies none"},
          {"summary_first_dropout",
           U::kNoEffect,
           {},
           "GPT2DoubleHeadsModel's summary head (whose tensors are refused)"},
          {"summary_type", U::kNoEffect, {}, "the summary head's"},
          {"summary_use_proj", U::kNoEffect, {}, "the summary head's"},
          {"summary_activation", U::kNoEffect, {}, "the summary head's"},
          {"summary_proj_to_labels", U::kNoEffect, {}, "the summary head's"},
      }));
  return *kRules;
}

absl::StatusOr<GptConfig> GptConfigFromJson(const nlohmann::json& config,
                                            const std::string& source) {
  auto type = config.find("model_type");
  if (type == config.end() || *type != "gpt2") {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": \"model_type\" is ",
                     type == config.end() ? "missing" : JsonForMessage(*type),
                     ", want \"gpt2\""));
  }
  CZ_RETURN_IF_ERROR(CheckConfigKeys(config, GptConfigKeyRules(), source));
  GptConfig c;
  CZ_ASSIGN_OR_RETURN(c.layers, ConfigInt(config, "n_layer", source));
  CZ_ASSIGN_OR_RETURN(c.d_model, ConfigInt(config, "n_embd", source));
  CZ_ASSIGN_OR_RETURN(c.heads, ConfigInt(config, "n_head", source));
  CZ_ASSIGN_OR_RETURN(c.seq_len, ConfigInt(config, "n_positions", source));
  CZ_ASSIGN_OR_RETURN(c.vocab, ConfigInt(config, "vocab_size", source));
  auto refuse = [&](const char* key, absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": \"", key, "\" is ",
                     JsonForMessage(config.at(key)), "; ", why));
  };
  if (config.contains("n_inner") && !config.at("n_inner").is_null() &&
      config.at("n_inner") != nlohmann::json(int64_t{4} * c.d_model)) {
    return refuse("n_inner", "the MLP is 4 n_embd wide");
  }
  if (config.contains("n_ctx") &&
      config.at("n_ctx") != nlohmann::json(c.seq_len)) {
    return refuse("n_ctx",
                  absl::StrCat("it must equal n_positions (", c.seq_len, ")"));
  }
  if (absl::Status s = c.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", s.message()));
  }
  return c;
}

std::string GptConfigJson(const GptConfig& c) {
  nlohmann::ordered_json j;
  j["architectures"] = {"GPT2LMHeadModel"};
  j["model_type"] = "gpt2";
  j["n_layer"] = c.layers;
  j["n_embd"] = c.d_model;
  j["n_head"] = c.heads;
  j["n_positions"] = c.seq_len;
  j["n_ctx"] = c.seq_len;
  j["vocab_size"] = c.vocab;
  j["activation_function"] = "gelu_new";
  j["layer_norm_epsilon"] = 1e-5;
  j["n_inner"] = nullptr;
  j["resid_pdrop"] = 0.0;
  j["embd_pdrop"] = 0.0;
  j["attn_pdrop"] = 0.0;
  j["tie_word_embeddings"] = true;
  j["initializer_range"] = 0.02;
  j["torch_dtype"] = "float32";
  return j.dump(2);
}

absl::StatusOr<GptCheckpoint> ReadGptDirectory(const std::string& dir) {
  CZ_ASSIGN_OR_RETURN(const PretrainedDirectory files,
                      PretrainedDirectory::Read(dir));
  return ReadGptDirectory(files);
}

absl::StatusOr<GptCheckpoint> ReadGptDirectory(
    const PretrainedDirectory& files) {
  const std::string& dir = files.path();
  const std::string config_path = JoinPath(dir, kPretrainedConfigName);
  CZ_ASSIGN_OR_RETURN(const GptConfig config,
                      GptConfigFromJson(files.config(), config_path));
  CZ_ASSIGN_OR_RETURN(GptCheckpoint out,
                      ReadGptTensors(files, config.heads,
                                     absl::StrCat("GPT-2 directory ", dir)));
  const GptConfig& from = out.config;
  if (from.layers != config.layers || from.d_model != config.d_model ||
      from.seq_len != config.seq_len || from.vocab != config.vocab) {
    return absl::InvalidArgumentError(
        absl::StrCat(config_path, " says ", config.layers, " layers x ",
                     config.d_model, ", ", config.seq_len, " positions, vocab ",
                     config.vocab, " but the tensors are ", from.layers, " x ",
                     from.d_model, ", ", from.seq_len, ", ", from.vocab));
  }
  return out;
}

absl::Status WriteGptDirectory(const std::string& dir,
                               const std::map<std::string, Tensor>& state,
                               int heads, int64_t shard_bytes) {
  const std::string where = absl::StrCat("writing GPT-2 directory ", dir);
  GptConfig config;
  CZ_ASSIGN_OR_RETURN(const auto tensors, ExportTensors(state, where, &config));
  config.heads = heads;
  return WritePretrainedDirectory(dir, GptConfigJson(config), tensors,
                                  shard_bytes);
}

absl::Status WriteGptCheckpoint(const std::string& path,
                                const std::map<std::string, Tensor>& state) {
  GptConfig config;
  CZ_ASSIGN_OR_RETURN(
      const auto tensors,
      ExportTensors(state, absl::StrCat("writing GPT-2 checkpoint ", path),
                    &config));
  return WriteSafetensors(path, tensors, {{"format", "pt"}});
}

absl::Status SaveGptModel(GptModel& model, const std::string& path) {
  std::map<std::string, Tensor> state;
  for (Parameter* p : model.Parameters()) state[p->name()] = p->data();
  return WriteGptCheckpoint(path, state);
}

}  // namespace chunkzero
