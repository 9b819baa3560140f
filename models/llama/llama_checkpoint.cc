#include "models/llama/llama_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
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

using Json = nlohmann::json;

constexpr absl::string_view kPrefix = "model.";

// A key that is absent or null.
bool Unset(const Json& config, const char* key) {
  auto it = config.find(key);
  return it == config.end() || it->is_null();
}

// config[key] as a positive int (`fallback` when unset).
absl::Status ReadInt(const Json& config, const char* key, int fallback,
                     int* out, const std::string& source) {
  if (Unset(config, key)) {
    *out = fallback;
    return absl::OkStatus();
  }
  const Json& v = config.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() < 1 ||
      v.get<int64_t>() > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": \"", key, "\" is ", JsonForMessage(v),
                     ", want a positive integer"));
  }
  *out = static_cast<int>(v.get<int64_t>());
  return absl::OkStatus();
}

absl::Status ReadDouble(const Json& config, const char* key, double fallback,
                        double* out, const std::string& source) {
  if (Unset(config, key)) {
    *out = fallback;
    return absl::OkStatus();
  }
  const Json& v = config.at(key);
  if (!v.is_number() || !(v.get<double>() > 0) ||
      !std::isfinite(v.get<double>())) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": \"", key,
                                                   "\" is ", JsonForMessage(v),
                                                   ", want a positive number"));
  }
  *out = v.get<double>();
  return absl::OkStatus();
}

absl::Status Refuse(const std::string& source, const char* key,
                    const Json& value, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      source, ": \"", key, "\" is ", JsonForMessage(value), "; ", why));
}

// Parameter name -> name in the directory, and the dtype check.
absl::StatusOr<std::map<std::string, std::string>> ParameterNames(
    const PretrainedDirectory& dir, const LlamaConfig& config,
    const std::string& where) {
  std::map<std::string, std::string> found;  // Parameter -> in the files.
  for (const std::string& file_name : dir.names()) {
    absl::string_view name = file_name;
    absl::ConsumePrefix(&name, kPrefix);
    if (absl::EndsWith(name, ".rotary_emb.inv_freq") ||
        (config.tie_word_embeddings && name == "lm_head.weight")) {
      continue;
    }
    // The output layer is outside the decoder: never "model."-prefixed.
    const std::string param = name == "lm_head.weight"
                                  ? std::string(name)
                                  : absl::StrCat(kPrefix, name);
    if (!found.emplace(param, file_name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": tensor ", QuoteForMessage(param),
                       " appears with and without '", kPrefix, "'"));
    }
  }
  // num_hidden_layers comes from a file and may be absurd (2^31 - 1): the
  // names are listed only for as many layers as the files could hold, one
  // more than that to name the first missing tensor.
  LlamaConfig listed = config;
  listed.layers = 0;
  const int64_t outside_layers =
      static_cast<int64_t>(LlamaParameterShapes(listed).size());
  listed.layers = 1;
  const int64_t per_layer =
      static_cast<int64_t>(LlamaParameterShapes(listed).size()) -
      outside_layers;
  const int64_t wanted = outside_layers + per_layer * config.layers;
  const int64_t held = static_cast<int64_t>(found.size());
  listed.layers = wanted <= held ? config.layers
                                 : static_cast<int>(std::min<int64_t>(
                                       config.layers, held / per_layer + 1));
  const std::vector<std::pair<std::string, Shape>> expected =
      LlamaParameterShapes(listed);
  for (const auto& [name, shape] : expected) {
    auto it = found.find(name);
    if (it == found.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": missing tensor '", name, "'"));
    }
    CZ_ASSIGN_OR_RETURN(const Shape got, dir.shape(it->second));
    if (got != shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": tensor '", name, "' is ", ShapeToString(got), ", expected ",
          ShapeToString(shape), " for config.json's sizes"));
    }
    CZ_ASSIGN_OR_RETURN(const std::string dtype, dir.dtype(it->second));
    if (dtype != "F32" && dtype != "F16" && dtype != "BF16") {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": tensor ", QuoteForMessage(it->second), " is ",
                       dtype, "; Llama weights must be F32, F16 or BF16"));
    }
  }
  if (found.size() != expected.size()) {
    std::set<std::string> known;
    for (const auto& e : expected) known.insert(e.first);
    for (const auto& [name, file_name] : found) {
      if (!known.count(name)) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": unexpected tensor ", QuoteForMessage(file_name)));
      }
    }
  }
  return found;
}

}  // namespace

const std::vector<ConfigKeyRule>& LlamaConfigKeyRules() {
  using U = ConfigKeyUse;
  static const auto* const kRules =
      new std::vector<ConfigKeyRule>(WithCommonConfigKeyRules({
          {"model_type", U::kRead, {}, "must be \"llama\""},
          {"hidden_size", U::kRead, {}, "the width"},
          {"intermediate_size", U::kRead, {}, "the MLP's width"},
          {"num_hidden_layers", U::kRead, {}, "the number of decoder layers"},
          {"num_attention_heads", U::kRead, {}, "the query heads"},
          {"num_key_value_heads", U::kRead, {}, "the key/value heads"},
          {"head_dim", U::kRead, {}, "each head's width"},
          {"vocab_size", U::kRead, {}, "the vocabulary"},
          {"max_position_embeddings", U::kRead, {}, "the positions"},
          {"rms_norm_eps", U::kRead, {}, "the RMSNorms' epsilon"},
          {"rope_theta", U::kRead, {}, "the rotary base (transformers 4)"},
          {"rope_parameters",
           U::kRead,
           {},
           "the rotary base (transformers 5); rope_type must be \"default\""},
          {"tie_word_embeddings",
           U::kRead,
           {},
           "whether lm_head is the token embedding"},
          {"rope_scaling",
           U::kMustBe,
           {nullptr},
           "rope scaling is not supported"},
          {"attention_bias", U::kMustBe, {false}, "the model has no biases"},
          {"mlp_bias", U::kMustBe, {false}, "the model has no biases"},
          {"hidden_act", U::kMustBe, {"silu"}, "the MLP is SwiGLU (silu)"},
          {"sliding_window",
           U::kMustBe,
           {nullptr},
           "sliding-window attention is not supported"},
          {"pretraining_tp",
           U::kNoEffect,
           {},
           "how the projections were split across devices; the same function"},
          {"attention_dropout",
           U::kNoEffect,
           {},
           "dropout: chunkzero applies none"},
      }));
  return *kRules;
}

absl::StatusOr<LlamaConfig> LlamaConfigFromJson(const Json& config,
                                                const std::string& source) {
  auto type = config.find("model_type");
  if (type == config.end() || !type->is_string() ||
      type->get<std::string>() != "llama") {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": \"model_type\" is ",
                     type == config.end() ? "missing" : JsonForMessage(*type),
                     ", want \"llama\""));
  }
  CZ_RETURN_IF_ERROR(CheckConfigKeys(config, LlamaConfigKeyRules(), source));
  // transformers' LlamaConfig defaults.
  LlamaConfig c;
  CZ_RETURN_IF_ERROR(
      ReadInt(config, "num_hidden_layers", 32, &c.layers, source));
  CZ_RETURN_IF_ERROR(ReadInt(config, "hidden_size", 4096, &c.d_model, source));
  CZ_RETURN_IF_ERROR(
      ReadInt(config, "num_attention_heads", 32, &c.heads, source));
  CZ_RETURN_IF_ERROR(
      ReadInt(config, "num_key_value_heads", c.heads, &c.kv_heads, source));
  CZ_RETURN_IF_ERROR(ReadInt(config, "head_dim", 0, &c.head_dim, source));
  CZ_RETURN_IF_ERROR(
      ReadInt(config, "intermediate_size", 11008, &c.ffn, source));
  CZ_RETURN_IF_ERROR(ReadInt(config, "vocab_size", 32000, &c.vocab, source));
  CZ_RETURN_IF_ERROR(
      ReadInt(config, "max_position_embeddings", 2048, &c.seq_len, source));
  CZ_RETURN_IF_ERROR(
      ReadDouble(config, "rms_norm_eps", 1e-6, &c.rms_norm_eps, source));
  auto rope = config.find("rope_parameters");
  if (rope != config.end() && !rope->is_null()) {
    if (!rope->is_object()) {
      return Refuse(source, "rope_parameters", *rope, "want an object");
    }
    auto rope_type = rope->find("rope_type");
    if (rope_type != rope->end() && *rope_type != "default") {
      return Refuse(source, "rope_parameters", *rope,
                    "only rope_type \"default\" is supported (no scaling)");
    }
    CZ_RETURN_IF_ERROR(ReadDouble(*rope, "rope_theta", 10000, &c.rope_theta,
                                  absl::StrCat(source, ": rope_parameters")));
  } else {
    CZ_RETURN_IF_ERROR(
        ReadDouble(config, "rope_theta", 10000, &c.rope_theta, source));
  }
  if (!Unset(config, "tie_word_embeddings")) {
    const Json& tie = config.at("tie_word_embeddings");
    if (!tie.is_boolean()) {
      return Refuse(source, "tie_word_embeddings", tie, "want true or false");
    }
    c.tie_word_embeddings = tie.get<bool>();
  }
  if (absl::Status s = c.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", s.message()));
  }
  return c;
}

std::string LlamaConfigJson(const LlamaConfig& c) {
  nlohmann::ordered_json j;
  j["architectures"] = {"LlamaForCausalLM"};
  j["model_type"] = "llama";
  j["hidden_size"] = c.d_model;
  j["intermediate_size"] = c.ffn;
  j["num_hidden_layers"] = c.layers;
  j["num_attention_heads"] = c.heads;
  j["num_key_value_heads"] = c.kv_heads;
  j["head_dim"] = c.resolved_head_dim();
  j["vocab_size"] = c.vocab;
  j["max_position_embeddings"] = c.seq_len;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["rope_parameters"] = {{"rope_type", "default"},
                          {"rope_theta", c.rope_theta}};
  j["rope_scaling"] = nullptr;
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["mlp_bias"] = false;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["initializer_range"] = 0.02;
  j["torch_dtype"] = "float32";
  j["use_cache"] = true;
  return j.dump(2);
}

absl::StatusOr<LlamaCheckpoint> ReadLlamaDirectory(const std::string& dir) {
  CZ_ASSIGN_OR_RETURN(const PretrainedDirectory files,
                      PretrainedDirectory::Read(dir));
  return ReadLlamaDirectory(files);
}

absl::StatusOr<LlamaCheckpoint> ReadLlamaDirectory(
    const PretrainedDirectory& files) {
  const std::string& dir = files.path();
  const std::string where = absl::StrCat("Llama directory ", dir);
  LlamaCheckpoint out;
  CZ_ASSIGN_OR_RETURN(
      out.config, LlamaConfigFromJson(files.config(),
                                      JoinPath(dir, kPretrainedConfigName)));
  CZ_ASSIGN_OR_RETURN(const auto names,
                      ParameterNames(files, out.config, where));
  for (const auto& [name, file_name] : names) {
    CZ_ASSIGN_OR_RETURN(out.state[name], files.Get(file_name));
  }
  return out;
}

absl::Status WriteLlamaDirectory(const std::string& dir,
                                 const LlamaConfig& config,
                                 const std::map<std::string, Tensor>& state,
                                 int64_t shard_bytes) {
  const std::string where = absl::StrCat("writing Llama directory ", dir);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, shape] : LlamaParameterShapes(config)) {
    auto it = state.find(name);
    if (it == state.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": no tensor '", name, "'"));
    }
    if (it->second.shape() != shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": tensor '", name, "' is ", it->second.DebugString(),
          ", expected ", ShapeToString(shape)));
    }
    CZ_ASSIGN_OR_RETURN(Tensor f32, ExportTensor(it->second, name, where));
    tensors.emplace_back(name, std::move(f32));
  }
  return WritePretrainedDirectory(dir, LlamaConfigJson(config), tensors,
                                  shard_bytes);
}

}  // namespace chunkzero
