// The fast transcendental paths of cpu_kernels, the attention backward
// against a double-precision reference and the buffers the backward
// shares; the layers themselves are checked end to end against finite
// differences in gpt_model_test.
#include "kernels/cpu_kernels.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace chunkzero {
namespace cpu_kernels {
namespace {

TEST(GptKernelsTest, ExpApproxWithinThreeUlp) {
  double worst = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.0137f) {
    const double exact = std::exp(static_cast<double>(x));
    const double ulp = std::ldexp(1.0, std::ilogb(exact) - 23);
    worst = std::max(worst, std::abs(ExpApprox(x) - exact) / ulp);
  }
  EXPECT_LE(worst, 3.0);
  EXPECT_EQ(ExpApprox(0.0f), 1.0f);
  // Clamped ends: tiny and huge but finite, never NaN.
  EXPECT_GT(ExpApprox(-1000.0f), 0.0f);
  EXPECT_LT(ExpApprox(-1000.0f), 1e-37f);
  EXPECT_TRUE(std::isfinite(ExpApprox(1000.0f)));
  EXPECT_GT(ExpApprox(1000.0f), 1e38f);
  // A diverged run feeds it NaN and infinities: defined results (UBSAN
  // checks the arithmetic), NaN for NaN of either sign.
  EXPECT_TRUE(std::isnan(ExpApprox(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(ExpApprox(-std::numeric_limits<float>::quiet_NaN())));
  EXPECT_GT(ExpApprox(std::numeric_limits<float>::infinity()), 1e38f);
  EXPECT_LT(ExpApprox(-std::numeric_limits<float>::infinity()), 1e-37f);
}

TEST(GptKernelsTest, GeluMatchesTanhFormula) {
  std::vector<float> x, y(2001), dx(2001), ones(2001, 1.0f);
  for (int i = -1000; i <= 1000; ++i) x.push_back(i * 0.012f);
  GeluForward(y.data(), x.data(), x.size());
  GeluBackward(dx.data(), x.data(), ones.data(), x.size());
  const double k = std::sqrt(2.0 / M_PI);
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double t = std::tanh(k * (v + 0.044715 * v * v * v));
    const double dt = (1 - t * t) * k * (1 + 3 * 0.044715 * v * v);
    // tanh via 1 - 2 / (e^2u + 1) is accurate to ~1e-7 absolute.
    EXPECT_NEAR(y[i], 0.5 * v * (1 + t), 1e-6 * (1 + std::abs(v))) << v;
    EXPECT_NEAR(dx[i], 0.5 * (1 + t) + 0.5 * v * dt, 1e-6 * (1 + std::abs(v)))
        << v;
  }
}

std::vector<float> Wave(size_t n, float a, float b) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = b * std::sin(a * static_cast<float>(i));
  return v;
}

// The attention's grads from its definition, in double: per (b, h),
// S = Q K^T / sqrt(hd) causal, P = softmax(S), Y = P V.
std::vector<double> ReferenceAttentionGrads(const std::vector<float>& qkv,
                                            const std::vector<float>& dout,
                                            int B, int T, int C, int NH) {
  const int hd = C / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<double> dqkv(qkv.size(), 0.0);
  auto at = [&](int b, int t, int part, int h, int d) {
    return (static_cast<size_t>(b) * T + t) * 3 * C + part * C + h * hd + d;
  };
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      std::vector<double> p(static_cast<size_t>(T) * T, 0.0), dp(p.size(), 0.0);
      for (int t = 0; t < T; ++t) {
        double m = -1e300;
        for (int s = 0; s <= t; ++s) {
          double dot = 0;
          for (int d = 0; d < hd; ++d)
            dot += qkv[at(b, t, 0, h, d)] * double{qkv[at(b, s, 1, h, d)]};
          p[t * T + s] = dot * scale;
          m = std::max(m, p[t * T + s]);
        }
        double sum = 0;
        for (int s = 0; s <= t; ++s)
          sum += p[t * T + s] = std::exp(p[t * T + s] - m);
        for (int s = 0; s <= t; ++s) p[t * T + s] /= sum;
      }
      for (int t = 0; t < T; ++t) {
        for (int s = 0; s <= t; ++s) {
          for (int d = 0; d < hd; ++d) {
            const double dy =
                dout[(static_cast<size_t>(b) * T + t) * C + h * hd + d];
            dp[t * T + s] += dy * qkv[at(b, s, 2, h, d)];
            dqkv[at(b, s, 2, h, d)] += p[t * T + s] * dy;
          }
        }
        double dot = 0;
        for (int s = 0; s <= t; ++s) dot += p[t * T + s] * dp[t * T + s];
        for (int s = 0; s <= t; ++s) {
          const double ds = p[t * T + s] * (dp[t * T + s] - dot) * scale;
          for (int d = 0; d < hd; ++d) {
            dqkv[at(b, t, 0, h, d)] += ds * qkv[at(b, s, 1, h, d)];
            dqkv[at(b, s, 1, h, d)] += ds * qkv[at(b, t, 0, h, d)];
          }
        }
      }
    }
  }
  return dqkv;
}

// The backward keeps one T x T block per head it computes at once and
// writes the scores' grads over the probabilities; the grads match the
// definition, and every split of the heads gives the same bits.
TEST(GptKernelsTest, AttentionBackwardMatchesTheDefinitionForEverySplit) {
  constexpr int B = 2, T = 23, C = 24, NH = 3, N = B * T;
  const std::vector<float> qkv = Wave(N * 3 * C, 0.731f, 0.9f);
  const std::vector<float> dout = Wave(N * C, 0.377f, 1.3f);
  std::vector<float> out(N * C), att(size_t{1} * B * NH * T * T);
  AttentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  const std::vector<double> want =
      ReferenceAttentionGrads(qkv, dout, B, T, C, NH);
  std::vector<float> first_dqkv, first_ds;
  for (int heads : {1, 2, 4, B * NH, 100}) {
    SCOPED_TRACE(heads);
    std::vector<float> p = att, dqkv(N * 3 * C, -7.0f);
    std::vector<float> datt(static_cast<size_t>(std::min(heads, B * NH)) *
                            AttentionBackwardScratchPerHead(T, C, NH));
    AttentionBackward(dqkv.data(), datt.data(), heads, dout.data(), qkv.data(),
                      p.data(), B, T, C, NH);
    for (size_t i = 0; i < dqkv.size(); ++i) {
      ASSERT_NEAR(dqkv[i], want[i], 2e-5 * (1 + std::abs(want[i]))) << i;
    }
    // Above the diagonal the scores' grads are zero; below they replaced P.
    EXPECT_EQ(p[1], 0.0f);
    EXPECT_NE(p[T], att[T]);
    // In place: the grads over qkv itself, the same bits.
    std::vector<float> p2 = att, in_place = qkv;
    AttentionBackward(in_place.data(), datt.data(), heads, dout.data(),
                      in_place.data(), p2.data(), B, T, C, NH);
    EXPECT_EQ(in_place, dqkv);
    if (first_dqkv.empty()) {
      first_dqkv = dqkv;
      first_ds = p;
    } else {
      EXPECT_EQ(dqkv, first_dqkv);
      EXPECT_EQ(p, first_ds);
    }
  }
}

// dx may be x itself (the model writes d(gelu output) over the gelu
// output): the same bits as into a separate buffer.
TEST(GptKernelsTest, MatmulBackwardIntoItsInput) {
  constexpr int N = 37, IC = 48, OC = 20;
  const std::vector<float> x = Wave(N * IC, 0.31f, 1.0f);
  const std::vector<float> w = Wave(IC * OC, 0.17f, 0.5f);
  const std::vector<float> dout = Wave(N * OC, 0.23f, 2.0f);
  for (gemm::Precision precision :
       {gemm::Precision::kF32, gemm::Precision::kBf16}) {
    std::vector<float> dx(N * IC), dw(IC * OC), db(OC);
    MatmulBackward(dx.data(), dw.data(), db.data(), dout.data(), x.data(),
                   w.data(), N, IC, OC, precision);
    std::vector<float> in_place = x, dw2(IC * OC), db2(OC);
    MatmulBackward(in_place.data(), dw2.data(), db2.data(), dout.data(),
                   in_place.data(), w.data(), N, IC, OC, precision);
    EXPECT_EQ(in_place, dx);
    EXPECT_EQ(dw2, dw);
    EXPECT_EQ(db2, db);
  }
}

// Ranks as threads call the matmuls all at once; any number of threads get
// the single-threaded result. (OpenBLAS 0.3.21, used before oneDNN,
// segfaulted when 300 threads started 256-wide sgemms together.)
TEST(GptKernelsTest, MatmulFromManyThreadsAtOnce) {
  constexpr int kThreads = 300, N = 256, IC = 256, OC = 256;
  std::vector<float> x(N * IC), w(IC * OC), bias(OC);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * i);
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::cos(0.11f * i);
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = 0.01f * i;
  std::vector<float> want(N * OC);
  MatmulForward(want.data(), x.data(), w.data(), bias.data(), N, IC, OC);
  std::vector<std::vector<float>> got(kThreads, std::vector<float>(N * OC));
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      for (int repeat = 0; repeat < 8; ++repeat) {
        MatmulForward(got[t].data(), x.data(), w.data(), bias.data(), N, IC,
                      OC);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) ASSERT_EQ(got[t], want) << "thread " << t;
}

}  // namespace
}  // namespace cpu_kernels
}  // namespace chunkzero
