#include "optim/loss_scaler.h"

#include "gtest/gtest.h"

namespace chunkzero {
namespace {

TEST(DynamicLossScaler, GradScalerDefaults) {
  DynamicLossScaler s;
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_FALSE(s.Update(true));  // Overflow: skip, back off at once.
  EXPECT_EQ(s.scale(), 32768.0);
  for (int i = 0; i < 1999; ++i) EXPECT_TRUE(s.Update(false));
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_TRUE(s.Update(false));  // The 2000th clean step grows it.
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.growth_tracker(), 0);
}

TEST(DynamicLossScaler, HysteresisToleratesOverflows) {
  LossScalerOptions o;
  o.initial_scale = 1024;
  o.hysteresis = 2;
  o.growth_interval = 3;
  DynamicLossScaler s = *DynamicLossScaler::Create(o);
  EXPECT_FALSE(s.Update(true));
  EXPECT_EQ(s.scale(), 1024);  // First overflow tolerated...
  EXPECT_EQ(s.hysteresis_left(), 1);
  EXPECT_TRUE(s.Update(false));
  EXPECT_FALSE(s.Update(true));
  EXPECT_EQ(s.scale(), 512);  // ...the second backs off.
  EXPECT_EQ(s.hysteresis_left(), 2);
  EXPECT_TRUE(s.Update(false));
  EXPECT_TRUE(s.Update(false));
  EXPECT_TRUE(s.Update(false));
  EXPECT_EQ(s.scale(), 1024);
}

TEST(DynamicLossScaler, ClampsToMinAndMax) {
  LossScalerOptions o;
  o.initial_scale = 2;
  o.min_scale = 1;
  o.max_scale = 4;
  o.growth_interval = 1;
  DynamicLossScaler s = *DynamicLossScaler::Create(o);
  s.Update(true);
  s.Update(true);
  EXPECT_EQ(s.scale(), 1);
  for (int i = 0; i < 5; ++i) s.Update(false);
  EXPECT_EQ(s.scale(), 4);
}

TEST(DynamicLossScaler, BadOptionsAreInvalid) {
  LossScalerOptions o;
  o.backoff_factor = 1.5;
  EXPECT_EQ(DynamicLossScaler::Create(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o = LossScalerOptions();
  o.hysteresis = 0;
  EXPECT_EQ(DynamicLossScaler::Create(o).status().message(),
            "loss scaler growth_interval (2000) and hysteresis (0) must be "
            "positive");
  o = LossScalerOptions();
  o.initial_scale = 0.5;
  EXPECT_EQ(DynamicLossScaler::Create(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace chunkzero
