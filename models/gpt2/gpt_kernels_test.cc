// The fast transcendental paths of gpt_kernels; the layers themselves are
// checked end to end against finite differences in gpt_model_test.
#include "models/gpt2/gpt_kernels.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace chunkzero {
namespace gpt_kernels {
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
}  // namespace gpt_kernels
}  // namespace chunkzero
