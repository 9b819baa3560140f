#include "tools/train/model_spec.h"

#include <charconv>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace chunkzero {
namespace {

// The shortest decimal that reads back as `v` (StrCat keeps 6 digits, so
// two rope_theta values could compare equal in a checkpoint's record).
std::string ExactDecimal(double v) {
  char text[32];
  const std::to_chars_result r = std::to_chars(text, text + sizeof(text), v);
  return std::string(text, r.ptr);
}

}  // namespace

absl::string_view ModelFamilyName(ModelFamily family) {
  return family == ModelFamily::kLlama ? "llama" : "gpt2";
}

absl::StatusOr<ModelFamily> ParseModelFamily(absl::string_view text) {
  if (text == "gpt2") return ModelFamily::kGpt2;
  if (text == "llama") return ModelFamily::kLlama;
  return absl::InvalidArgumentError(
      absl::StrCat("--model='", text, "': want gpt2 or llama"));
}

int ModelSpec::layers() const {
  return family == ModelFamily::kLlama ? llama.layers : gpt.layers;
}
int ModelSpec::d_model() const {
  return family == ModelFamily::kLlama ? llama.d_model : gpt.d_model;
}
int ModelSpec::vocab() const {
  return family == ModelFamily::kLlama ? llama.vocab : gpt.vocab;
}
int ModelSpec::positions() const {
  return family == ModelFamily::kLlama ? llama.seq_len : gpt.seq_len;
}

absl::Status ModelSpec::Validate() const {
  return family == ModelFamily::kLlama ? llama.Validate() : gpt.Validate();
}

int64_t ModelSpec::ParameterCount() const {
  return family == ModelFamily::kLlama ? LlamaParameterCount(llama)
                                       : GptParameterCount(gpt);
}

std::vector<std::pair<std::string, Shape>> ModelSpec::FirstUseOrder() const {
  if (family == ModelFamily::kGpt2) return GptParameterShapes(gpt);
  // Hugging Face declares a layer's attention and MLP before its norms;
  // forward uses input_layernorm first and post_attention_layernorm
  // between the two.
  std::vector<std::pair<std::string, Shape>> declared =
      LlamaParameterShapes(llama);
  std::vector<std::pair<std::string, Shape>> out = {declared[0]};
  constexpr int kPerLayer = 9;  // q k v o gate up down, the two norms.
  for (int l = 0; l < llama.layers; ++l) {
    const auto* p = &declared[1 + l * kPerLayer];
    for (int i : {7, 0, 1, 2, 3, 8, 4, 5, 6}) out.push_back(p[i]);
  }
  for (size_t i = 1 + llama.layers * kPerLayer; i < declared.size(); ++i) {
    out.push_back(declared[i]);
  }
  return out;
}

int64_t ModelSpec::BlockParameters() const {
  const int64_t C = d_model();
  if (family == ModelFamily::kGpt2) return 12 * C * C + 13 * C;
  const int64_t hd = llama.resolved_head_dim();
  const int64_t ch = llama.heads * hd, ckv = llama.kv_heads * hd;
  return 2 * ch * C + 2 * ckv * C + 3 * int64_t{llama.ffn} * C + 2 * C;
}

double ModelSpec::FlopsPerStep(int seq_len, int64_t tokens) const {
  return family == ModelFamily::kLlama
             ? LlamaModelFlopsPerStep(llama, seq_len, tokens)
             : GptModelFlopsPerStep(gpt, seq_len, tokens);
}

std::string ModelSpec::Describe() const {
  if (family == ModelFamily::kGpt2) {
    return absl::StrCat("GPT-2: ", gpt.layers, " layers x ", gpt.d_model, ", ",
                        gpt.heads, " heads");
  }
  char theta[32];
  std::snprintf(theta, sizeof(theta), "%g", llama.rope_theta);
  return absl::StrCat("Llama: ", llama.layers, " layers x ", llama.d_model,
                      ", ", llama.heads, " heads (", llama.kv_heads,
                      " kv, head_dim ", llama.resolved_head_dim(), "), ffn ",
                      llama.ffn, ", rope_theta ", theta,
                      llama.tie_word_embeddings ? ", tied embeddings" : "");
}

std::map<std::string, std::string> ModelSpec::CheckpointConfig() const {
  if (family == ModelFamily::kGpt2) {
    return {{"model", "gpt2"},
            {"layers", absl::StrCat(gpt.layers)},
            {"d_model", absl::StrCat(gpt.d_model)},
            {"heads", absl::StrCat(gpt.heads)},
            {"seq_len", absl::StrCat(gpt.seq_len)},
            {"vocab", absl::StrCat(gpt.vocab)}};
  }
  return {
      {"model", "llama"},
      {"layers", absl::StrCat(llama.layers)},
      {"d_model", absl::StrCat(llama.d_model)},
      {"heads", absl::StrCat(llama.heads)},
      {"kv_heads", absl::StrCat(llama.kv_heads)},
      {"head_dim", absl::StrCat(llama.resolved_head_dim())},
      {"ffn", absl::StrCat(llama.ffn)},
      {"seq_len", absl::StrCat(llama.seq_len)},
      {"vocab", absl::StrCat(llama.vocab)},
      {"rope_theta", ExactDecimal(llama.rope_theta)},
      {"rms_norm_eps", ExactDecimal(llama.rms_norm_eps)},
      {"tie_word_embeddings", llama.tie_word_embeddings ? "true" : "false"}};
}

absl::StatusOr<std::unique_ptr<LanguageModel>> ModelSpec::Create(
    uint64_t seed, Device device, bool fused_attention) const {
  if (family == ModelFamily::kLlama) {
    if (fused_attention) {
      return absl::InvalidArgumentError(
          "--fused_attention: the Llama model has only the batched attention");
    }
    CZ_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model,
                        LlamaModel::Create(llama, seed, DType::kF32, device,
                                           ParameterTiming::kDeferred));
    return std::unique_ptr<LanguageModel>(std::move(model));
  }
  CZ_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> model,
                      GptModel::Create(gpt, seed, DType::kF32, device,
                                       ParameterTiming::kDeferred));
  CZ_RETURN_IF_ERROR(model->set_fused_attention(fused_attention));
  return std::unique_ptr<LanguageModel>(std::move(model));
}

}  // namespace chunkzero
