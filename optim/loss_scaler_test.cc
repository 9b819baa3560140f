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

TEST(DynamicLossScaler, RestoreContinuesASavedRun) {
  LossScalerOptions o;
  o.hysteresis = 2;
  o.growth_interval = 3;
  DynamicLossScaler saved = *DynamicLossScaler::Create(o);
  saved.Update(true);
  saved.Update(false);
  DynamicLossScaler resumed = *DynamicLossScaler::Create(o);
  ASSERT_TRUE(resumed
                  .Restore(saved.scale(), saved.growth_tracker(),
                           saved.hysteresis_left())
                  .ok());
  for (bool overflow : {false, true, true, false, false, false}) {
    EXPECT_EQ(resumed.Update(overflow), saved.Update(overflow));
    EXPECT_EQ(resumed.scale(), saved.scale());
    EXPECT_EQ(resumed.growth_tracker(), saved.growth_tracker());
    EXPECT_EQ(resumed.hysteresis_left(), saved.hysteresis_left());
  }
}

TEST(DynamicLossScaler, RestoreRefusesAStateOutsideTheOptions) {
  LossScalerOptions o;
  o.hysteresis = 2;
  DynamicLossScaler s = *DynamicLossScaler::Create(o);
  EXPECT_EQ(s.Restore(0.5, 0, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Restore(1024, 2000, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Restore(1024, 0, 3).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.scale(), 65536.0);  // Unchanged.
  EXPECT_TRUE(s.Restore(1024, 1999, 2).ok());
  EXPECT_EQ(s.scale(), 1024);
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
