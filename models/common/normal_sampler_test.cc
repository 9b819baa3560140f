#include "models/common/normal_sampler.h"

#include <cmath>
#include <cstdint>
#include <random>

#include "gtest/gtest.h"

namespace chunkzero {
namespace {

TEST(NormalSampler, IsBoxMullerOnTheGeneratorsUniforms) {
  NormalSampler normal(42);
  std::mt19937_64 rng(42);
  const double u1 = 1.0 - (rng() >> 11) * 0x1.0p-53;
  const double u2 = (rng() >> 11) * 0x1.0p-53;
  const double r = std::sqrt(-2.0 * std::log(u1));
  EXPECT_EQ(normal.Next(), r * std::cos(6.283185307179586 * u2));
  EXPECT_EQ(normal.Next(), r * std::sin(6.283185307179586 * u2));
}

TEST(NormalSampler, SameSeedSameDrawsAndUnitMoments) {
  NormalSampler a(7), b(7), c(8);
  double sum = 0, squares = 0;
  bool differs = false;
  constexpr int kDraws = 200000;
  for (int i = 0; i < kDraws; ++i) {
    const double x = a.Next();
    ASSERT_EQ(x, b.Next());
    differs |= x != c.Next();
    sum += x;
    squares += x * x;
  }
  EXPECT_TRUE(differs);
  // Standard errors: 1/sqrt(n) = 0.0022 for the mean, sqrt(2/n) = 0.0032
  // for the variance; 5 of them.
  EXPECT_NEAR(sum / kDraws, 0.0, 0.011);
  EXPECT_NEAR(squares / kDraws, 1.0, 0.016);
}

TEST(NormalSampler, SkipMovesOnAsNextWouldFromEitherParity) {
  // Every split of 0..9 draws into a skip and the rest, starting with and
  // without a spare in hand.
  for (int start = 0; start < 2; ++start) {
    for (int skip = 0; skip <= 9; ++skip) {
      NormalSampler drawn(99), skipped(99);
      for (int i = 0; i < start; ++i) {
        drawn.Next();
        skipped.Next();
      }
      for (int i = 0; i < skip; ++i) drawn.Next();
      skipped.Skip(skip);
      for (int i = 0; i < 5; ++i) {
        ASSERT_EQ(drawn.Next(), skipped.Next())
            << "start " << start << " skip " << skip << " draw " << i;
      }
    }
  }
  NormalSampler none(3), reference(3);
  none.Skip(-4);
  EXPECT_EQ(none.Next(), reference.Next());
}

}  // namespace
}  // namespace chunkzero
