// GPT-2 checkpoints in safetensors files, Hugging Face compatible.
//
//   CZ_ASSIGN_OR_RETURN(GptCheckpoint ckpt,
//                       ReadGptCheckpoint("gpt2/model.safetensors", 12));
//   CZ_ASSIGN_OR_RETURN(auto model, GptModel::Create(ckpt.config, 0));
//   CZ_RETURN_IF_ERROR(model->LoadStateDict(ckpt.state));  // or ZeroDdp's
//   ...
//   CZ_RETURN_IF_ERROR(WriteGptCheckpoint("out.safetensors", state));
//
// Reading accepts Hugging Face GPT-2 files (GPT2Model or GPT2LMHeadModel):
// tensor names with or without the "transformer." prefix; the attention
// mask buffers "*.attn.bias" and "*.attn.masked_bias" are ignored, and an
// "lm_head.weight" must be a copy of "wte.weight" (the output layer is the
// token embedding; an untied head is refused, naming the tensor). The config
// comes from the shapes: V and C from wte, P from wpe, the layer count from the
// h.N names; the head count is not in the file and is given. Every parameter
// must be present with its shape (gpt_model.h lists them); any other tensor is
// an error. Every parameter must be F32, F16 or BF16 (checked before any value
// is read) and keeps the file's dtype; the ignored tensors may be of any dtype.
//
// Writing stores the consolidated model in f32 under "transformer."-
// prefixed names, in declaration order, with the metadata {"format":
// "pt"} that transformers' loader asks for.
//
// Errors name the file and, where one is to blame, the tensor (its name
// from the file C-escaped, as QuoteForMessage in safetensors.h): NotFound
// for a missing file, DataLoss for a truncated or corrupt one,
// InvalidArgument for missing, extra or mis-shaped tensors and for weights
// of another dtype ("tensor 'wte.weight' is F64; GPT-2 weights must be F32,
// F16 or BF16").
#ifndef CHUNKZERO_MODELS_GPT2_GPT_CHECKPOINT_H_
#define CHUNKZERO_MODELS_GPT2_GPT_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "io/pretrained/pretrained_directory.h"
#include "models/common/config_keys.h"
#include "models/gpt2/gpt_model.h"
#include "nlohmann/json.hpp"
#include "tensor/tensor.h"

namespace chunkzero {

struct GptCheckpoint {
  GptConfig config;
  // By parameter name ("h.0.attn.c_attn.weight", no prefix), CPU tensors.
  std::map<std::string, Tensor> state;
};

// Reads a GPT-2 safetensors file; `heads` completes the config.
[[nodiscard]] absl::StatusOr<GptCheckpoint> ReadGptCheckpoint(
    const std::string& path, int heads);

// Writes `state` (every GPT-2 parameter by name, any float dtype, readable
// on the host; e.g. ZeroDdp::GatherStateDict's result) as f32 to `path`.
// InvalidArgument, writing nothing, if a tensor holds Inf or NaN.
[[nodiscard]] absl::Status WriteGptCheckpoint(
    const std::string& path, const std::map<std::string, Tensor>& state);

// GPT-2 as a Hugging Face directory (io/pretrained): config.json's
// model_type "gpt2", n_layer, n_embd, n_head, n_positions and vocab_size,
// every other key GPT2Config writes as GptConfigKeyRules() says (what the
// model does not compute refused naming the key: another activation or
// LayerNorm epsilon, n_inner, cross-attention, unscaled or re-scaled
// attention, an untied head), the tensors as ReadGptCheckpoint takes them,
// in one file or sharded; the config must agree with the tensors' shapes.
const std::vector<ConfigKeyRule>& GptConfigKeyRules();
[[nodiscard]] absl::StatusOr<GptConfig> GptConfigFromJson(
    const nlohmann::json& config, const std::string& source);
std::string GptConfigJson(const GptConfig& config);
[[nodiscard]] absl::StatusOr<GptCheckpoint> ReadGptDirectory(
    const std::string& dir);
// The same, from a directory already read.
[[nodiscard]] absl::StatusOr<GptCheckpoint> ReadGptDirectory(
    const PretrainedDirectory& dir);
// WriteGptCheckpoint's tensors in a directory GPT2LMHeadModel.from_pretrained
// reads, with `heads`, in shards of at most `shard_bytes`.
[[nodiscard]] absl::Status WriteGptDirectory(
    const std::string& dir, const std::map<std::string, Tensor>& state,
    int heads, int64_t shard_bytes);

// `model`'s parameters (materialised on the host) through
// WriteGptCheckpoint.
[[nodiscard]] absl::Status SaveGptModel(GptModel& model,
                                        const std::string& path);

}  // namespace chunkzero

#endif  // CHUNKZERO_MODELS_GPT2_GPT_CHECKPOINT_H_
