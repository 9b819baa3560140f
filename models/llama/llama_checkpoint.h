// Llama-family checkpoints as Hugging Face directories (config.json and
// safetensors weights, one file or sharded: io/pretrained).
//
//   CZ_ASSIGN_OR_RETURN(LlamaCheckpoint ckpt, ReadLlamaDirectory("TinyLlama"));
//   CZ_ASSIGN_OR_RETURN(auto model, LlamaModel::Create(ckpt.config, 0));
//   CZ_RETURN_IF_ERROR(model->LoadStateDict(ckpt.state));
//   ...
//   CZ_RETURN_IF_ERROR(WriteLlamaDirectory("out", config, state, 5e9));
//
// The config comes from config.json as LlamaConfig (transformers) reads
// it: model_type "llama"; hidden_size, intermediate_size,
// num_hidden_layers, num_attention_heads, num_key_value_heads (default:
// the heads), head_dim (default: hidden_size / heads), vocab_size,
// max_position_embeddings, rms_norm_eps, tie_word_embeddings, with
// transformers' defaults for those left out, and rope_theta either at the
// top (transformers 4) or under rope_parameters (transformers 5, whose
// rope_type must be "default"). Every other key LlamaConfig writes is as
// LlamaConfigKeyRules() says: what the model does not compute is refused
// naming the key (rope scaling, attention or MLP biases, a sliding window,
// an activation other than silu), the rest changes nothing it computes.
//
// Tensors: the parameters of llama_model.h, with or without the "model."
// prefix (a LlamaModel's own directory has none); the rotary embedding's
// inv_freq buffers and, with tied embeddings, a copy of lm_head.weight are
// ignored. Every parameter must be present with its shape and F32, F16 or
// BF16 (checked before any value is read); any other tensor is an error.
//
// Writing stores f32 weights under LlamaForCausalLM's names in declaration
// order and a config.json that from_pretrained reads in transformers 4 and
// 5 (rope_theta at the top and in rope_parameters).
//
// Errors name the directory (and the file, key or tensor): those of
// PretrainedDirectory, and InvalidArgument for a config or tensors the
// model cannot take.
#ifndef CHUNKZERO_MODELS_LLAMA_LLAMA_CHECKPOINT_H_
#define CHUNKZERO_MODELS_LLAMA_LLAMA_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "io/pretrained/pretrained_directory.h"
#include "models/common/config_keys.h"
#include "models/llama/llama_model.h"
#include "nlohmann/json.hpp"
#include "tensor/tensor.h"

namespace chunkzero {

struct LlamaCheckpoint {
  LlamaConfig config;
  // By parameter name (llama_model.h's), CPU tensors in the file's dtype.
  std::map<std::string, Tensor> state;
};

const std::vector<ConfigKeyRule>& LlamaConfigKeyRules();

// The LlamaConfig config.json describes; `source` starts the errors.
[[nodiscard]] absl::StatusOr<LlamaConfig> LlamaConfigFromJson(
    const nlohmann::json& config, const std::string& source);
// The config.json of `config`, as transformers writes it.
std::string LlamaConfigJson(const LlamaConfig& config);

[[nodiscard]] absl::StatusOr<LlamaCheckpoint> ReadLlamaDirectory(
    const std::string& dir);
// The same, from a directory already read.
[[nodiscard]] absl::StatusOr<LlamaCheckpoint> ReadLlamaDirectory(
    const PretrainedDirectory& dir);

// Writes `state` (every parameter of `config` by name, any float dtype,
// readable on the host) as f32 with `config` into `dir`, in shards of at
// most `shard_bytes`. InvalidArgument, writing nothing, for a missing or
// mis-shaped tensor or one holding Inf or NaN.
[[nodiscard]] absl::Status WriteLlamaDirectory(
    const std::string& dir, const LlamaConfig& config,
    const std::map<std::string, Tensor>& state, int64_t shard_bytes);

}  // namespace chunkzero

#endif  // CHUNKZERO_MODELS_LLAMA_LLAMA_CHECKPOINT_H_
