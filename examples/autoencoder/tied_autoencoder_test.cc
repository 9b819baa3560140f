#include <cmath>
#include <string>
#include <vector>

#include "autoencoder/train_ranks.h"
#include "gtest/gtest.h"

namespace autoencoder {
namespace {

TrainSettings Settings(int steps) {
  TrainSettings s;
  s.steps = steps;
  s.engine.chunk_size = 64;
  s.engine.precision = chunkzero::DType::kF32;
  return s;
}

// Max |a - b| / max(|b|) over a tensor.
double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::abs(b[i])));
  }
  return diff / scale;
}

TEST(TiedAutoencoder, LossFallsOnTwoRanks) {
  TrainSettings s = Settings(30);
  s.engine.optimizer.kind = chunkzero::OptimizerKind::kAdam;
  s.engine.optimizer.lr = chunkzero::LrSchedule::Constant(0.02);
  const absl::StatusOr<Trained> t = TrainOnRanks(2, s);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->losses.size(), 30u);
  EXPECT_LT(t->losses.back(), 0.5 * t->losses.front());
}

// With SGD at rate 1 a step subtracts the gradient, so initial - final is
// the gradient of the whole batch: two ranks with half of it each must
// compute what one rank computes with all of it, the tied weight's two
// uses and the gate included.
TEST(TiedAutoencoder, TwoRanksComputeTheGradientsOfOne) {
  TrainSettings s = Settings(1);
  s.engine.optimizer.kind = chunkzero::OptimizerKind::kSgd;
  s.engine.optimizer.lr = chunkzero::LrSchedule::Constant(1.0);
  const absl::StatusOr<Trained> one = TrainOnRanks(1, s);
  const absl::StatusOr<Trained> two = TrainOnRanks(2, s);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_TRUE(two.ok()) << two.status();
  ASSERT_EQ(one->final.size(), 4u);
  for (const auto& [name, initial] : one->initial) {
    std::vector<float> g1(initial.size()), g2(initial.size());
    for (size_t i = 0; i < initial.size(); ++i) {
      g1[i] = initial[i] - one->final.at(name)[i];
      g2[i] = two->initial.at(name)[i] - two->final.at(name)[i];
    }
    EXPECT_EQ(two->initial.at(name), initial) << name;
    EXPECT_LT(RelativeError(g2, g1), 1e-5) << name;
    double norm = 0;
    for (float g : g1) norm += g * g;
    EXPECT_GT(norm, 0) << name << " got no gradient";
  }
}

// Step 2 does not use the gate: its gradient there is zero on every rank,
// so plain SGD leaves it where step 1 put it, while the rest moves on.
TEST(TiedAutoencoder, AParameterAStepDoesNotUseStaysPut) {
  TrainSettings s = Settings(1);
  s.engine.optimizer.kind = chunkzero::OptimizerKind::kSgd;
  s.engine.optimizer.lr = chunkzero::LrSchedule::Constant(0.1);
  const absl::StatusOr<Trained> after_one = TrainOnRanks(2, s);
  s.steps = 2;
  const absl::StatusOr<Trained> after_two = TrainOnRanks(2, s);
  ASSERT_TRUE(after_one.ok()) << after_one.status();
  ASSERT_TRUE(after_two.ok()) << after_two.status();
  EXPECT_EQ(after_two->final.at("gate"), after_one->final.at("gate"));
  EXPECT_NE(after_two->final.at("weight"), after_one->final.at("weight"));
}

// Evaluating on held-out rows between steps changes no bit of the
// training, and the held-out loss falls as the model learns.
TEST(TiedAutoencoder, EvaluatingBetweenStepsChangesNothing) {
  TrainSettings s = Settings(12);
  s.engine.optimizer.kind = chunkzero::OptimizerKind::kAdam;
  s.engine.optimizer.lr = chunkzero::LrSchedule::Constant(0.02);
  const absl::StatusOr<Trained> plain = TrainOnRanks(2, s);
  s.eval_every = 3;
  const absl::StatusOr<Trained> evaluated = TrainOnRanks(2, s);
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(evaluated.ok()) << evaluated.status();
  EXPECT_EQ(evaluated->losses, plain->losses);
  EXPECT_EQ(evaluated->final, plain->final);
  ASSERT_EQ(evaluated->held_out_losses.size(), 5u);  // Steps 1, 4, 7, 10, end.
  EXPECT_LT(evaluated->held_out_losses.back(),
            evaluated->held_out_losses.front());
}

TEST(TiedAutoencoder, RowsThatDoNotSplitAreRefused) {
  TrainSettings s = Settings(1);
  s.rows = 31;
  const absl::StatusOr<Trained> t = TrainOnRanks(2, s);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.status().message(), "31 rows do not split over 2 ranks");
}

}  // namespace
}  // namespace autoencoder
