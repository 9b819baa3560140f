// ModelSpec: the architecture a train job trains, GPT-2 or a Llama-family
// decoder, and what the job needs to know of it without building it: its
// parameters in first-use order, Ψ, FLOPs, the record a checkpoint keeps,
// and how to make it.
//
//   ModelSpec spec;
//   spec.family = ModelFamily::kLlama;
//   spec.llama = config;
//   CZ_ASSIGN_OR_RETURN(std::unique_ptr<LanguageModel> model,
//                       spec.Create(/*seed=*/1234, Device::Cpu(), false));
#ifndef CHUNKZERO_TOOLS_TRAIN_MODEL_SPEC_H_
#define CHUNKZERO_TOOLS_TRAIN_MODEL_SPEC_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/common/language_model.h"
#include "models/gpt2/gpt_model.h"
#include "models/llama/llama_model.h"
#include "tensor/device.h"
#include "tensor/tensor.h"

namespace chunkzero {

// Which architecture (--model).
enum class ModelFamily { kGpt2, kLlama };

// "gpt2" or "llama", as --model spells them.
absl::string_view ModelFamilyName(ModelFamily family);
// InvalidArgument quoting the text for anything else.
absl::StatusOr<ModelFamily> ParseModelFamily(absl::string_view text);

struct ModelSpec {
  ModelFamily family = ModelFamily::kGpt2;
  GptConfig gpt;      // When family is kGpt2.
  LlamaConfig llama;  // When family is kLlama.

  int layers() const;
  int d_model() const;
  int vocab() const;
  // The positions the model has (GPT-2's learned ones, Llama's
  // max_position_embeddings): the longest context.
  int positions() const;
  // The config's own check (GptConfig / LlamaConfig::Validate).
  [[nodiscard]] absl::Status Validate() const;

  // Ψ, a tied embedding counted once.
  int64_t ParameterCount() const;
  // Every parameter's name and shape in the order forward first uses them
  // (the order the chunks pack in).
  std::vector<std::pair<std::string, Shape>> FirstUseOrder() const;
  // Elements of one block's parameters (what recomputing a block gathers).
  int64_t BlockParameters() const;
  // Model FLOPs of a training step over `tokens` tokens in sequences of
  // `seq_len` (GptModelFlopsPerStep, LlamaModelFlopsPerStep).
  double FlopsPerStep(int seq_len, int64_t tokens) const;

  // "GPT-2: 2 layers x 128, 4 heads" or "Llama: 4 layers x 256, 8 heads
  // (4 kv, head_dim 32), ffn 688, rope_theta 10000": the summary's line.
  std::string Describe() const;
  // The model's record in a checkpoint's manifest: a resumed run must
  // have the same.
  std::map<std::string, std::string> CheckpointConfig() const;

  // A fresh model with `seed`'s weights computing on `device` (the CPU or a
  // GPU), its attention fused where asked (GPT-2 on a GPU only). The
  // weights are deferred (ddp/parameter.h): each is made in host memory as
  // the engine registers it.
  [[nodiscard]] absl::StatusOr<std::unique_ptr<LanguageModel>> Create(
      uint64_t seed, Device device, bool fused_attention) const;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_TOOLS_TRAIN_MODEL_SPEC_H_
