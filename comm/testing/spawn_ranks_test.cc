#include "comm/testing/spawn_ranks.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace comm_testing {
namespace {

using ::testing::HasSubstr;

TEST(SpawnRanks, RunsEveryRankAndReturnsStatusesByRank) {
  std::vector<int> seen(3, -1);
  const std::vector<absl::Status> statuses =
      SpawnRanks(3, [&](comm::ProcessGroup& g) -> absl::Status {
        seen[g.rank()] = g.size();
        std::vector<float> x(2, static_cast<float>(g.rank()));
        if (absl::Status s = comm::AllReduce(g, comm::MutableBuffer::Of(x));
            !s.ok())
          return s;
        if (g.rank() == 1) return absl::NotFoundError("rank one says no");
        return x[1] == 3.0f ? absl::OkStatus() : absl::InternalError("sum");
      });
  EXPECT_THAT(seen, ::testing::ElementsAre(3, 3, 3));
  ASSERT_EQ(statuses.size(), 3u);
  EXPECT_TRUE(statuses[0].ok());
  EXPECT_EQ(statuses[1].code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(statuses[2].ok());
  const ::testing::AssertionResult all = AllRanksOk(statuses);
  EXPECT_FALSE(all);
  EXPECT_THAT(all.message(), HasSubstr("rank 1: NOT_FOUND: rank one says no"));
  EXPECT_TRUE(AllRanksOk({absl::OkStatus(), absl::OkStatus()}));
}

}  // namespace
}  // namespace comm_testing
}  // namespace chunkzero
