// The fast transcendental paths of gpt_kernels; the layers themselves are
// checked end to end against finite differences in gpt_model_test.
#include "tools/gpt/gpt_kernels.h"

#include <cmath>
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

}  // namespace
}  // namespace gpt_kernels
}  // namespace chunkzero
