// The CUDA layers against the CPU layers (kernels/cpu_kernels.h) on the
// same inputs. Without a GPU only the refusal is checked.
#include "kernels/cuda_kernels.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu_kernels.h"
#include "kernels/testing/compare.h"
#include "kernels/testing/device_buffers.h"
#include "tensor/cuda/cuda_runtime.h"
#include "tensor/half.h"

namespace chunkzero {
namespace cuda_kernels {
namespace {

using ::chunkzero::kernels_testing::Bf16Bits;
using ::chunkzero::kernels_testing::GpuTest;
using ::chunkzero::kernels_testing::RandomFloats;
using ::chunkzero::kernels_testing::RelativeError;
using ::testing::HasSubstr;

TEST(CudaGptKernels, WithoutAGpuEachLayerSaysWhich) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is visible";
  float x = 1, y = 0;
  const absl::Status gelu = GeluForward(&y, &x, 1);
  EXPECT_FALSE(gelu.ok());
  EXPECT_THAT(gelu.message(), HasSubstr("gelu forward on the GPU: "));
  double loss = 0;
  int32_t target = 0;
  const absl::Status ce =
      CrossEntropyForward(&x, &target, 1, 1, &loss).status();
  EXPECT_FALSE(ce.ok());
  EXPECT_THAT(ce.message(), HasSubstr("cross-entropy forward on the GPU: "));
  if (!BuiltWithCuda()) {
    EXPECT_EQ(gelu.code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(gelu.message(), HasSubstr("--config=cuda"));
  }
}

// ---- With a GPU ----

class CudaGptKernelsOnGpu : public GpuTest {};

TEST_F(CudaGptKernelsOnGpu, EmbeddingIsTheCpusBitForBit) {
  constexpr int B = 2, T = 5, C = 40, V = 11, P = 7, N = B * T;
  std::vector<int32_t> tokens(N);
  for (int n = 0; n < N; ++n) tokens[n] = (n * 7) % V;  // Repeats: 0, 7, 3..
  const std::vector<float> wte = RandomFloats(V * C, 1),
                           wpe = RandomFloats(P * C, 2),
                           dout = RandomFloats(N * C, 3);
  std::vector<float> out(N * C), dwte(V * C), dwpe(P * C);
  cpu_kernels::EmbeddingForward(out.data(), tokens.data(), wte.data(),
                                wpe.data(), B, T, C);
  cpu_kernels::EmbeddingBackward(dwte.data(), dwpe.data(), dout.data(),
                                 tokens.data(), B, T, C, V, P);
  int32_t* g_tokens = Up(tokens);
  float* g_out = Zeros<float>(N * C);
  float* g_dwte = Up(RandomFloats(V * C, 4));  // Overwritten, not added to.
  float* g_dwpe = Up(RandomFloats(P * C, 5));
  ASSERT_TRUE(
      EmbeddingForward(g_out, g_tokens, Up(wte), Up(wpe), B, T, C, V).ok());
  ASSERT_TRUE(
      EmbeddingBackward(g_dwte, g_dwpe, Up(dout), g_tokens, B, T, C, V, P)
          .ok());
  EXPECT_EQ(Down(g_out, N * C), out);
  EXPECT_EQ(Down(g_dwte, V * C), dwte);
  EXPECT_EQ(Down(g_dwpe, P * C), dwpe);

  tokens[3] = V;  // Outside.
  ASSERT_TRUE(
      EmbeddingForward(g_out, Up(tokens), Up(wte), Up(wpe), B, T, C, V).ok());
  const std::vector<float> with_bad = Down(g_out, N * C);
  EXPECT_TRUE(std::isnan(with_bad[3 * C]));
  EXPECT_EQ(with_bad[2 * C], out[2 * C]);
}

TEST_F(CudaGptKernelsOnGpu, LayerNormMatchesTheCpu) {
  constexpr int N = 37, C = 300;
  // A large mean: the two-pass variance must not cancel.
  std::vector<float> x = RandomFloats(N * C, 1);
  for (float& v : x) v += 100;
  const std::vector<float> w = RandomFloats(C, 2), b = RandomFloats(C, 3),
                           dout = RandomFloats(N * C, 4),
                           dx0 = RandomFloats(N * C, 5);
  std::vector<float> out(N * C), mean(N), rstd(N), dx = dx0, dw(C), db(C);
  cpu_kernels::LayerNormForward(out.data(), mean.data(), rstd.data(), x.data(),
                                w.data(), b.data(), N, C);
  cpu_kernels::LayerNormBackward(dx.data(), dw.data(), db.data(), dout.data(),
                                 x.data(), w.data(), mean.data(), rstd.data(),
                                 N, C);
  float *g_x = Up(x), *g_w = Up(w), *g_out = Zeros<float>(N * C),
        *g_mean = Zeros<float>(N), *g_rstd = Zeros<float>(N), *g_dx = Up(dx0),
        *g_dw = Zeros<float>(C), *g_db = Zeros<float>(C);
  ASSERT_TRUE(
      LayerNormForward(g_out, g_mean, g_rstd, g_x, g_w, Up(b), N, C).ok());
  ASSERT_TRUE(LayerNormBackward(g_dx, g_dw, g_db, Up(dout), g_x, g_w, g_mean,
                                g_rstd, N, C)
                  .ok());
  EXPECT_LT(RelativeError(Down(g_out, N * C), out), 1e-5);
  EXPECT_LT(RelativeError(Down(g_mean, N), mean), 1e-6);
  EXPECT_LT(RelativeError(Down(g_rstd, N), rstd), 1e-5);
  EXPECT_LT(RelativeError(Down(g_dx, N * C), dx), 1e-5);  // Added to dx0.
  EXPECT_LT(RelativeError(Down(g_dw, C), dw), 1e-5);
  EXPECT_LT(RelativeError(Down(g_db, C), db), 1e-6);
  // The same bits again: every sum in a fixed order.
  const std::vector<float> dw_once = Down(g_dw, C);
  ASSERT_TRUE(LayerNormBackward(g_dx, g_dw, g_db, Up(dout), g_x, g_w, g_mean,
                                g_rstd, N, C)
                  .ok());
  EXPECT_EQ(Down(g_dw, C), dw_once);
}

TEST_F(CudaGptKernelsOnGpu, ElementWiseLayersMatchTheCpu) {
  constexpr int N = 13, C = 257;
  const size_t n = N * C;
  const std::vector<float> x = RandomFloats(n, 1, 4), y = RandomFloats(n, 2),
                           bias = RandomFloats(C, 3);
  std::vector<float> gelu(n), dgelu(n), sum(n), rows(n), cols(C);
  cpu_kernels::GeluForward(gelu.data(), x.data(), n);
  cpu_kernels::GeluBackward(dgelu.data(), x.data(), y.data(), n);
  cpu_kernels::Add(sum.data(), x.data(), y.data(), n);
  float *g_x = Up(x), *g_y = Up(y), *g_out = Zeros<float>(n);
  ASSERT_TRUE(GeluForward(g_out, g_x, n).ok());
  EXPECT_LT(RelativeError(Down(g_out, n), gelu), 1e-6);
  ASSERT_TRUE(GeluBackward(g_out, g_x, g_y, n).ok());
  EXPECT_LT(RelativeError(Down(g_out, n), dgelu), 1e-6);
  ASSERT_TRUE(Add(g_out, g_x, g_y, n).ok());
  EXPECT_EQ(Down(g_out, n), sum);
  ASSERT_TRUE(BroadcastRows(g_out, Up(bias), N, C).ok());
  for (size_t i = 0; i < n; ++i) rows[i] = bias[i % C];
  EXPECT_EQ(Down(g_out, n), rows);
  float* g_cols = Zeros<float>(C);
  ASSERT_TRUE(ColumnSums(g_cols, g_x, N, C).ok());
  for (int c = 0; c < C; ++c) {
    for (int r = 0; r < N; ++r) cols[c] += x[r * C + c];  // Rows in order.
  }
  EXPECT_LT(RelativeError(Down(g_cols, C), cols), 1e-6);
  uint16_t* g_bits = Zeros<uint16_t>(n);
  ASSERT_TRUE(RoundToBf16(g_bits, g_x, n).ok());
  const std::vector<uint16_t> bits = Down(g_bits, n);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(bits[i], FloatToBFloat16Bits(x[i])) << i;
  }
  // Widening is exact, from either 16-bit type; Zero clears.
  ASSERT_TRUE(Widen(g_out, g_bits, DType::kBF16, n).ok());
  std::vector<float> widened = Down(g_out, n);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(widened[i], BFloat16BitsToFloat(bits[i])) << i;
  }
  std::vector<uint16_t> halves(n);
  for (size_t i = 0; i < n; ++i) halves[i] = FloatToHalfBits(x[i]);
  ASSERT_TRUE(Widen(g_out, Up(halves), DType::kF16, n).ok());
  widened = Down(g_out, n);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(widened[i], HalfBitsToFloat(halves[i])) << i;
  }
  EXPECT_EQ(Widen(g_out, g_bits, DType::kF32, n).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(Zero(g_out, n).ok());
  EXPECT_EQ(Down(g_out, n), std::vector<float>(n, 0.0f));
}

// Softmax rows of a causal attention, and their backward, against sums in
// double.
TEST_F(CudaGptKernelsOnGpu, CausalSoftmaxMatchesItsDefinition) {
  constexpr int heads = 6, T = 45;  // T > 32: lanes take several columns.
  const size_t rows = static_cast<size_t>(heads) * T;
  const std::vector<float> scores = RandomFloats(rows * T, 1, 8),
                           dp = RandomFloats(rows * T, 2);
  std::vector<float> p(rows * T), ds(rows * T);
  const float scale = 0.125f;
  for (size_t r = 0; r < rows; ++r) {
    const int t = static_cast<int>(r % T);
    double m = -INFINITY, sum = 0, dot = 0;
    for (int s = 0; s <= t; ++s) m = std::max<double>(m, scores[r * T + s]);
    for (int s = 0; s <= t; ++s) sum += std::exp(scores[r * T + s] - m);
    for (int s = 0; s <= t; ++s) {
      p[r * T + s] = static_cast<float>(std::exp(scores[r * T + s] - m) / sum);
      dot += double{p[r * T + s]} * dp[r * T + s];
    }
    for (int s = 0; s <= t; ++s) {
      ds[r * T + s] =
          static_cast<float>(p[r * T + s] * (dp[r * T + s] - dot) * scale);
    }
  }
  float* g_att = Up(scores);
  ASSERT_TRUE(CausalSoftmax(g_att, rows, T).ok());
  const std::vector<float> got = Down(g_att, rows * T);
  EXPECT_LT(RelativeError(got, p), 1e-6);
  for (size_t r = 0; r < rows; ++r) {
    for (int s = static_cast<int>(r % T) + 1; s < T; ++s) {
      ASSERT_EQ(got[r * T + s], 0.0f) << "masked " << r << "," << s;
    }
  }
  float* g_d = Up(dp);
  ASSERT_TRUE(CausalSoftmaxBackward(g_d, Up(p), rows, T, scale).ok());
  EXPECT_LT(RelativeError(Down(g_d, rows * T), ds), 1e-5);
}

TEST_F(CudaGptKernelsOnGpu, CrossEntropyMatchesTheCpu) {
  constexpr int N = 9, V = 1000;
  std::vector<float> logits = RandomFloats(N * V, 1, 10);
  std::vector<int32_t> targets(N);
  for (int n = 0; n < N; ++n) targets[n] = (n * 137) % V;
  float* g_logits = Up(logits);
  int32_t* g_targets = Up(targets);
  double* g_losses = Zeros<double>(N);
  std::vector<double> losses(N);
  const double want = cpu_kernels::CrossEntropyForward(
      logits.data(), targets.data(), N, V, losses.data());
  absl::StatusOr<double> got =
      CrossEntropyForward(g_logits, g_targets, N, V, g_losses);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_NEAR(*got, want, 1e-6 * std::fabs(want));
  EXPECT_LT(RelativeError(Down(g_logits, N * V), logits), 1e-6);  // probs
  cpu_kernels::CrossEntropyBackward(logits.data(), targets.data(), 0.25f, N, V);
  ASSERT_TRUE(CrossEntropyBackward(g_logits, g_targets, 0.25f, N, V).ok());
  EXPECT_LT(RelativeError(Down(g_logits, N * V), logits), 1e-6);

  targets[4] = -1;  // Outside: that row's loss, and so the mean, are NaN.
  absl::StatusOr<double> bad = CrossEntropyForward(Up(RandomFloats(N * V, 2)),
                                                   Up(targets), N, V, g_losses);
  ASSERT_TRUE(bad.ok());
  EXPECT_TRUE(std::isnan(*bad));
}

}  // namespace
}  // namespace cuda_kernels
}  // namespace chunkzero
