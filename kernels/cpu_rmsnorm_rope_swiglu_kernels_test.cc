#include "kernels/cpu_rmsnorm_rope_swiglu_kernels.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "base/parallel_for.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace cpu_kernels {
namespace {

std::vector<float> Random(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Row n of y = w x / sqrt(mean(x^2) + eps), in double.
double RmsNormLoss(const std::vector<double>& x, const std::vector<float>& w,
                   const std::vector<float>& g, int N, int C, double eps) {
  double loss = 0;
  for (int n = 0; n < N; ++n) {
    double ms = 0;
    for (int c = 0; c < C; ++c) ms += x[n * C + c] * x[n * C + c];
    const double r = 1 / std::sqrt(ms / C + eps);
    for (int c = 0; c < C; ++c) loss += g[n * C + c] * w[c] * x[n * C + c] * r;
  }
  return loss;
}

TEST(RmsNorm, ForwardAndBackwardMatchDoublePrecision) {
  const int N = 5, C = 37;  // Not a multiple of the lanes.
  const float eps = 1e-6f;
  std::vector<float> x = Random(N * C, 1, 2), w = Random(C, 2),
                     g = Random(N * C, 3);
  std::vector<float> out(N * C), rstd(N), dx(N * C, 0.25f), dw(C, 9);
  RmsNormForward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
  for (int n = 0; n < N; ++n) {
    double ms = 0;
    for (int c = 0; c < C; ++c) ms += double{x[n * C + c]} * x[n * C + c];
    const double r = 1 / std::sqrt(ms / C + eps);
    EXPECT_NEAR(rstd[n], r, 1e-6 * r);
    for (int c = 0; c < C; ++c) {
      EXPECT_NEAR(out[n * C + c], w[c] * x[n * C + c] * r, 1e-5);
    }
  }
  RmsNormBackward(dx.data(), dw.data(), g.data(), x.data(), w.data(),
                  rstd.data(), N, C);
  // dx: central differences of sum(g * y) in double; dx accumulates on 0.25.
  std::vector<double> xd(x.begin(), x.end());
  for (int i = 0; i < N * C; i += 7) {
    const double h = 1e-6;
    std::vector<double> plus = xd, minus = xd;
    plus[i] += h;
    minus[i] -= h;
    const double fd = (RmsNormLoss(plus, w, g, N, C, eps) -
                       RmsNormLoss(minus, w, g, N, C, eps)) /
                      (2 * h);
    EXPECT_NEAR(dx[i] - 0.25f, fd, 2e-5) << i;
  }
  for (int c = 0; c < C; ++c) {
    double expect = 0;
    for (int n = 0; n < N; ++n) {
      expect += double{g[n * C + c]} * x[n * C + c] * rstd[n];
    }
    EXPECT_NEAR(dw[c], expect, 1e-5) << c;
  }
}

TEST(Rope, TablesAreHuggingFacesAngles) {
  const int T = 6, hd = 8;
  std::vector<float> cos(T * hd / 2), sin(T * hd / 2);
  RopeTables(cos.data(), sin.data(), T, hd, 500000.0);
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < hd / 2; ++i) {
      const double angle = t / std::pow(500000.0, 2.0 * i / hd);
      EXPECT_NEAR(cos[t * hd / 2 + i], std::cos(angle), 1e-6);
      EXPECT_NEAR(sin[t * hd / 2 + i], std::sin(angle), 1e-6);
    }
  }
  EXPECT_EQ(cos[0], 1.0f);  // Position 0 is not rotated.
  EXPECT_EQ(sin[0], 0.0f);
}

TEST(Rope, RotatesHalvesAndBackwardIsTheTranspose) {
  const int B = 2, T = 3, N = B * T, heads = 2, hd = 4;
  std::vector<float> cos(T * hd / 2), sin(T * hd / 2);
  RopeTables(cos.data(), sin.data(), T, hd, 10000.0);
  const std::vector<float> x = Random(N * heads * hd, 4);
  std::vector<float> y = x;
  RopeForward(y.data(), cos.data(), sin.data(), N, T, heads, hd);
  // Row 4 is position 1; head 1, pair (0, 2).
  const int n = 4, t = 1, at = n * heads * hd + hd;
  EXPECT_FLOAT_EQ(y[at], x[at] * cos[t * 2] - x[at + 2] * sin[t * 2]);
  EXPECT_FLOAT_EQ(y[at + 2], x[at + 2] * cos[t * 2] + x[at] * sin[t * 2]);
  // <R x, d> = <x, R^T d>.
  const std::vector<float> d = Random(N * heads * hd, 5);
  std::vector<float> rd = d;
  RopeBackward(rd.data(), cos.data(), sin.data(), N, T, heads, hd);
  double lhs = 0, rhs = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    lhs += double{y[i]} * d[i];
    rhs += double{x[i]} * rd[i];
  }
  EXPECT_NEAR(lhs, rhs, 1e-5);
}

TEST(SwiGlu, ValuesAndGradsMatchDoublePrecision) {
  const size_t n = 41;
  const std::vector<float> gate = Random(n, 6, 6), up = Random(n, 7),
                           dh = Random(n, 8);
  std::vector<float> h(n), dgate(n), dup(n);
  SwiGluForward(h.data(), gate.data(), up.data(), n);
  SwiGluBackward(dgate.data(), dup.data(), dh.data(), gate.data(), up.data(),
                 n);
  for (size_t i = 0; i < n; ++i) {
    const double g = gate[i], sig = 1 / (1 + std::exp(-g));
    EXPECT_NEAR(h[i], g * sig * up[i], 1e-6);
    EXPECT_NEAR(dup[i], dh[i] * g * sig, 1e-6);
    EXPECT_NEAR(dgate[i], dh[i] * up[i] * sig * (1 + g * (1 - sig)), 1e-6);
  }
  // In place: dgate over gate, dup over up.
  std::vector<float> g2 = gate, u2 = up;
  SwiGluBackward(g2.data(), u2.data(), dh.data(), g2.data(), u2.data(), n);
  EXPECT_EQ(g2, dgate);
  EXPECT_EQ(u2, dup);
}

TEST(GroupedQueryHeads, ExpandRepeatsKvHeadsAndReduceIsItsTranspose) {
  const int N = 3, NH = 6, KV = 2, hd = 2;  // Groups of 3 query heads.
  const std::vector<float> q = Random(N * NH * hd, 9),
                           k = Random(N * KV * hd, 10),
                           v = Random(N * KV * hd, 11);
  std::vector<float> qkv(N * 3 * NH * hd);
  ExpandQkv(qkv.data(), q.data(), k.data(), v.data(), N, NH, KV, hd);
  const int row = 2, qc = NH * hd;
  // Query head 4 reads kv head 4 / 3 = 1.
  EXPECT_EQ(qkv[row * 3 * qc + qc + 4 * hd + 1], k[row * KV * hd + hd + 1]);
  EXPECT_EQ(qkv[row * 3 * qc + 2 * qc + 2 * hd], v[row * KV * hd]);
  EXPECT_EQ(qkv[row * 3 * qc + 5], q[row * qc + 5]);

  const std::vector<float> d = Random(qkv.size(), 12);
  std::vector<float> dq(q.size()), dk(k.size(), 7), dv(v.size(), 7);
  ReduceQkvGrad(dq.data(), dk.data(), dv.data(), d.data(), N, NH, KV, hd);
  // dk of kv head 0, row 0, element 0: query heads 0, 1, 2 in that order.
  EXPECT_EQ(dk[0], (d[qc] + d[qc + hd]) + d[qc + 2 * hd]);
  double lhs = 0, rhs = 0;
  for (size_t i = 0; i < qkv.size(); ++i) lhs += double{qkv[i]} * d[i];
  for (size_t i = 0; i < q.size(); ++i) rhs += double{q[i]} * dq[i];
  for (size_t i = 0; i < k.size(); ++i) {
    rhs += double{k[i]} * dk[i] + double{v[i]} * dv[i];
  }
  EXPECT_NEAR(lhs, rhs, 1e-5);
}

TEST(Embedding, GathersRowsAndScattersGradsInRowOrder) {
  const int N = 4, C = 3, V = 5;
  const std::vector<int32_t> tokens = {2, 0, 2, 4};
  const std::vector<float> wte = Random(V * C, 16), dout = Random(N * C, 17);
  std::vector<float> out(N * C), dwte(V * C, 9);
  TokenEmbeddingForward(out.data(), tokens.data(), wte.data(), N, C);
  EXPECT_EQ(out[2 * C + 1], wte[2 * C + 1]);
  EXPECT_EQ(out[3 * C], wte[4 * C]);
  TokenEmbeddingBackward(dwte.data(), dout.data(), tokens.data(), N, C, V);
  EXPECT_EQ(dwte[2 * C + 1], dout[1] + dout[2 * C + 1]);
  EXPECT_EQ(dwte[0], dout[C]);
  EXPECT_EQ(dwte[1 * C + 2], 0.0f);  // Token 1 is not in the batch.
  EXPECT_EQ(dwte[4 * C + 2], dout[3 * C + 2]);
}

TEST(LlamaKernels, SameBitsForAnyThreadCount) {
  const int N = 300, C = 96;
  const std::vector<float> x = Random(N * C, 13), w = Random(C, 14),
                           g = Random(N * C, 15);
  auto run = [&](int threads) {
    SetParallelThreadsForTesting(threads);
    std::vector<float> out(N * C), rstd(N), dx(N * C), dw(C);
    RmsNormForward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
    RmsNormBackward(dx.data(), dw.data(), g.data(), x.data(), w.data(),
                    rstd.data(), N, C);
    out.insert(out.end(), dx.begin(), dx.end());
    out.insert(out.end(), dw.begin(), dw.end());
    return out;
  };
  const std::vector<float> one = run(1);
  EXPECT_EQ(run(3), one);
  SetParallelThreadsForTesting(0);
}

}  // namespace
}  // namespace cpu_kernels
}  // namespace chunkzero
