// LlamaModel's parameters: the configuration and what it implies (names,
// shapes, count, FLOPs), Create's initialisation and hook scopes, and
// state dicts. Computing is in llama_model.cc.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "models/common/normal_sampler.h"
#include "models/llama/llama_model.h"

namespace chunkzero {
namespace {

absl::Status CheckPositive(const char* field, int value) {
  if (value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("Llama config: ", field, " must be positive, got ", value));
}

// A layer's parameters from its first, in declaration order.
enum LayerParam {
  kQ,
  kK,
  kV,
  kO,
  kGate,
  kUp,
  kDown,
  kInputNorm,
  kPostNorm,
  kParamsPerLayer,
};

}  // namespace

std::string RopeThetaProblem(double theta, int head_dim, int positions) {
  if (!(std::isfinite(theta) && theta > 0)) {
    return absl::StrCat(theta, " is not a positive number");
  }
  // As RopeTables: the base, the exponent, the frequency and the angle in
  // f32 (the largest angle is the last position's).
  const float base = static_cast<float>(theta);
  const float last = static_cast<float>(std::max(positions, 1) - 1);
  for (int i = 0; i < head_dim / 2; ++i) {
    const float exponent =
        static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float inv_freq = 1.0f / std::pow(base, exponent);
    if (!(base > 0) || !std::isfinite(base) || !std::isfinite(inv_freq) ||
        !std::isfinite(last * inv_freq)) {
      return absl::StrCat(
          theta,
          " gives rotary frequencies (1 / theta^(2i / head_dim)) or "
          "angles (position x frequency, positions up to ",
          positions - 1, ") that are not finite in f32, at pair ", i,
          " of a head ", head_dim, " wide");
    }
  }
  return "";
}

absl::Status LlamaConfig::Validate() const {
  CZ_RETURN_IF_ERROR(CheckPositive("num_hidden_layers", layers));
  CZ_RETURN_IF_ERROR(CheckPositive("hidden_size", d_model));
  CZ_RETURN_IF_ERROR(CheckPositive("num_attention_heads", heads));
  CZ_RETURN_IF_ERROR(CheckPositive("num_key_value_heads", kv_heads));
  CZ_RETURN_IF_ERROR(CheckPositive("intermediate_size", ffn));
  CZ_RETURN_IF_ERROR(CheckPositive("vocab_size", vocab));
  CZ_RETURN_IF_ERROR(CheckPositive("max_position_embeddings", seq_len));
  if (head_dim < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Llama config: head_dim must be positive (or 0 for hidden_size / "
        "num_attention_heads), got ",
        head_dim));
  }
  if (heads % kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Llama config: num_attention_heads (", heads,
        ") must be a multiple of num_key_value_heads (", kv_heads, ")"));
  }
  if (head_dim == 0 && d_model % heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Llama config: hidden_size (", d_model,
                     ") must be a multiple of num_attention_heads (", heads,
                     ") when head_dim is not given"));
  }
  if (resolved_head_dim() % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Llama config: head_dim ", resolved_head_dim(),
                     " must be even (the rotary embedding rotates pairs)"));
  }
  if (!(std::isfinite(rope_theta) && rope_theta > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Llama config: rope_theta must be positive, got ", rope_theta));
  }
  if (const std::string problem =
          RopeThetaProblem(rope_theta, resolved_head_dim(), seq_len);
      !problem.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Llama config: rope_theta = ", problem));
  }
  if (!(std::isfinite(rms_norm_eps) && rms_norm_eps > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Llama config: rms_norm_eps must be positive, got ", rms_norm_eps));
  }
  return absl::OkStatus();
}

std::vector<std::pair<std::string, Shape>> LlamaParameterShapes(
    const LlamaConfig& config) {
  const int64_t C = config.d_model, F = config.ffn;
  const int64_t hd = config.resolved_head_dim();
  const int64_t ch = config.heads * hd, ckv = config.kv_heads * hd;
  std::vector<std::pair<std::string, Shape>> out = {
      {"model.embed_tokens.weight", {config.vocab, C}}};
  for (int l = 0; l < config.layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    out.push_back({p + "self_attn.q_proj.weight", {ch, C}});
    out.push_back({p + "self_attn.k_proj.weight", {ckv, C}});
    out.push_back({p + "self_attn.v_proj.weight", {ckv, C}});
    out.push_back({p + "self_attn.o_proj.weight", {C, ch}});
    out.push_back({p + "mlp.gate_proj.weight", {F, C}});
    out.push_back({p + "mlp.up_proj.weight", {F, C}});
    out.push_back({p + "mlp.down_proj.weight", {C, F}});
    out.push_back({p + "input_layernorm.weight", {C}});
    out.push_back({p + "post_attention_layernorm.weight", {C}});
  }
  out.push_back({"model.norm.weight", {C}});
  if (!config.tie_word_embeddings) {
    out.push_back({"lm_head.weight", {config.vocab, C}});
  }
  return out;
}

int64_t LlamaParameterCount(const LlamaConfig& config) {
  int64_t count = 0;
  for (const auto& [name, shape] : LlamaParameterShapes(config)) {
    count += NumElements(shape);
  }
  return count;
}

double LlamaModelFlopsPerStep(const LlamaConfig& config, int seq_len,
                              int64_t tokens) {
  const double psi = static_cast<double>(LlamaParameterCount(config));
  const double attention = 12.0 * config.layers * seq_len *
                           static_cast<double>(config.heads) *
                           config.resolved_head_dim();
  return (6.0 * psi + attention) * static_cast<double>(tokens);
}

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Create(
    const LlamaConfig& config, uint64_t seed, DType dtype, Device device,
    ParameterTiming timing) {
  CZ_RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<LayerBackend> backend;
  if (device == Device::Cpu()) {
    backend = MakeCpuLayerBackend();
  } else if (device.type() == DeviceType::kCuda) {
    CZ_ASSIGN_OR_RETURN(backend, MakeCudaLayerBackend(device));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("LlamaModel computes on the cpu or a GPU (cuda:N), not ",
                     device.ToString()));
  }
  std::unique_ptr<LlamaModel> model(new LlamaModel(config, std::move(backend)));
  NormalSampler normal(seed);
  for (auto& [name, shape] : LlamaParameterShapes(config)) {
    const bool norm = absl::EndsWith(name, "norm.weight");
    CZ_RETURN_IF_ERROR(model->scopes_
                           .AddInitialised(name, shape, norm ? 0.0 : 0.02,
                                           norm ? 1.0f : 0.0f, normal, dtype,
                                           device, timing)
                           .status());
  }

  auto scope = [&](std::vector<int> index, unsigned matrices = 0) {
    return model->scopes_.MakeScope(std::move(index), matrices);
  };
  const int L = config.layers;
  const int norm = 1 + L * kParamsPerLayer;
  model->embedding_ = scope({0});
  model->norm_ = scope({norm});
  model->lm_head_ = scope({config.tie_word_embeddings ? 0 : norm + 1}, 0b1);
  for (int l = 0; l < L; ++l) {
    const int b = 1 + l * kParamsPerLayer;
    model->layers_.push_back({scope({b + kInputNorm}),
                              scope({b + kQ, b + kK, b + kV, b + kO}, 0b1111),
                              scope({b + kPostNorm}),
                              scope({b + kGate, b + kUp, b + kDown}, 0b111)});
  }
  // The largest group whose grads are held at once: the embedding or the
  // output projection, q k v, or gate and up.
  const int64_t C = config.d_model, F = config.ffn;
  const int64_t hd = config.resolved_head_dim();
  const int64_t qkv = (config.heads + 2 * config.kv_heads) * hd * C;
  const int64_t grads =
      std::max({static_cast<int64_t>(config.vocab) * C, qkv, 2 * F * C});
  CZ_RETURN_IF_ERROR(model->scopes_.MakeGradBuffer(grads));
  return model;
}

std::vector<Parameter*> LlamaModel::Parameters() {
  return scopes_.Parameters();
}

Parameter* LlamaModel::FindParameter(const std::string& name) {
  return scopes_.Find(name);
}

absl::Status LlamaModel::LoadStateDict(
    const std::map<std::string, Tensor>& state) {
  return scopes_.LoadStateDict(state, "Llama");
}

}  // namespace chunkzero
