#include "models/gpt2/gpt_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/parallel_for.h"
#include "ddp/hook_order.h"
#include "ddp/local_hooks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/gemm.h"
#include "models/common/recording_hooks.h"

namespace chunkzero {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

using Values = std::map<std::string, std::vector<float>>;

std::map<std::string, Tensor> ToState(GptModel& model, const Values& values,
                                      DType dtype = DType::kF32) {
  std::map<std::string, Tensor> state;
  for (Parameter* p : model.Parameters()) {
    state[p->name()] =
        *Tensor::FromFloats(values.at(p->name()), p->shape(), dtype);
  }
  return state;
}

// Random values for every parameter, larger than GPT-2's init so that every
// path (attention peaks, GELU curvature, LayerNorm gains) matters.
Values RandomValues(GptModel& model, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  Values values;
  for (Parameter* p : model.Parameters()) {
    std::vector<float>& v = values[p->name()];
    v.resize(p->numel());
    const bool ln_weight = p->name().find("ln_") != std::string::npos &&
                           p->name().find(".weight") != std::string::npos;
    for (float& x : v) x = (ln_weight ? 1.0f : 0.0f) + u(rng);
  }
  return values;
}

std::vector<int32_t> RandomTokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % vocab);
  return t;
}

// --- An f64 reference of the whole model: plain loops, no sharing with the
// model's code. ---

using Params64 = std::map<std::string, std::vector<double>>;

std::vector<double> RefLayerNorm(const std::vector<double>& x, int T, int C,
                                 const std::vector<double>& w,
                                 const std::vector<double>& b) {
  std::vector<double> out(x.size());
  for (int t = 0; t < T; ++t) {
    double mean = 0, var = 0;
    for (int c = 0; c < C; ++c) mean += x[t * C + c];
    mean /= C;
    for (int c = 0; c < C; ++c)
      var += (x[t * C + c] - mean) * (x[t * C + c] - mean);
    var /= C;
    const double rstd = 1.0 / std::sqrt(var + 1e-5);
    for (int c = 0; c < C; ++c) {
      out[t * C + c] = (x[t * C + c] - mean) * rstd * w[c] + b[c];
    }
  }
  return out;
}

// y[T, OC] = x[T, IC] w[IC, OC] + b.
std::vector<double> RefLinear(const std::vector<double>& x, int T, int IC,
                              const std::vector<double>& w,
                              const std::vector<double>& b, int OC) {
  std::vector<double> y(static_cast<size_t>(T) * OC);
  for (int t = 0; t < T; ++t) {
    for (int o = 0; o < OC; ++o) {
      double acc = b[o];
      for (int i = 0; i < IC; ++i) acc += x[t * IC + i] * w[i * OC + o];
      y[t * OC + o] = acc;
    }
  }
  return y;
}

double RefLoss(const GptConfig& cfg, const Params64& p, int B, int T,
               const std::vector<int32_t>& tokens,
               const std::vector<int32_t>& targets) {
  const int C = cfg.d_model, V = cfg.vocab, NH = cfg.heads, hd = C / NH;
  const std::vector<double>& wte = p.at("wte.weight");
  const std::vector<double>& wpe = p.at("wpe.weight");
  double total = 0;
  for (int b = 0; b < B; ++b) {
    std::vector<double> x(static_cast<size_t>(T) * C);
    for (int t = 0; t < T; ++t) {
      for (int c = 0; c < C; ++c) {
        x[t * C + c] = wte[tokens[b * T + t] * C + c] + wpe[t * C + c];
      }
    }
    for (int l = 0; l < cfg.layers; ++l) {
      auto P = [&](const char* name) -> const std::vector<double>& {
        return p.at(absl::StrCat("h.", l, ".", name));
      };
      std::vector<double> h =
          RefLayerNorm(x, T, C, P("ln_1.weight"), P("ln_1.bias"));
      std::vector<double> qkv = RefLinear(h, T, C, P("attn.c_attn.weight"),
                                          P("attn.c_attn.bias"), 3 * C);
      std::vector<double> y(static_cast<size_t>(T) * C, 0.0);
      for (int head = 0; head < NH; ++head) {
        for (int t = 0; t < T; ++t) {
          std::vector<double> s(t + 1);
          double m = -1e300;
          for (int u = 0; u <= t; ++u) {
            double dot = 0;
            for (int d = 0; d < hd; ++d) {
              dot += qkv[t * 3 * C + head * hd + d] *
                     qkv[u * 3 * C + C + head * hd + d];
            }
            s[u] = dot / std::sqrt(static_cast<double>(hd));
            m = std::max(m, s[u]);
          }
          double z = 0;
          for (int u = 0; u <= t; ++u) z += s[u] = std::exp(s[u] - m);
          for (int u = 0; u <= t; ++u) {
            for (int d = 0; d < hd; ++d) {
              y[t * C + head * hd + d] +=
                  s[u] / z * qkv[u * 3 * C + 2 * C + head * hd + d];
            }
          }
        }
      }
      std::vector<double> a =
          RefLinear(y, T, C, P("attn.c_proj.weight"), P("attn.c_proj.bias"), C);
      for (size_t i = 0; i < x.size(); ++i) x[i] += a[i];
      h = RefLayerNorm(x, T, C, P("ln_2.weight"), P("ln_2.bias"));
      std::vector<double> f =
          RefLinear(h, T, C, P("mlp.c_fc.weight"), P("mlp.c_fc.bias"), 4 * C);
      for (double& v : f) {
        v = 0.5 * v *
            (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
      }
      std::vector<double> o = RefLinear(f, T, 4 * C, P("mlp.c_proj.weight"),
                                        P("mlp.c_proj.bias"), C);
      for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    }
    std::vector<double> h =
        RefLayerNorm(x, T, C, p.at("ln_f.weight"), p.at("ln_f.bias"));
    for (int t = 0; t < T; ++t) {
      std::vector<double> logits(V);
      double m = -1e300;
      for (int v = 0; v < V; ++v) {
        double acc = 0;
        for (int c = 0; c < C; ++c) acc += h[t * C + c] * wte[v * C + c];
        logits[v] = acc;
        m = std::max(m, acc);
      }
      double z = 0;
      for (double l : logits) z += std::exp(l - m);
      total += std::log(z) + m - logits[targets[b * T + t]];
    }
  }
  return total / (B * T);
}

Params64 ToParams64(const Values& values) {
  Params64 p;
  for (const auto& [name, v] : values) p[name].assign(v.begin(), v.end());
  return p;
}

GptConfig TinyConfig() {
  GptConfig c;
  c.layers = 2;
  c.d_model = 8;
  c.heads = 2;
  c.seq_len = 6;
  c.vocab = 11;
  return c;
}

TEST(GptModelTest, GradientsMatchFiniteDifferencesOfF64Reference) {
  const GptConfig cfg = TinyConfig();
  const int B = 2, T = 5;  // T < seq_len: wpe's last row gets no grad.
  auto model = *GptModel::Create(cfg, 1);
  const Values values = RandomValues(*model, 7);
  ASSERT_TRUE(model->LoadStateDict(ToState(*model, values)).ok());
  const std::vector<int32_t> tokens = RandomTokens(B * T, cfg.vocab, 3);
  const std::vector<int32_t> targets = RandomTokens(B * T, cfg.vocab, 4);

  LocalHooks hooks;
  const float loss = *model->Forward(hooks, B, T, tokens, targets);
  ASSERT_TRUE(model->Backward(hooks).ok());
  ASSERT_TRUE(hooks.EndStep().ok());

  Params64 p = ToParams64(values);
  const double ref = RefLoss(cfg, p, B, T, tokens, targets);
  EXPECT_NEAR(loss, ref, 1e-5 * std::abs(ref));

  // Central differences in f64 with h = 1e-4: truncation error ~h^2 f'''
  // and rounding ~1e-16 / h are both below 1e-8, far under the f32 error
  // of the analytic grads. Those carry f32 rounding through ~10 layers of
  // sums of up to 4C = 32 terms (relative ~1e-6 of the grad's scale) plus
  // the ~2 ulp of the fast exp; observed: under 1e-6 of the tensor's
  // largest |grad|. 2e-5 of that, plus 1e-4 relative, leaves a wide margin
  // while a wrong term (a missing factor, a transposed index) is off by
  // O(1) of the grad.
  constexpr double kH = 1e-4;
  for (Parameter* param : model->Parameters()) {
    SCOPED_TRACE(param->name());
    const std::vector<float> grad = *param->grad().ToFloats();
    std::vector<double>& w = p.at(param->name());
    std::vector<double> fd(w.size());
    double scale = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      const double saved = w[i];
      w[i] = saved + kH;
      const double up = RefLoss(cfg, p, B, T, tokens, targets);
      w[i] = saved - kH;
      const double down = RefLoss(cfg, p, B, T, tokens, targets);
      w[i] = saved;
      fd[i] = (up - down) / (2 * kH);
      scale = std::max(scale, std::abs(fd[i]));
    }
    EXPECT_GT(scale, 0.0);
    double worst = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      worst = std::max(worst, std::abs(grad[i] - fd[i]) / scale);
      EXPECT_NEAR(grad[i], fd[i], 2e-5 * scale + 1e-4 * std::abs(fd[i]))
          << "element " << i;
    }
    std::printf("%-24s max |grad - fd| / max |fd| = %.1e\n",
                param->name().c_str(), worst);
  }
}

TEST(GptModelTest, LossGradScaleScalesGrads) {
  auto model = *GptModel::Create(TinyConfig(), 5);
  const std::vector<int32_t> tokens = RandomTokens(8, 11, 1);
  std::map<std::string, std::vector<float>> unscaled;
  for (float scale : {1.0f, 4.0f}) {
    LocalHooks hooks;
    ASSERT_TRUE(model->Forward(hooks, 2, 4, tokens, tokens).ok());
    ASSERT_TRUE(model->Backward(hooks, scale).ok());
    ASSERT_TRUE(hooks.EndStep().ok());
    for (Parameter* p : model->Parameters()) {
      std::vector<float> g = *p->grad().ToFloats();
      if (scale == 1.0f) {
        unscaled[p->name()] = g;
        continue;
      }
      // A power of two scales every rounding step exactly.
      for (float& v : unscaled[p->name()]) v *= 4.0f;
      EXPECT_THAT(g, ElementsAreArray(unscaled[p->name()])) << p->name();
    }
  }
}

// 1 layer, C = 2, V = 3, and every block output projection zero, so the
// block passes its input through: h = ln_f(wte[token] + wpe[t]).
// LayerNorm of [a, b] (weight 1, bias 0) is [s, -s] * sign(a - b) with
// s = |a - b| / 2 / sqrt((a - b)^2 / 4 + 1e-5). With wte rows e0 = [1, 0],
// e1 = [0, 1], e2 = [0.5, 0.5] and wpe = 0:
//   token 0: h = [s, -s], s = 0.5 / sqrt(0.25001) = 0.99998000...,
//            logits = h e^T = [s, -s, 0];
//   token 1: h = [-s, s], logits = [-s, s, 0].
// With targets (0, 2): loss = mean of log(e^s + e^-s + 1) - s and
// log(e^s + e^-s + 1) - 0, i.e. log(e^s + e^-s + 1) - s / 2
// = log(4.086114...) - 0.499990 = 0.907604...
TEST(GptModelTest, HandCheckedTinyForward) {
  GptConfig cfg;
  cfg.layers = 1;
  cfg.d_model = 2;
  cfg.heads = 1;
  cfg.seq_len = 2;
  cfg.vocab = 3;
  auto model = *GptModel::Create(cfg, 3);
  Values values = RandomValues(*model, 1);
  for (const char* zero : {"h.0.attn.c_proj.weight", "h.0.attn.c_proj.bias",
                           "h.0.mlp.c_proj.weight", "h.0.mlp.c_proj.bias",
                           "wpe.weight", "ln_f.bias"}) {
    for (float& v : values[zero]) v = 0;
  }
  values["ln_f.weight"] = {1, 1};
  values["wte.weight"] = {1, 0, 0, 1, 0.5, 0.5};
  ASSERT_TRUE(model->LoadStateDict(ToState(*model, values)).ok());

  const double s = 0.5 / std::sqrt(0.25 + 1e-5);
  const double expected = std::log(std::exp(s) + std::exp(-s) + 1.0) - s / 2;
  EXPECT_NEAR(expected, 0.907604, 1e-6);  // The comment's arithmetic.
  LocalHooks hooks;
  const float loss = *model->Forward(hooks, 1, 2, {0, 1}, {0, 2});
  EXPECT_NEAR(loss, expected, 1e-6);
  ASSERT_TRUE(model->Backward(hooks).ok());
  ASSERT_TRUE(hooks.EndStep().ok());

  // All-zero weights: every logit is 0, so the loss is log V exactly.
  for (auto& [name, v] : values) std::fill(v.begin(), v.end(), 0.0f);
  ASSERT_TRUE(model->LoadStateDict(ToState(*model, values)).ok());
  EXPECT_NEAR(*model->Forward(hooks, 1, 2, {0, 1}, {0, 2}), std::log(3.0),
              1e-6);
}

TEST(GptModelTest, HookSequenceOfOneLayerModel) {
  GptConfig cfg = TinyConfig();
  cfg.layers = 1;
  auto model = *GptModel::Create(cfg, 2);
  RecordingHooks hooks;
  const std::vector<int32_t> tokens = RandomTokens(6, cfg.vocab, 2);
  ASSERT_TRUE(model->Forward(hooks, 2, 3, tokens, tokens).ok());
  ASSERT_TRUE(model->Backward(hooks).ok());
  ASSERT_TRUE(hooks.EndStep().ok());

  const std::string emb = "wte.weight,wpe.weight";
  const std::string ln1 = "h.0.ln_1.weight,h.0.ln_1.bias";
  const std::string attn =
      "h.0.attn.c_attn.weight,h.0.attn.c_attn.bias,"
      "h.0.attn.c_proj.weight,h.0.attn.c_proj.bias";
  const std::string ln2 = "h.0.ln_2.weight,h.0.ln_2.bias";
  const std::string mlp =
      "h.0.mlp.c_fc.weight,h.0.mlp.c_fc.bias,"
      "h.0.mlp.c_proj.weight,h.0.mlp.c_proj.bias";
  const std::string lnf = "ln_f.weight,ln_f.bias";
  std::vector<std::string> expected;
  for (const std::string& s :
       {emb, ln1, attn, ln2, mlp, lnf, std::string("wte.weight")}) {
    expected.push_back("PreForward " + s);
    expected.push_back("PostForward " + s);
  }
  for (const std::string& s :
       {std::string("wte.weight"), lnf, mlp, ln2, attn, ln1, emb}) {
    expected.push_back("PreBackward " + s);
    std::vector<std::string> names = absl::StrSplit(s, ',');
    // The attention's and the MLP's output projection come first: their
    // grads are handed before the input projection's weights are read.
    if (names.size() == 4)
      std::rotate(names.begin(), names.begin() + 2, names.end());
    for (const std::string& name : names) {
      expected.push_back(absl::StrCat("HandGrad ", name));
    }
    expected.push_back("PostBackward " + s);
  }
  EXPECT_THAT(hooks.calls, ElementsAreArray(expected));
}

TEST(GptModelTest, TiedEmbeddingGetsTwoGradsThatAddUp) {
  const GptConfig cfg = TinyConfig();
  auto model = *GptModel::Create(cfg, 4);
  const std::vector<int32_t> tokens = {1, 1, 3, 5, 3, 1};  // Few distinct.
  const std::vector<int32_t> targets = RandomTokens(6, cfg.vocab, 9);
  RecordingHooks recording;
  ASSERT_TRUE(model->Forward(recording, 2, 3, tokens, targets).ok());
  ASSERT_TRUE(model->Backward(recording).ok());
  ASSERT_TRUE(recording.EndStep().ok());
  LocalHooks local;
  ASSERT_TRUE(model->Forward(local, 2, 3, tokens, targets).ok());
  ASSERT_TRUE(model->Backward(local).ok());
  ASSERT_TRUE(local.EndStep().ok());

  const auto& wte = recording.grads.at("wte.weight");
  ASSERT_EQ(wte.size(), 2u);
  const std::vector<float> sum =
      *model->FindParameter("wte.weight")->grad().ToFloats();
  const int C = cfg.d_model;
  for (int v = 0; v < cfg.vocab; ++v) {
    const bool used = v == 1 || v == 3 || v == 5;
    for (int c = 0; c < C; ++c) {
      const size_t i = v * C + c;
      EXPECT_EQ(sum[i], wte[0][i] + wte[1][i]) << i;
      // The lm head touches every row, the embedding only the inputs'.
      EXPECT_NE(wte[0][i], 0.0f) << i;
      if (!used) {
        EXPECT_EQ(wte[1][i], 0.0f) << i;
      }
    }
  }
  EXPECT_EQ(recording.grads.at("wpe.weight").size(), 1u);
}

// With either matmul precision (and, for bf16 products, this processor's
// route and the f32 one): bf16 storage hands its weight matrices to the
// products as bits, unwidened, and must still give f32's results bit for
// bit.
TEST(GptModelTest, HalfStorageComputesLikeF32WithRoundedWeights) {
  const GptConfig cfg = TinyConfig();
  auto f32 = *GptModel::Create(cfg, 6);
  Values values = RandomValues(*f32, 8);
  const std::vector<int32_t> tokens = RandomTokens(10, cfg.vocab, 5);
  const std::vector<int32_t> targets = RandomTokens(10, cfg.vocab, 6);
  struct Run {
    DType dtype;
    gemm::Precision precision;
    gemm::Bf16Route route;
  };
  std::vector<Run> runs;
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    runs.push_back({dtype, gemm::Precision::kF32, gemm::Bf16RouteHere()});
    runs.push_back(
        {dtype, gemm::Precision::kBf16, gemm::Bf16Route::kF32OnRoundedInputs});
    if (gemm::Bf16RouteHere() != gemm::Bf16Route::kF32OnRoundedInputs) {
      runs.push_back({dtype, gemm::Precision::kBf16, gemm::Bf16RouteHere()});
    }
  }
  for (const Run& run : runs) {
    const DType dtype = run.dtype;
    SCOPED_TRACE(absl::StrCat(
        DTypeName(dtype),
        run.precision == gemm::Precision::kBf16 ? " bf16 products" : "",
        run.route == gemm::Bf16Route::kBf16Matmul ? " (bf16 matmul)" : ""));
    gemm::SetBf16RouteForTesting(run.route);
    f32->set_matmul_precision(run.precision);
    Values rounded;
    for (auto& [name, v] : values) {
      rounded[name] =
          *Tensor::FromFloats(v, {static_cast<int64_t>(v.size())}, dtype)
               ->ToFloats();
    }
    auto half = *GptModel::Create(cfg, 6, dtype);
    half->set_matmul_precision(run.precision);
    EXPECT_EQ(half->FindParameter("h.1.mlp.c_fc.weight")->data().dtype(),
              dtype);
    ASSERT_TRUE(half->LoadStateDict(ToState(*half, values)).ok());
    ASSERT_TRUE(f32->LoadStateDict(ToState(*f32, rounded)).ok());
    LocalHooks h1, h2;
    const float l1 = *half->Forward(h1, 2, 5, tokens, targets);
    const float l2 = *f32->Forward(h2, 2, 5, tokens, targets);
    EXPECT_EQ(l1, l2);
    ASSERT_TRUE(half->Backward(h1).ok());
    ASSERT_TRUE(f32->Backward(h2).ok());
    ASSERT_TRUE(h1.EndStep().ok());
    ASSERT_TRUE(h2.EndStep().ok());
    for (Parameter* p : half->Parameters()) {
      EXPECT_THAT(
          *p->grad().ToFloats(),
          ElementsAreArray(*f32->FindParameter(p->name())->grad().ToFloats()))
          << p->name();
    }
  }
  gemm::SetBf16RouteForTesting(std::nullopt);
}

// bf16 matmuls (autocast): the loss and every grad move by about bf16's
// precision, no more, and the results still do not depend on the threads.
TEST(GptModelTest, Bf16MatmulsStayCloseToF32) {
  GptConfig cfg = TinyConfig();
  cfg.d_model = 64;
  cfg.vocab = 300;
  cfg.seq_len = 8;
  const std::vector<int32_t> tokens = RandomTokens(16, cfg.vocab, 3);
  const std::vector<int32_t> targets = RandomTokens(16, cfg.vocab, 4);
  struct Run {
    float loss;
    std::map<std::string, std::vector<float>> grads;
  };
  auto run = [&](gemm::Precision precision, int threads) {
    SetParallelThreadsForTesting(threads);
    auto model = *GptModel::Create(cfg, 11);
    model->set_matmul_precision(precision);
    EXPECT_EQ(model->matmul_precision(), precision);
    LocalHooks hooks;
    Run r;
    r.loss = *model->Forward(hooks, 2, 8, tokens, targets);
    EXPECT_TRUE(model->Backward(hooks).ok());
    EXPECT_TRUE(hooks.EndStep().ok());
    for (Parameter* p : model->Parameters()) {
      r.grads[p->name()] = *p->grad().ToFloats();
    }
    SetParallelThreadsForTesting(0);
    return r;
  };
  const Run f32 = run(gemm::Precision::kF32, 1);
  const Run bf16 = run(gemm::Precision::kBf16, 1);
  const Run bf16_threads = run(gemm::Precision::kBf16, 3);
  EXPECT_NE(bf16.loss, f32.loss);
  EXPECT_NEAR(bf16.loss, f32.loss, 1e-2 * f32.loss);
  EXPECT_EQ(bf16_threads.loss, bf16.loss);
  for (const auto& [name, g32] : f32.grads) {
    const std::vector<float>& g16 = bf16.grads.at(name);
    double diff = 0, norm = 0;
    for (size_t i = 0; i < g32.size(); ++i) {
      diff += (double(g16[i]) - g32[i]) * (double(g16[i]) - g32[i]);
      norm += double(g32[i]) * g32[i];
    }
    // bf16 keeps 8 significant bits (relative rounding 2^-9); a few
    // products in a row stay within a few percent.
    EXPECT_LT(std::sqrt(diff), 0.05 * std::sqrt(norm)) << name;
    EXPECT_EQ(bf16_threads.grads.at(name), g16) << name;
  }
}

TEST(GptModelTest, SameResultsForAnyThreadCount) {
  GptConfig cfg = TinyConfig();
  cfg.d_model = 128;  // Wide enough that the loops split.
  cfg.vocab = 300;
  auto model = *GptModel::Create(cfg, 9);
  const std::vector<int32_t> tokens = RandomTokens(12, cfg.vocab, 1);
  std::vector<std::vector<float>> first;
  for (int threads : {1, 3, 0}) {
    SetParallelThreadsForTesting(threads);
    LocalHooks hooks;
    const float loss = *model->Forward(hooks, 2, 6, tokens, tokens);
    ASSERT_TRUE(model->Backward(hooks).ok());
    std::vector<std::vector<float>> run = {{loss}};
    for (Parameter* p : model->Parameters())
      run.push_back(*p->grad().ToFloats());
    if (first.empty()) {
      first = run;
    } else {
      EXPECT_EQ(run, first) << threads << " threads";
    }
  }
  SetParallelThreadsForTesting(0);
}

TEST(GptModelTest, InitFollowsGpt2) {
  GptConfig cfg = TinyConfig();
  cfg.d_model = 64;
  cfg.vocab = 500;
  auto model = *GptModel::Create(cfg, 11);
  auto again = *GptModel::Create(cfg, 11);
  auto std_of = [&](const char* name) {
    std::vector<float> v = *model->FindParameter(name)->data().ToFloats();
    double sq = 0;
    for (float x : v) sq += x * x;
    return std::sqrt(sq / v.size());
  };
  EXPECT_NEAR(std_of("wte.weight"), 0.02, 0.001);
  EXPECT_NEAR(std_of("h.0.mlp.c_fc.weight"), 0.02, 0.001);
  EXPECT_NEAR(std_of("h.1.mlp.c_proj.weight"), 0.02 / std::sqrt(4.0), 0.001);
  EXPECT_NEAR(std_of("h.1.attn.c_proj.weight"), 0.01, 0.001);
  EXPECT_EQ(std_of("h.0.attn.c_attn.bias"), 0.0);
  EXPECT_THAT(*model->FindParameter("ln_f.weight")->data().ToFloats(),
              ::testing::Each(1.0f));
  std::vector<std::string> names;
  for (Parameter* p : model->Parameters()) {
    names.push_back(p->name());
    EXPECT_EQ(*p->data().ToFloats(),
              *again->FindParameter(p->name())->data().ToFloats());
  }
  ASSERT_EQ(names.size(), 2u + 12 * 2 + 2);
  EXPECT_EQ(names[2], "h.0.ln_1.weight");
  EXPECT_EQ(names[13], "h.0.mlp.c_proj.bias");
  EXPECT_EQ(names.back(), "ln_f.bias");
  int64_t count = 0;
  for (Parameter* p : model->Parameters()) count += p->numel();
  EXPECT_EQ(GptParameterCount(cfg), count);
}

TEST(GptModelTest, DeferredParametersAreMadeAsTheEagerOnes) {
  GptConfig cfg = TinyConfig();
  cfg.vocab = 37;  // Odd counts leave a spare normal between parameters.
  auto eager = *GptModel::Create(cfg, 5);
  auto deferred = *GptModel::Create(cfg, 5, DType::kF32, Device::Cpu(),
                                    ParameterTiming::kDeferred);
  std::vector<Parameter*> params = deferred->Parameters();
  ASSERT_EQ(params.size(), eager->Parameters().size());
  for (Parameter* p : params) {
    EXPECT_TRUE(p->is_deferred()) << p->name();
    EXPECT_FALSE(p->data().is_materialized()) << p->name();
    EXPECT_EQ(p->shape(), eager->FindParameter(p->name())->shape());
  }
  // In any order (ZeroDdp registers in first-use order): the same bits.
  std::reverse(params.begin(), params.end());
  for (Parameter* p : params) {
    ASSERT_TRUE(p->Materialize().ok()) << p->name();
    EXPECT_FALSE(p->is_deferred());
    EXPECT_EQ(*p->data().ToFloats(),
              *eager->FindParameter(p->name())->data().ToFloats())
        << p->name();
  }
}

TEST(GptModelTest, FlopsFormula) {
  GptConfig cfg;  // GPT-2 small: 124,439,808 parameters.
  EXPECT_EQ(GptParameterCount(cfg), 124439808);
  EXPECT_DOUBLE_EQ(GptModelFlopsPerStep(cfg, 1000),
                   (6.0 * 124439808 + 12.0 * 12 * 1024 * 768) * 1000);
}

// The model computes on the CPU or a GPU; the simulated device only holds
// parameters for a CPU model.
TEST(GptModelTest, CreateRefusesADeviceThatCannotCompute) {
  const absl::StatusOr<std::unique_ptr<GptModel>> sim =
      GptModel::Create(TinyConfig(), 1, DType::kF32, Device::Simulated(0));
  EXPECT_EQ(sim.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sim.status().message(),
            "GptModel computes on the cpu or a GPU (cuda:N), not sim:0");
  auto cpu = *GptModel::Create(TinyConfig(), 1);
  EXPECT_EQ(cpu->compute_device(), Device::Cpu());
  // The fused attention runs on GPUs only.
  EXPECT_TRUE(cpu->set_fused_attention(false).ok());
  const absl::Status fused = cpu->set_fused_attention(true);
  EXPECT_EQ(fused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(fused.message(),
            "the fused attention runs on GPUs; the CPU attention is batched");
  EXPECT_FALSE(cpu->fused_attention());
}

TEST(GptConfigTest, ValidateNamesTheField) {
  struct Case {
    const char* field;
    GptConfig config;
  };
  std::vector<Case> cases;
  auto add = [&](const char* field, auto mutate) {
    GptConfig c = TinyConfig();
    mutate(c);
    cases.push_back({field, c});
  };
  add("layers", [](GptConfig& c) { c.layers = 0; });
  add("d_model", [](GptConfig& c) { c.d_model = -8; });
  add("heads", [](GptConfig& c) { c.heads = 0; });
  add("seq_len", [](GptConfig& c) { c.seq_len = 0; });
  add("vocab", [](GptConfig& c) { c.vocab = 0; });
  add("d_model (8) must be a multiple of GptConfig.heads (3)",
      [](GptConfig& c) { c.heads = 3; });
  for (const Case& c : cases) {
    SCOPED_TRACE(c.field);
    const absl::Status status = c.config.Validate();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(),
                HasSubstr(absl::StrCat("GptConfig.", c.field)));
    EXPECT_EQ(GptModel::Create(c.config, 1).status(), status);
  }
  EXPECT_TRUE(TinyConfig().Validate().ok());
}

// TinyConfig (L 2, C 8, NH 2, P 6, V 11): the grad buffer holds the largest
// group's grads, c_fc's weight and bias, 8*32 + 32 = 288 floats (1152 B;
// the embedding's wte and wpe are (11 + 6) * 8 = 136). For batch B x seq T
// (N = B T, A = B NH T^2) the activations are 4 N int32 bytes twice, 8 N
// for the f64 row losses, and floats: per block 16 N C + 4 N + A, plus N C
// (embedding), N C + 2 N (ln_f) and N V (probabilities); Backward's scratch
// 2 N C, and per thread (at most B NH of them) the attention's T x T + 3 T
// C / NH (its datty and dqkv go over atty and qkv on the CPU).
int64_t TinyBufferBytes(int B, int T, int threads) {
  const int64_t L = 2, C = 8, NH = 2, V = 11, N = B * T, A = B * NH * T * T;
  const int64_t floats =
      L * (16 * N * C + 4 * N + A) + N * C + N * C + 2 * N + N * V + 2 * N * C +
      std::min<int64_t>(threads, B * NH) * (T * T + 3 * T * C / NH);
  return 4 * N * 2 + 8 * N + 4 * floats;
}

TEST(GptModelTest, WorkspaceIsReportedAndCappedByTheDeviceLimit) {
  const ScopedParallelThreads one(1);  // One T x T attention block.
  const Device sim = Device::Simulated(0);
  MemoryTracker tracker, other;  // Outlive the model, which reports to them.
  auto model = *GptModel::Create(TinyConfig(), 3);
  auto unaccounted = *GptModel::Create(TinyConfig(), 3);
  EXPECT_EQ(TinyBufferBytes(2, 3, 1), 7980);
  EXPECT_EQ(TinyBufferBytes(2, 3, 3), 8340);
  EXPECT_EQ(model->workspace_bytes(), 1152);
  ASSERT_TRUE(model->set_memory_accounting(&tracker, sim).ok());
  EXPECT_EQ(tracker.Current(sim, MemoryCategory::kActivation), 1152);
  const std::vector<int32_t> tokens = RandomTokens(6, 11, 2);
  LocalHooks hooks;
  absl::StatusOr<float> loss = model->Forward(hooks, 2, 3, tokens, tokens);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_EQ(model->workspace_bytes(), 1152 + 7980);
  EXPECT_EQ(tracker.Current(sim, MemoryCategory::kActivation), 1152 + 7980);
  ASSERT_TRUE(model->Backward(hooks).ok());
  ASSERT_TRUE(hooks.EndStep().ok());
  // Accounting never changes the arithmetic.
  LocalHooks plain;
  EXPECT_EQ(*unaccounted->Forward(plain, 2, 3, tokens, tokens), *loss);
  // A smaller shape holds exactly its own buffers.
  ASSERT_TRUE(model->Forward(hooks, 1, 3, {1, 2, 3}, {2, 3, 4}).ok());
  EXPECT_EQ(TinyBufferBytes(1, 3, 1), 4080);
  EXPECT_EQ(tracker.Current(sim, MemoryCategory::kActivation), 1152 + 4080);
  ASSERT_TRUE(model->Backward(hooks).ok());
  ASSERT_TRUE(hooks.EndStep().ok());
  // More threads: a T x T block for each (made at the next shape).
  {
    SetParallelThreadsForTesting(3);  // Whatever the cores here.
    const ScopedParallelThreads three(3);
    ASSERT_TRUE(model->Forward(hooks, 2, 3, tokens, tokens).ok());
    EXPECT_EQ(model->workspace_bytes(), 1152 + 8340);
    ASSERT_TRUE(model->Backward(hooks).ok());
    ASSERT_TRUE(hooks.EndStep().ok());
    SetParallelThreadsForTesting(0);
  }
  ASSERT_TRUE(model->Forward(hooks, 1, 3, {1, 2, 3}, {2, 3, 4}).ok());
  ASSERT_TRUE(model->Backward(hooks).ok());
  ASSERT_TRUE(hooks.EndStep().ok());

  // Past the limit: refused before the buffers are made, naming them.
  tracker.SetLimit(sim, 8000);
  absl::Status refused = model->Forward(hooks, 2, 3, tokens, tokens).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.message(),
            "sim:0: cannot hold 7.79 KiB more of activation: 1.12 KiB of its "
            "7.81 KiB device memory limit are held (activation 1.12 KiB); "
            "GptModel::Forward: activations for batch 2 x seq 3");
  EXPECT_EQ(tracker.Current(sim, MemoryCategory::kActivation), 1152);
  EXPECT_EQ(tracker.Peak(sim, MemoryCategory::kActivation), 1152 + 8340);
  EXPECT_EQ(model->Backward(hooks).code(),
            absl::StatusCode::kFailedPrecondition);
  tracker.ClearLimit(sim);
  ASSERT_TRUE(model->Forward(hooks, 2, 3, tokens, tokens).ok());
  EXPECT_EQ(tracker.Current(sim, MemoryCategory::kActivation), 1152 + 7980);
  ASSERT_TRUE(model->Backward(hooks).ok());
  ASSERT_TRUE(hooks.EndStep().ok());

  // Moving the accounting: refused where it does not fit, then moved whole.
  other.SetLimit(Device::Cpu(), 100);
  EXPECT_EQ(model->set_memory_accounting(&other, Device::Cpu()).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(tracker.Current(sim, MemoryCategory::kActivation), 1152 + 7980);
  other.ClearLimit(Device::Cpu());
  ASSERT_TRUE(model->set_memory_accounting(&other, Device::Cpu()).ok());
  EXPECT_EQ(tracker.Current(sim, MemoryCategory::kActivation), 0);
  EXPECT_EQ(other.Current(Device::Cpu(), MemoryCategory::kActivation),
            1152 + 7980);
  model.reset();
  EXPECT_EQ(other.Current(Device::Cpu(), MemoryCategory::kActivation), 0);
}

// 16-bit parameters are widened to f32 for the kernels, a group (a weight
// matrix and its bias, or wte and wpe) at a time; that buffer is part of
// the workspace too. With bf16 products a bf16 weight matrix is read as
// its bits: only its bias, the LayerNorms and the embedding are widened.
TEST(GptModelTest, WidenedWeightsAreReported) {
  const ScopedParallelThreads one(1);
  const Device sim = Device::Simulated(0);
  const std::vector<int32_t> tokens = RandomTokens(6, 11, 2);
  struct Case {
    DType dtype;
    gemm::Precision products;
    int64_t widened_floats;
  } cases[] = {
      {DType::kF32, gemm::Precision::kF32, 0},
      // c_fc's 8 x 32 weight and 32 biases.
      {DType::kF16, gemm::Precision::kF32, 288},
      {DType::kBF16, gemm::Precision::kF32, 288},
      // wte and wpe, (11 + 6) x 8, the largest group not read as bits.
      {DType::kBF16, gemm::Precision::kBf16, 136},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(DTypeName(c.dtype));
    MemoryTracker tracker;  // Outlives the model, which reports to it.
    auto model = *GptModel::Create(TinyConfig(), 3, c.dtype);
    model->set_matmul_precision(c.products);
    ASSERT_TRUE(model->set_memory_accounting(&tracker, sim).ok());
    LocalHooks hooks;
    ASSERT_TRUE(model->Forward(hooks, 2, 3, tokens, tokens).ok());
    ASSERT_TRUE(model->Backward(hooks).ok());
    ASSERT_TRUE(hooks.EndStep().ok());
    EXPECT_EQ(model->workspace_bytes(), 1152 + 7980 + 4 * c.widened_floats);
    EXPECT_EQ(tracker.Current(sim, MemoryCategory::kActivation),
              model->workspace_bytes());
  }
}

TEST(GptModelTest, BadInputsAreErrors) {
  auto model = *GptModel::Create(TinyConfig(), 1);
  LocalHooks hooks;
  EXPECT_EQ(model->Backward(hooks).code(),
            absl::StatusCode::kFailedPrecondition);
  absl::Status s = model->Forward(hooks, 1, 2, {0, 11}, {0, 0}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("token 11 at [0, 1]"));
  s = model->Forward(hooks, 1, 2, {0, 1}, {-1, 0}).status();
  EXPECT_THAT(s.message(), HasSubstr("target -1 at [0, 0]"));
  EXPECT_EQ(model
                ->Forward(hooks, 1, 7, std::vector<int32_t>(7),
                          std::vector<int32_t>(7))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model->Forward(hooks, 2, 2, {0, 1}, {0, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(hooks.EndStep().ok());

  // A mis-shaped or missing state dict entry changes nothing.
  Values values = RandomValues(*model, 1);
  std::map<std::string, Tensor> state = ToState(*model, values);
  state["h.1.ln_2.bias"] = *Tensor::Zeros({9}, DType::kF32);
  s = model->LoadStateDict(state);
  EXPECT_THAT(s.message(), HasSubstr("h.1.ln_2.bias"));
  state.erase("h.1.ln_2.bias");
  EXPECT_THAT(model->LoadStateDict(state).message(),
              HasSubstr("h.1.ln_2.bias"));
  state = ToState(*model, values);
  state["lm_head.weight"] = state["wte.weight"];
  EXPECT_THAT(model->LoadStateDict(state).message(),
              HasSubstr("lm_head.weight"));
}

}  // namespace
}  // namespace chunkzero
