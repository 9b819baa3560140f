#include "models/llama/llama_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/parallel_for.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/common/recording_hooks.h"
#include "tensor/memory/memory_tracker.h"

namespace chunkzero {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Params = std::map<std::string, std::vector<double>>;

LlamaConfig Tiny() {
  LlamaConfig c;
  c.layers = 2;
  c.d_model = 16;
  c.heads = 4;
  c.kv_heads = 2;
  c.ffn = 24;
  c.vocab = 32;
  c.seq_len = 8;
  c.rope_theta = 500000;
  c.rms_norm_eps = 1e-5;
  return c;
}

std::vector<int32_t> Tokens(int n, int vocab, int offset) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (7 * i + offset) % vocab;
  return t;
}

// Hugging Face's LlamaForCausalLM, written out in double: the reference the
// model's f32 loss and grads are checked against.
double ReferenceLoss(const LlamaConfig& c, const Params& w, int B, int T,
                     const std::vector<int32_t>& tokens,
                     const std::vector<int32_t>& targets) {
  const int C = c.d_model, F = c.ffn, V = c.vocab, NH = c.heads,
            KV = c.kv_heads, hd = c.resolved_head_dim(), N = B * T;
  const int ch = NH * hd, ckv = KV * hd;
  auto at = [&](const std::string& name) -> const std::vector<double>& {
    return w.at(name);
  };
  // y[N, out] = x[N, in] W[out, in]^T.
  auto linear = [&](const std::vector<double>& x, const std::vector<double>& m,
                    int in, int out) {
    std::vector<double> y(static_cast<size_t>(N) * out);
    for (int n = 0; n < N; ++n) {
      for (int o = 0; o < out; ++o) {
        double s = 0;
        for (int i = 0; i < in; ++i) s += x[n * in + i] * m[o * in + i];
        y[n * out + o] = s;
      }
    }
    return y;
  };
  auto rms = [&](const std::vector<double>& x, const std::vector<double>& g) {
    std::vector<double> y(x.size());
    for (int n = 0; n < N; ++n) {
      double ms = 0;
      for (int i = 0; i < C; ++i) ms += x[n * C + i] * x[n * C + i];
      const double r = 1 / std::sqrt(ms / C + c.rms_norm_eps);
      for (int i = 0; i < C; ++i) y[n * C + i] = g[i] * x[n * C + i] * r;
    }
    return y;
  };
  auto rope = [&](std::vector<double>& x, int heads) {
    for (int n = 0; n < N; ++n) {
      const int t = n % T;
      for (int h = 0; h < heads; ++h) {
        double* v = &x[(static_cast<size_t>(n) * heads + h) * hd];
        for (int i = 0; i < hd / 2; ++i) {
          const double angle = t / std::pow(c.rope_theta, 2.0 * i / hd);
          const double a = v[i], b = v[i + hd / 2];
          v[i] = a * std::cos(angle) - b * std::sin(angle);
          v[i + hd / 2] = b * std::cos(angle) + a * std::sin(angle);
        }
      }
    }
  };
  std::vector<double> h(static_cast<size_t>(N) * C);
  const std::vector<double>& embed = at("model.embed_tokens.weight");
  for (int n = 0; n < N; ++n) {
    for (int i = 0; i < C; ++i) h[n * C + i] = embed[tokens[n] * C + i];
  }
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    const std::vector<double> xn = rms(h, at(p + "input_layernorm.weight"));
    std::vector<double> q =
        linear(xn, at(p + "self_attn.q_proj.weight"), C, ch);
    std::vector<double> k =
        linear(xn, at(p + "self_attn.k_proj.weight"), C, ckv);
    const std::vector<double> v =
        linear(xn, at(p + "self_attn.v_proj.weight"), C, ckv);
    rope(q, NH);
    rope(k, KV);
    std::vector<double> y(static_cast<size_t>(N) * ch);
    for (int b = 0; b < B; ++b) {
      for (int head = 0; head < NH; ++head) {
        const int kvh = head / (NH / KV);
        for (int t = 0; t < T; ++t) {
          std::vector<double> s(t + 1);
          double mx = -1e300;
          for (int u = 0; u <= t; ++u) {
            double dot = 0;
            for (int i = 0; i < hd; ++i) {
              dot += q[((b * T + t) * NH + head) * hd + i] *
                     k[((b * T + u) * KV + kvh) * hd + i];
            }
            s[u] = dot / std::sqrt(static_cast<double>(hd));
            mx = std::max(mx, s[u]);
          }
          double z = 0;
          for (double& e : s) z += (e = std::exp(e - mx));
          for (int i = 0; i < hd; ++i) {
            double acc = 0;
            for (int u = 0; u <= t; ++u) {
              acc += s[u] / z * v[((b * T + u) * KV + kvh) * hd + i];
            }
            y[((b * T + t) * NH + head) * hd + i] = acc;
          }
        }
      }
    }
    const std::vector<double> o =
        linear(y, at(p + "self_attn.o_proj.weight"), ch, C);
    for (size_t i = 0; i < h.size(); ++i) h[i] += o[i];
    const std::vector<double> xn2 =
        rms(h, at(p + "post_attention_layernorm.weight"));
    const std::vector<double> g =
        linear(xn2, at(p + "mlp.gate_proj.weight"), C, F);
    const std::vector<double> u =
        linear(xn2, at(p + "mlp.up_proj.weight"), C, F);
    std::vector<double> m(g.size());
    for (size_t i = 0; i < m.size(); ++i) {
      m[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
    }
    const std::vector<double> d =
        linear(m, at(p + "mlp.down_proj.weight"), F, C);
    for (size_t i = 0; i < h.size(); ++i) h[i] += d[i];
  }
  const std::vector<double> xf = rms(h, at("model.norm.weight"));
  const std::vector<double> logits =
      linear(xf,
             at(c.tie_word_embeddings ? "model.embed_tokens.weight"
                                      : "lm_head.weight"),
             C, V);
  double loss = 0;
  for (int n = 0; n < N; ++n) {
    double mx = -1e300;
    for (int i = 0; i < V; ++i) mx = std::max(mx, logits[n * V + i]);
    double z = 0;
    for (int i = 0; i < V; ++i) z += std::exp(logits[n * V + i] - mx);
    loss += std::log(z) + mx - logits[n * V + targets[n]];
  }
  return loss / N;
}

Params Weights(LlamaModel& model) {
  Params out;
  for (Parameter* p : model.Parameters()) {
    std::vector<float> v = *p->data().ToFloats();
    out[p->name()] = std::vector<double>(v.begin(), v.end());
  }
  return out;
}

// Every grad handed for `name`, added up (a tied embedding has two).
std::vector<float> GradOf(const RecordingHooks& hooks,
                          const std::string& name) {
  std::vector<float> sum;
  for (const std::vector<float>& g : hooks.grads.at(name)) {
    if (sum.empty()) sum.assign(g.size(), 0);
    for (size_t i = 0; i < g.size(); ++i) sum[i] += g[i];
  }
  return sum;
}

void ExpectMatchesReference(const LlamaConfig& config) {
  const int B = 2, T = 6;
  auto model = *LlamaModel::Create(config, 5);
  const std::vector<int32_t> tokens = Tokens(B * T, config.vocab, 1),
                             targets = Tokens(B * T, config.vocab, 4);
  RecordingHooks hooks;
  const absl::StatusOr<float> loss =
      model->Forward(hooks, B, T, tokens, targets);
  ASSERT_TRUE(loss.ok()) << loss.status();
  ASSERT_TRUE(model->Backward(hooks).ok());
  ASSERT_TRUE(hooks.EndStep().ok());
  Params w = Weights(*model);
  const double expect = ReferenceLoss(config, w, B, T, tokens, targets);
  EXPECT_NEAR(*loss, expect, 1e-6 * expect);
  // Central differences of the double loss at a few entries of every
  // parameter.
  for (auto& [name, values] : w) {
    const std::vector<float> grad = GradOf(hooks, name);
    ASSERT_EQ(grad.size(), values.size()) << name;
    for (size_t i = 0; i < values.size(); i += values.size() / 3 + 1) {
      const double h = 1e-5, kept = values[i];
      values[i] = kept + h;
      const double up = ReferenceLoss(config, w, B, T, tokens, targets);
      values[i] = kept - h;
      const double down = ReferenceLoss(config, w, B, T, tokens, targets);
      values[i] = kept;
      const double fd = (up - down) / (2 * h);
      EXPECT_NEAR(grad[i], fd, 2e-6 + 1e-3 * std::abs(fd))
          << name << "[" << i << "]";
    }
  }
}

TEST(LlamaModel, LossAndGradsMatchDoublePrecisionWithGroupedQueries) {
  ExpectMatchesReference(Tiny());
}

TEST(LlamaModel, TiedEmbeddingAndAHeadDimOfItsOwn) {
  LlamaConfig c = Tiny();
  c.tie_word_embeddings = true;
  c.head_dim = 6;  // Ch = 24 != C.
  c.kv_heads = 1;
  ExpectMatchesReference(c);
}

TEST(LlamaModel, ParametersAreHuggingFacesInDeclarationOrder) {
  LlamaConfig c = Tiny();
  c.layers = 1;
  auto model = *LlamaModel::Create(c, 1);
  std::vector<std::string> names;
  for (Parameter* p : model->Parameters()) names.push_back(p->name());
  EXPECT_THAT(names,
              ElementsAre("model.embed_tokens.weight",
                          "model.layers.0.self_attn.q_proj.weight",
                          "model.layers.0.self_attn.k_proj.weight",
                          "model.layers.0.self_attn.v_proj.weight",
                          "model.layers.0.self_attn.o_proj.weight",
                          "model.layers.0.mlp.gate_proj.weight",
                          "model.layers.0.mlp.up_proj.weight",
                          "model.layers.0.mlp.down_proj.weight",
                          "model.layers.0.input_layernorm.weight",
                          "model.layers.0.post_attention_layernorm.weight",
                          "model.norm.weight", "lm_head.weight"));
  EXPECT_EQ(
      model->FindParameter("model.layers.0.self_attn.k_proj.weight")->shape(),
      (Shape{8, 16}));
  // 32*16 + (16*16 + 2*8*16 + 16*16 + 3*24*16 + 2*16 = 1952) + 16 + 32*16.
  EXPECT_EQ(LlamaParameterCount(c), 512 + 1952 + 16 + 512);
  c.tie_word_embeddings = true;
  EXPECT_EQ(LlamaParameterCount(c), 512 + 1952 + 16);
  // N(0, 0.02) weights, norms 1.
  EXPECT_THAT(*model->FindParameter("model.norm.weight")->data().ToFloats(),
              ::testing::Each(1.0f));
}

TEST(LlamaModel, DeferredParametersAreMadeAsTheEagerOnes) {
  LlamaConfig c = Tiny();
  c.vocab = 33;
  auto eager = *LlamaModel::Create(c, 8);
  auto deferred = *LlamaModel::Create(c, 8, DType::kF32, Device::Cpu(),
                                      ParameterTiming::kDeferred);
  std::vector<Parameter*> params = deferred->Parameters();
  std::reverse(params.begin(), params.end());
  for (Parameter* p : params) {
    ASSERT_TRUE(p->is_deferred()) << p->name();
    ASSERT_TRUE(p->Materialize().ok()) << p->name();
    EXPECT_EQ(*p->data().ToFloats(),
              *eager->FindParameter(p->name())->data().ToFloats())
        << p->name();
  }
  // A state dict replaces what a deferred parameter would make, and the
  // parameter stays deferred: made from the dict's tensor when registered.
  auto loaded = *LlamaModel::Create(c, 9, DType::kF32, Device::Cpu(),
                                    ParameterTiming::kDeferred);
  std::map<std::string, Tensor> state;
  for (Parameter* p : eager->Parameters()) state[p->name()] = p->data();
  ASSERT_TRUE(loaded->LoadStateDict(state).ok());
  for (Parameter* p : loaded->Parameters()) {
    EXPECT_TRUE(p->is_deferred());
    ASSERT_TRUE(p->Materialize().ok());
    EXPECT_EQ(*p->data().ToFloats(), *state.at(p->name()).ToFloats());
  }
}

TEST(LlamaModel, HookScopesInOrder) {
  LlamaConfig c = Tiny();
  c.layers = 1;
  c.tie_word_embeddings = true;
  auto model = *LlamaModel::Create(c, 1);
  RecordingHooks hooks;
  ASSERT_TRUE(
      model->Forward(hooks, 1, 4, Tokens(4, 32, 0), Tokens(4, 32, 1)).ok());
  ASSERT_TRUE(model->Backward(hooks).ok());
  ASSERT_TRUE(hooks.EndStep().ok());
  const std::string l = "model.layers.0.";
  const std::string attn =
      l + "self_attn.q_proj.weight," + l + "self_attn.k_proj.weight," + l +
      "self_attn.v_proj.weight," + l + "self_attn.o_proj.weight";
  const std::string mlp = l + "mlp.gate_proj.weight," + l +
                          "mlp.up_proj.weight," + l + "mlp.down_proj.weight";
  const std::string in = l + "input_layernorm.weight";
  const std::string post = l + "post_attention_layernorm.weight";
  const std::string e = "model.embed_tokens.weight";
  EXPECT_THAT(
      hooks.calls,
      ElementsAre(
          "PreForward " + e, "PostForward " + e, "PreForward " + in,
          "PostForward " + in, "PreForward " + attn, "PostForward " + attn,
          "PreForward " + post, "PostForward " + post, "PreForward " + mlp,
          "PostForward " + mlp, "PreForward model.norm.weight",
          "PostForward model.norm.weight", "PreForward " + e,
          "PostForward " + e, "PreBackward " + e, "HandGrad " + e,
          "PostBackward " + e, "PreBackward model.norm.weight",
          "HandGrad model.norm.weight", "PostBackward model.norm.weight",
          "PreBackward " + mlp, "HandGrad " + l + "mlp.down_proj.weight",
          "HandGrad " + l + "mlp.gate_proj.weight",
          "HandGrad " + l + "mlp.up_proj.weight", "PostBackward " + mlp,
          "PreBackward " + post, "HandGrad " + post, "PostBackward " + post,
          "PreBackward " + attn, "HandGrad " + l + "self_attn.o_proj.weight",
          "HandGrad " + l + "self_attn.q_proj.weight",
          "HandGrad " + l + "self_attn.k_proj.weight",
          "HandGrad " + l + "self_attn.v_proj.weight", "PostBackward " + attn,
          "PreBackward " + in, "HandGrad " + in, "PostBackward " + in,
          "PreBackward " + e, "HandGrad " + e, "PostBackward " + e));
}

struct Steps {
  std::vector<float> losses;
  std::map<std::string, std::vector<std::vector<float>>> grads;
};

Steps TwoSteps(DType dtype, gemm::Precision precision,
               ActivationCheckpointing ac) {
  LlamaConfig c = Tiny();
  c.layers = 3;
  auto model = *LlamaModel::Create(c, 9, dtype);
  model->set_matmul_precision(precision);
  EXPECT_TRUE(model->SetActivationCheckpointing(ac).ok());
  Steps run;
  RecordingHooks hooks;
  for (auto [batch, seq] : {std::pair{2, 5}, std::pair{1, 8}}) {
    const int n = batch * seq;
    absl::StatusOr<float> loss = model->Forward(
        hooks, batch, seq, Tokens(n, 32, batch), Tokens(n, 32, batch + 3));
    EXPECT_TRUE(loss.ok()) << loss.status();
    run.losses.push_back(*loss);
    EXPECT_TRUE(model->Backward(hooks, 8.0f).ok());
  }
  run.grads = hooks.grads;
  return run;
}

TEST(LlamaModel, RecomputedLayersGiveTheSameBits) {
  for (auto [dtype, precision] :
       {std::pair{DType::kF32, gemm::Precision::kF32},
        std::pair{DType::kBF16, gemm::Precision::kBf16},
        std::pair{DType::kF16, gemm::Precision::kF32}}) {
    const Steps plain = TwoSteps(dtype, precision, {});
    for (int every : {1, 2}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " every ", every));
      const Steps again = TwoSteps(dtype, precision, {every});
      EXPECT_EQ(again.losses, plain.losses);
      EXPECT_EQ(again.grads, plain.grads);
    }
  }
}

TEST(LlamaModel, SameBitsForAnyThreadCount) {
  SetParallelThreadsForTesting(1);
  const Steps one = TwoSteps(DType::kF32, gemm::Precision::kF32, {});
  SetParallelThreadsForTesting(3);
  const Steps three = TwoSteps(DType::kF32, gemm::Precision::kF32, {});
  SetParallelThreadsForTesting(0);
  EXPECT_EQ(one.losses, three.losses);
  EXPECT_EQ(one.grads, three.grads);
}

TEST(LlamaModel, ActivationBytesSplitKeptAndRecomputed) {
  LlamaConfig c = Tiny();
  c.layers = 3;
  auto model = *LlamaModel::Create(c, 1);
  // Per slot, N = 8: xn1 rstd1 qkv att atty res2 xn2 rstd2 gate up gated.
  const int64_t N = 8, C = 16, F = 24, ch = 16;
  const int64_t slot = 4 * (N * C + N + 3 * N * ch + N * 4 * 8 + N * ch +
                            N * C + N * C + N + 3 * N * F);
  const int64_t rest =
      4 * (2 * N + 2 * 8 * 2 + N * C + 3 * N * C + N * C + N + N * 32) + 8 * N;
  LlamaModel::ActivationBytes plain = model->activation_bytes(1, 8);
  EXPECT_EQ(plain.kept, rest + 3 * slot);
  EXPECT_EQ(plain.recomputed, 0);
  ASSERT_TRUE(model->SetActivationCheckpointing({2}).ok());  // Layers 0, 2.
  LlamaModel::ActivationBytes two = model->activation_bytes(1, 8);
  EXPECT_EQ(two.kept, rest + slot);
  EXPECT_EQ(two.recompute_buffer, slot);
  EXPECT_EQ(two.recomputed, 2 * slot);
}

TEST(LlamaModel, RefusesBadInputsNamingThem) {
  LlamaConfig c = Tiny();
  c.kv_heads = 3;
  EXPECT_THAT(c.Validate().message(),
              HasSubstr("num_attention_heads (4) must be a multiple of "
                        "num_key_value_heads (3)"));
  c = Tiny();
  c.head_dim = 5;
  EXPECT_THAT(c.Validate().message(), HasSubstr("head_dim 5 must be even"));
  c = Tiny();
  c.rope_theta = 0;
  EXPECT_THAT(c.Validate().message(), HasSubstr("rope_theta"));
  c = Tiny();
  c.d_model = 18;
  EXPECT_THAT(c.Validate().message(), HasSubstr("hidden_size (18)"));
  c = Tiny();
  c.vocab = 0;
  EXPECT_THAT(c.Validate().message(), HasSubstr("vocab_size"));

  EXPECT_THAT(LlamaModel::Create(Tiny(), 1, DType::kF32, Device::Simulated(0))
                  .status()
                  .message(),
              HasSubstr("LlamaModel computes on the cpu or a GPU (cuda:N), "
                        "not sim:0"));

  auto model = *LlamaModel::Create(Tiny(), 1);
  RecordingHooks hooks;
  EXPECT_EQ(model->Backward(hooks).code(),
            absl::StatusCode::kFailedPrecondition);
  std::vector<int32_t> tokens = Tokens(6, 32, 0);
  tokens[4] = 32;
  absl::StatusOr<float> loss =
      model->Forward(hooks, 1, 6, tokens, Tokens(6, 32, 0));
  EXPECT_THAT(loss.status().message(),
              HasSubstr("token 32 at [0, 4] is outside the vocabulary"));
  loss = model->Forward(hooks, 1, 9, Tokens(9, 32, 0), Tokens(9, 32, 0));
  EXPECT_THAT(loss.status().message(), HasSubstr("seq must be in [1, 8]"));
  EXPECT_EQ(model->SetActivationCheckpointing({-1}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LlamaModel, ActivationsStayUnderTheDeviceLimit) {
  auto model = *LlamaModel::Create(Tiny(), 1);
  MemoryTracker tracker;
  tracker.SetLimit(Device::Cpu(), model->workspace_bytes() + 1000);
  ASSERT_TRUE(model->set_memory_accounting(&tracker, Device::Cpu()).ok());
  RecordingHooks hooks;
  absl::StatusOr<float> loss =
      model->Forward(hooks, 2, 8, Tokens(16, 32, 0), Tokens(16, 32, 1));
  EXPECT_EQ(loss.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(loss.status().message(), HasSubstr("batch 2 x seq 8"));
  tracker.ClearLimit(Device::Cpu());
  ASSERT_TRUE(
      model->Forward(hooks, 2, 8, Tokens(16, 32, 0), Tokens(16, 32, 1)).ok());
  EXPECT_EQ(tracker.Current(Device::Cpu(), MemoryCategory::kActivation),
            model->workspace_bytes());
  ASSERT_TRUE(model->set_memory_accounting(nullptr, Device::Cpu()).ok());
}

}  // namespace
}  // namespace chunkzero
