#include "ddp/step_schedule.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

using Op = StepSchedule::Op;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

// One block, checkpointed: forward {0}, {1}; backward {1}; the block's
// forward again {0}; backward {0}.
std::vector<Op> RecomputeStep() {
  return {{StepSchedule::kForward, {0}},
          {StepSchedule::kForward, {1}},
          {StepSchedule::kBackward, {1}},
          {StepSchedule::kForward, {0}},
          {StepSchedule::kBackward, {0}}};
}

void RunStep(StepSchedule& schedule, const std::vector<Op>& ops) {
  for (const Op& op : ops) schedule.Begin(op.kind, op.params);
}

TEST(StepScheduleTest, RecordsTheScopesInTheOrderTheyRan) {
  StepSchedule schedule;
  RunStep(schedule, RecomputeStep());
  EXPECT_FALSE(schedule.following());  // Nothing adopted yet.
  EXPECT_THAT(schedule.Ahead(), IsEmpty());
  EXPECT_EQ(schedule.EndStep(), RecomputeStep());
  EXPECT_THAT(schedule.EndStep(), IsEmpty());  // A new step.
}

TEST(StepScheduleTest, KnowsAForwardScopeInsideBackwardIsARecomputation) {
  StepSchedule schedule;
  std::vector<bool> recomputing;
  for (const Op& op : RecomputeStep()) {
    schedule.Begin(op.kind, op.params);
    recomputing.push_back(schedule.recomputing());
  }
  EXPECT_THAT(recomputing, ElementsAre(false, false, false, true, false));
  schedule.EndStep();
  schedule.Begin(StepSchedule::kForward, {0});
  EXPECT_FALSE(schedule.recomputing());  // The next step's forward.
}

TEST(StepScheduleTest, FollowsTheAdoptedScheduleAndShowsWhatComes) {
  StepSchedule schedule;
  schedule.Adopt(RecomputeStep());
  const std::vector<Op> ops = RecomputeStep();
  for (size_t k = 0; k < ops.size(); ++k) {
    schedule.Begin(ops[k].kind, ops[k].params);
    ASSERT_TRUE(schedule.following()) << k;
    ASSERT_EQ(schedule.Ahead().size(), ops.size() - k - 1);
    if (k + 1 < ops.size()) {
      EXPECT_EQ(schedule.Ahead()[0], ops[k + 1]);
    }
  }
  EXPECT_EQ(schedule.EndStep(), ops);
}

TEST(StepScheduleTest, AStepThatLeavesTheScheduleStopsFollowingUntilTheNext) {
  StepSchedule schedule;
  schedule.Adopt(RecomputeStep());
  schedule.Begin(StepSchedule::kForward, {0});
  schedule.Begin(StepSchedule::kForward, {1});
  schedule.Begin(StepSchedule::kBackward, {1});
  schedule.Begin(StepSchedule::kBackward, {0});  // No recomputation.
  EXPECT_FALSE(schedule.following());
  EXPECT_THAT(schedule.Ahead(), IsEmpty());
  // Back on it, but not this step.
  schedule.Begin(StepSchedule::kForward, {0});
  EXPECT_FALSE(schedule.following());
  schedule.EndStep();
  schedule.Begin(StepSchedule::kForward, {0});
  EXPECT_TRUE(schedule.following());
  // A step longer than the schedule leaves it too.
  schedule.EndStep();
  RunStep(schedule, RecomputeStep());
  schedule.Begin(StepSchedule::kBackward, {0});
  EXPECT_FALSE(schedule.following());
}

TEST(StepScheduleTest, FingerprintTellsKindsIndicesAndOrderApart) {
  const std::vector<Op> ops = RecomputeStep();
  std::vector<Op> kind = ops, index = ops, order = ops;
  kind[3].kind = StepSchedule::kBackward;
  index[3].params = {2};
  std::swap(order[0], order[1]);
  const uint64_t f = StepSchedule::Fingerprint(ops);
  EXPECT_EQ(f, StepSchedule::Fingerprint(RecomputeStep()));
  EXPECT_NE(f, StepSchedule::Fingerprint(kind));
  EXPECT_NE(f, StepSchedule::Fingerprint(index));
  EXPECT_NE(f, StepSchedule::Fingerprint(order));
  EXPECT_NE(f, StepSchedule::Fingerprint({}));
}

TEST(StepScheduleTest, RecomputesOnlyWithAForwardScopeAfterABackwardOne) {
  EXPECT_TRUE(StepSchedule::Recomputes(RecomputeStep()));
  const std::vector<Op> plain = {{StepSchedule::kForward, {0}},
                                 {StepSchedule::kForward, {1}},
                                 {StepSchedule::kBackward, {1}},
                                 {StepSchedule::kBackward, {0}}};
  EXPECT_FALSE(StepSchedule::Recomputes(plain));
  EXPECT_FALSE(StepSchedule::Recomputes({}));
  EXPECT_FALSE(StepSchedule::Recomputes({{StepSchedule::kBackward, {0}}}));
}

TEST(StepScheduleTest, UntilNextRecomputeSpansTheRecomputationAndItsBackward) {
  // Two blocks, both checkpointed: forward {0} {1}; backward {1}... as
  // RecomputeStep, with block 1 recomputed too.
  const std::vector<Op> ops = {{StepSchedule::kForward, {1}},
                               {StepSchedule::kBackward, {1}},
                               {StepSchedule::kForward, {0}},
                               {StepSchedule::kBackward, {0}}};
  EXPECT_EQ(StepSchedule::UntilNextRecompute(ops), 2u);
  EXPECT_EQ(
      StepSchedule::UntilNextRecompute(absl::MakeConstSpan(ops).subspan(1)),
      1u);
  EXPECT_EQ(
      StepSchedule::UntilNextRecompute(absl::MakeConstSpan(ops).subspan(2)),
      2u);
  EXPECT_EQ(StepSchedule::UntilNextRecompute({}), 0u);
}

}  // namespace
}  // namespace chunkzero
