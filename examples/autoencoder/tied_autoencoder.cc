#include "autoencoder/tied_autoencoder.h"

#include <cmath>
#include <random>
#include <utility>

namespace autoencoder {

using chunkzero::HookScope;
using chunkzero::ParamHooks;
using chunkzero::Tensor;

namespace {

Tensor Random(chunkzero::Shape shape, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  std::vector<float> v(chunkzero::NumElements(shape));
  for (float& x : v) x = u(rng);
  return *Tensor::FromFloats(v, std::move(shape));
}

Tensor Filled(int64_t n, float value) {
  return *Tensor::FromFloats(std::vector<float>(n, value), {n});
}

}  // namespace

TiedAutoencoder::TiedAutoencoder(int width, int hidden, uint32_t seed)
    : width_(width),
      hidden_(hidden),
      gate_("gate", Filled(width, 1.0f)),
      weight_("weight", Tensor()),
      encoder_bias_("encoder.bias", Filled(hidden, 0.0f)),
      decoder_bias_("decoder.bias", Filled(width, 0.0f)) {
  std::mt19937 rng(seed);
  weight_.set_data(Random({hidden, width}, rng));
}

absl::StatusOr<double> TiedAutoencoder::Forward(ParamHooks& hooks,
                                                const std::vector<float>& x,
                                                int rows, bool use_gate) {
  const int W = width_, H = hidden_;
  x_ = x;
  rows_ = rows;
  used_gate_ = use_gate;
  gated_ = x;
  if (use_gate) {
    CZ_ASSIGN_OR_RETURN(HookScope scope, HookScope::Forward(hooks, {&gate_}));
    CZ_ASSIGN_OR_RETURN(const std::vector<float> g, gate_.data().ToFloats());
    for (int r = 0; r < rows; ++r) {
      for (int i = 0; i < W; ++i) gated_[r * W + i] *= g[i];
    }
    CZ_RETURN_IF_ERROR(scope.Exit());
  }
  {  // Encoder: h = tanh(gated W^T + b_enc).
    CZ_ASSIGN_OR_RETURN(HookScope scope,
                        HookScope::Forward(hooks, {&weight_, &encoder_bias_}));
    CZ_ASSIGN_OR_RETURN(const std::vector<float> w, weight_.data().ToFloats());
    CZ_ASSIGN_OR_RETURN(const std::vector<float> b,
                        encoder_bias_.data().ToFloats());
    h_.assign(static_cast<size_t>(rows) * H, 0.0f);
    for (int r = 0; r < rows; ++r) {
      for (int j = 0; j < H; ++j) {
        float acc = b[j];
        for (int i = 0; i < W; ++i) acc += gated_[r * W + i] * w[j * W + i];
        h_[r * H + j] = std::tanh(acc);
      }
    }
    CZ_RETURN_IF_ERROR(scope.Exit());
  }
  {  // Decoder, the same weight: y = h W + b_dec.
    CZ_ASSIGN_OR_RETURN(HookScope scope,
                        HookScope::Forward(hooks, {&weight_, &decoder_bias_}));
    CZ_ASSIGN_OR_RETURN(const std::vector<float> w, weight_.data().ToFloats());
    CZ_ASSIGN_OR_RETURN(const std::vector<float> b,
                        decoder_bias_.data().ToFloats());
    y_.assign(static_cast<size_t>(rows) * W, 0.0f);
    for (int r = 0; r < rows; ++r) {
      for (int i = 0; i < W; ++i) {
        float acc = b[i];
        for (int j = 0; j < H; ++j) acc += h_[r * H + j] * w[j * W + i];
        y_[r * W + i] = acc;
      }
    }
    CZ_RETURN_IF_ERROR(scope.Exit());
  }
  double loss = 0;
  for (size_t k = 0; k < y_.size(); ++k) {
    const double d = y_[k] - x_[k];
    loss += 0.5 * d * d;
  }
  return loss / rows;
}

absl::Status TiedAutoencoder::Backward(ParamHooks& hooks, float loss_scale) {
  const int W = width_, H = hidden_, rows = rows_;
  std::vector<float> dy(y_.size());
  for (size_t k = 0; k < y_.size(); ++k) {
    dy[k] = (y_[k] - x_[k]) * loss_scale / rows;
  }
  std::vector<float> dh(static_cast<size_t>(rows) * H, 0.0f);
  {  // Decoder: dW += h^T dy, db_dec = sum dy, dh = dy W^T.
    CZ_ASSIGN_OR_RETURN(HookScope scope,
                        HookScope::Backward(hooks, {&weight_, &decoder_bias_}));
    CZ_ASSIGN_OR_RETURN(const std::vector<float> w, weight_.data().ToFloats());
    std::vector<float> dw(static_cast<size_t>(H) * W, 0.0f), db(W, 0.0f);
    for (int r = 0; r < rows; ++r) {
      for (int i = 0; i < W; ++i) {
        const float g = dy[r * W + i];
        db[i] += g;
        for (int j = 0; j < H; ++j) {
          dw[j * W + i] += h_[r * H + j] * g;
          dh[r * H + j] += g * w[j * W + i];
        }
      }
    }
    // The weights are read before any grad is handed over: a grad may be
    // written where the weights were.
    CZ_RETURN_IF_ERROR(
        hooks.HandGrad(weight_, *Tensor::FromFloats(dw, {H, W})));
    CZ_RETURN_IF_ERROR(
        hooks.HandGrad(decoder_bias_, *Tensor::FromFloats(db, {W})));
    CZ_RETURN_IF_ERROR(scope.Exit());
  }
  std::vector<float> dgated(static_cast<size_t>(rows) * W, 0.0f);
  {  // Encoder: through tanh, dW += dpre^T gated, db_enc = sum dpre.
    CZ_ASSIGN_OR_RETURN(HookScope scope,
                        HookScope::Backward(hooks, {&weight_, &encoder_bias_}));
    CZ_ASSIGN_OR_RETURN(const std::vector<float> w, weight_.data().ToFloats());
    std::vector<float> dw(static_cast<size_t>(H) * W, 0.0f), db(H, 0.0f);
    for (int r = 0; r < rows; ++r) {
      for (int j = 0; j < H; ++j) {
        const float h = h_[r * H + j];
        const float dpre = dh[r * H + j] * (1 - h * h);
        db[j] += dpre;
        for (int i = 0; i < W; ++i) {
          dw[j * W + i] += dpre * gated_[r * W + i];
          dgated[r * W + i] += dpre * w[j * W + i];
        }
      }
    }
    CZ_RETURN_IF_ERROR(
        hooks.HandGrad(weight_, *Tensor::FromFloats(dw, {H, W})));
    CZ_RETURN_IF_ERROR(
        hooks.HandGrad(encoder_bias_, *Tensor::FromFloats(db, {H})));
    CZ_RETURN_IF_ERROR(scope.Exit());
  }
  if (used_gate_) {  // d gate = sum over rows of d gated * x.
    CZ_ASSIGN_OR_RETURN(HookScope scope, HookScope::Backward(hooks, {&gate_}));
    std::vector<float> dg(W, 0.0f);
    for (int r = 0; r < rows; ++r) {
      for (int i = 0; i < W; ++i) dg[i] += dgated[r * W + i] * x_[r * W + i];
    }
    CZ_RETURN_IF_ERROR(hooks.HandGrad(gate_, *Tensor::FromFloats(dg, {W})));
    CZ_RETURN_IF_ERROR(scope.Exit());
  }
  return absl::OkStatus();
}

std::vector<float> MakeData(int rows, int width, uint32_t seed) {
  // x = a u + b v + noise for two fixed directions u, v.
  std::mt19937 fixed(12345), rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> d1(width), d2(width);
  for (int i = 0; i < width; ++i) d1[i] = u(fixed), d2[i] = u(fixed);
  std::vector<float> x(static_cast<size_t>(rows) * width);
  for (int r = 0; r < rows; ++r) {
    const float a = u(rng), b = u(rng);
    for (int i = 0; i < width; ++i) {
      x[r * width + i] = a * d1[i] + b * d2[i] + 0.01f * u(rng);
    }
  }
  return x;
}

}  // namespace autoencoder
