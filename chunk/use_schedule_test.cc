#include "chunk/use_schedule.h"

#include <memory>
#include <vector>

#include "comm/testing/spawn_ranks.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

using ::chunkzero::comm_testing::AllRanksOk;
using ::chunkzero::comm_testing::SpawnRanks;

TEST(UseSchedule, DistancesFollowTheClockAndWrapIntoTheNextStep) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(1, [](comm::ProcessGroup& g) -> absl::Status {
        std::vector<std::unique_ptr<Chunk>> owned;
        std::vector<Chunk*> c;
        for (int i = 0; i < 4; ++i) {
          ChunkOptions options;
          options.capacity = 1;
          owned.push_back(*Chunk::Create(options, &g));
          c.push_back(owned.back().get());
        }
        UseSchedule s;
        EXPECT_TRUE(s.empty());
        EXPECT_EQ(s.Ahead(1), nullptr);
        EXPECT_EQ(s.Distance(c[0]), UseSchedule::kNever);
        s.Set({c[0], c[1], c[1], c[0]});
        EXPECT_EQ(s.size(), 4);
        EXPECT_EQ(s.Distance(c[0]), 1);  // The clock is before the start.
        EXPECT_EQ(s.Distance(c[1]), 2);
        EXPECT_EQ(s.Distance(c[2]), UseSchedule::kNever);
        s.Began(c[0]);
        EXPECT_EQ(s.Distance(c[1]), 1);
        EXPECT_EQ(s.Distance(c[0]), 3);
        EXPECT_EQ(s.Ahead(1), c[1]);
        s.Began(c[1]);
        s.Began(c[1]);
        s.Began(c[2]);  // Not scheduled: the clock stays.
        EXPECT_EQ(s.Distance(c[0]), 1);
        EXPECT_EQ(s.Distance(c[1]), 3);  // Wraps into the next step.
        EXPECT_EQ(s.Ahead(1), c[0]);
        EXPECT_EQ(s.Ahead(3), c[1]);
        s.Forget(c[1]);
        EXPECT_EQ(s.size(), 2);
        EXPECT_EQ(s.Distance(c[1]), UseSchedule::kNever);
        EXPECT_EQ(s.Distance(c[0]), 1);  // The clock restarts.
        return absl::OkStatus();
      })));
}

}  // namespace
}  // namespace chunkzero
