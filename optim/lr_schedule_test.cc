#include "optim/lr_schedule.h"

#include <cmath>

#include "gtest/gtest.h"

namespace chunkzero {
namespace {

TEST(LrSchedule, ConstantIsConstant) {
  LrSchedule s = LrSchedule::Constant(3e-4);
  for (int64_t step : {0, 1, 100, 100000}) EXPECT_EQ(s.At(step), 3e-4);
}

TEST(LrSchedule, LinearWarmupThenFlat) {
  LrSchedule s = LrSchedule::LinearWarmup(1.0, 4);
  EXPECT_DOUBLE_EQ(s.At(0), 0.25);
  EXPECT_DOUBLE_EQ(s.At(1), 0.5);
  EXPECT_DOUBLE_EQ(s.At(3), 1.0);
  EXPECT_DOUBLE_EQ(s.At(50), 1.0);
}

TEST(LrSchedule, WarmupThenCosineToMinLr) {
  // 2 warm-up steps, then cosine over steps 2..10 (span 8).
  LrSchedule s = *LrSchedule::WarmupCosine(1.0, 0.1, 2, 11);
  EXPECT_DOUBLE_EQ(s.At(0), 0.5);
  EXPECT_DOUBLE_EQ(s.At(1), 1.0);
  EXPECT_DOUBLE_EQ(s.At(2), 1.0);
  EXPECT_DOUBLE_EQ(s.At(6), 0.1 + 0.9 * 0.5);  // Halfway: cos(pi/2) = 0.
  EXPECT_DOUBLE_EQ(s.At(4), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI / 4)));
  EXPECT_DOUBLE_EQ(s.At(10), 0.1);
  EXPECT_DOUBLE_EQ(s.At(500), 0.1);  // Past the end: stays at min_lr.
}

TEST(LrSchedule, MinEqualToLrWithoutWarmupIsConstant) {
  LrSchedule s = *LrSchedule::WarmupCosine(2e-3, 2e-3, 0, 20);
  for (int64_t step = 0; step < 25; ++step) EXPECT_EQ(s.At(step), 2e-3);
}

TEST(LrSchedule, BadArgumentsAreInvalid) {
  EXPECT_EQ(LrSchedule::WarmupCosine(1e-3, 1e-2, 0, 10).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LrSchedule::WarmupCosine(-1, 0, 0, 10).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LrSchedule::WarmupCosine(1, 0, -1, 10).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LrSchedule::WarmupCosine(1, 0, 0, 0).status().message(),
            "warm-up steps (0) must be >= 0 and total steps (0) >= 1");
}

}  // namespace
}  // namespace chunkzero
