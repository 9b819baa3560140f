// GptModel's parameters: the configuration and the parameters it implies
// (names, shapes, count, FLOPs), their initialisation and hook scopes
// (Create), and loading a state dict into them. Computing with them
// (Forward, Backward and their buffers) is in gpt_model.cc.
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
#include "models/gpt2/gpt_model.h"

namespace chunkzero {
namespace {

// Offsets of a block's parameters from its first one, in declaration order.
enum BlockParam {
  kLn1W,
  kLn1B,
  kAttnW,
  kAttnB,
  kAttnProjW,
  kAttnProjB,
  kLn2W,
  kLn2B,
  kFcW,
  kFcB,
  kMlpProjW,
  kMlpProjB,
  kParamsPerBlock,
};

absl::Status CheckPositive(const char* field, int value) {
  if (value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("GptConfig.", field, " must be positive, got ", value));
}

}  // namespace

absl::Status GptConfig::Validate() const {
  CZ_RETURN_IF_ERROR(CheckPositive("layers", layers));
  CZ_RETURN_IF_ERROR(CheckPositive("d_model", d_model));
  CZ_RETURN_IF_ERROR(CheckPositive("heads", heads));
  CZ_RETURN_IF_ERROR(CheckPositive("seq_len", seq_len));
  CZ_RETURN_IF_ERROR(CheckPositive("vocab", vocab));
  if (d_model % heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("GptConfig.d_model (", d_model,
                     ") must be a multiple of GptConfig.heads (", heads, ")"));
  }
  return absl::OkStatus();
}

std::vector<std::pair<std::string, Shape>> GptParameterShapes(
    const GptConfig& config) {
  const int64_t C = config.d_model;
  std::vector<std::pair<std::string, Shape>> out = {
      {"wte.weight", {config.vocab, C}}, {"wpe.weight", {config.seq_len, C}}};
  for (int l = 0; l < config.layers; ++l) {
    const std::string h = absl::StrCat("h.", l, ".");
    out.push_back({h + "ln_1.weight", {C}});
    out.push_back({h + "ln_1.bias", {C}});
    out.push_back({h + "attn.c_attn.weight", {C, 3 * C}});
    out.push_back({h + "attn.c_attn.bias", {3 * C}});
    out.push_back({h + "attn.c_proj.weight", {C, C}});
    out.push_back({h + "attn.c_proj.bias", {C}});
    out.push_back({h + "ln_2.weight", {C}});
    out.push_back({h + "ln_2.bias", {C}});
    out.push_back({h + "mlp.c_fc.weight", {C, 4 * C}});
    out.push_back({h + "mlp.c_fc.bias", {4 * C}});
    out.push_back({h + "mlp.c_proj.weight", {4 * C, C}});
    out.push_back({h + "mlp.c_proj.bias", {C}});
  }
  out.push_back({"ln_f.weight", {C}});
  out.push_back({"ln_f.bias", {C}});
  return out;
}

int64_t GptParameterCount(const GptConfig& config) {
  int64_t count = 0;
  for (const auto& [name, shape] : GptParameterShapes(config)) {
    count += NumElements(shape);
  }
  return count;
}

double GptModelFlopsPerStep(const GptConfig& config, int64_t tokens) {
  return GptModelFlopsPerStep(config, config.seq_len, tokens);
}

double GptModelFlopsPerStep(const GptConfig& config, int seq_len,
                            int64_t tokens) {
  const double psi = static_cast<double>(GptParameterCount(config));
  const double attention =
      12.0 * config.layers * seq_len * static_cast<double>(config.d_model);
  return (6.0 * psi + attention) * static_cast<double>(tokens);
}

absl::StatusOr<std::unique_ptr<GptModel>> GptModel::Create(
    const GptConfig& config, uint64_t seed, DType dtype, Device device,
    ParameterTiming timing) {
  CZ_RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<LayerBackend> backend;
  if (device == Device::Cpu()) {
    backend = MakeCpuLayerBackend();
  } else if (device.type() == DeviceType::kCuda) {
    CZ_ASSIGN_OR_RETURN(backend, MakeCudaLayerBackend(device));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("GptModel computes on the cpu or a GPU (cuda:N), not ",
                     device.ToString()));
  }
  std::unique_ptr<GptModel> model(new GptModel(config, std::move(backend)));
  const int64_t C = config.d_model, L = config.layers;
  NormalSampler normal(seed);
  const double proj_std = 0.02 / std::sqrt(2.0 * L);
  for (auto& [name, shape] : GptParameterShapes(config)) {
    const absl::string_view n = name;
    // Biases 0, LayerNorm weights 1, the rest normals. The residual
    // projections (attn.c_proj, mlp.c_proj) are scaled down so the residual
    // stream's variance does not grow with depth.
    double stddev = 0.02;
    float constant = 0;
    if (absl::EndsWith(n, ".bias")) {
      stddev = 0;
    } else if (absl::StrContains(n, "ln_")) {
      stddev = 0;
      constant = 1;
    } else if (absl::EndsWith(n, "c_proj.weight")) {
      stddev = proj_std;
    }
    CZ_RETURN_IF_ERROR(model->scopes_
                           .AddInitialised(name, shape, stddev, constant,
                                           normal, dtype, device, timing)
                           .status());
  }

  // The hook scopes, and the grad buffer sized for the largest group.
  auto scope = [&](std::vector<int> index, unsigned matrices = 0) {
    return model->scopes_.MakeScope(std::move(index), matrices);
  };
  // Bits 0 and 2: the attention's and the MLP's two weight matrices; wte in
  // the output projection.
  constexpr unsigned kFirstAndThird = 0b101;
  model->embedding_ = scope({0, 1});
  model->lm_head_ = scope({0}, 0b1);
  const int last = model->scopes_.size() - 2;
  model->ln_f_ = scope({last, last + 1});
  for (int l = 0; l < L; ++l) {
    const int b = 2 + l * kParamsPerBlock;
    model->blocks_.push_back(
        {scope({b + kLn1W, b + kLn1B}),
         scope({b + kAttnW, b + kAttnB, b + kAttnProjW, b + kAttnProjB},
               kFirstAndThird),
         scope({b + kLn2W, b + kLn2B}),
         scope({b + kFcW, b + kFcB, b + kMlpProjW, b + kMlpProjB},
               kFirstAndThird)});
  }
  // The largest group whose grads are held at once: c_fc's weight and
  // bias, or the embedding's wte and wpe.
  const int64_t fc_pair = C * 4 * C + 4 * C;
  const int64_t grads = std::max<int64_t>(
      fc_pair, (static_cast<int64_t>(config.vocab) + config.seq_len) * C);
  CZ_RETURN_IF_ERROR(model->scopes_.MakeGradBuffer(grads));
  return model;
}

std::vector<Parameter*> GptModel::Parameters() { return scopes_.Parameters(); }

Parameter* GptModel::FindParameter(const std::string& name) {
  return scopes_.Find(name);
}

absl::Status GptModel::LoadStateDict(
    const std::map<std::string, Tensor>& state) {
  return scopes_.LoadStateDict(state, "GPT-2");
}

}  // namespace chunkzero
