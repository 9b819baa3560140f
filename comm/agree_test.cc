#include "comm/agree.h"

#include <vector>

#include "absl/status/status.h"
#include "comm/testing/spawn_ranks.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace comm {
namespace {

using ::chunkzero::comm_testing::AllRanksOk;
using ::chunkzero::comm_testing::SpawnRanks;

TEST(AgreeOnStatus, AllOkIsOkEverywhere) {
  std::vector<absl::Status> agreed(3);
  EXPECT_TRUE(AllRanksOk(SpawnRanks(3, [&](ProcessGroup& g) {
    agreed[g.rank()] = AgreeOnStatus(g, absl::OkStatus(), "unused");
    return absl::OkStatus();
  })));
  for (const absl::Status& s : agreed) EXPECT_TRUE(s.ok()) << s;
}

TEST(AgreeOnStatus, EveryRankLearnsTheLowestFailingRank) {
  std::vector<absl::Status> agreed(4);
  EXPECT_TRUE(AllRanksOk(SpawnRanks(4, [&](ProcessGroup& g) {
    absl::Status mine;
    if (g.rank() == 1) mine = absl::DataLossError("bad shard");
    if (g.rank() == 3) mine = absl::NotFoundError("no file");
    agreed[g.rank()] = AgreeOnStatus(g, mine, "a shard could not be written");
    return absl::OkStatus();
  })));
  // The failing ranks keep their own errors, not echoes.
  EXPECT_EQ(agreed[1], absl::DataLossError("bad shard"));
  EXPECT_FALSE(IsEchoedFailure(agreed[1]));
  EXPECT_EQ(agreed[3].code(), absl::StatusCode::kNotFound);
  for (int r : {0, 2}) {
    EXPECT_EQ(agreed[r].code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(agreed[r].message(), "a shard could not be written (rank 1)");
    EXPECT_TRUE(IsEchoedFailure(agreed[r]));
  }
}

TEST(AgreeOnStatus, MarkingOkChangesNothing) {
  absl::Status ok;
  MarkEchoedFailure(ok);
  EXPECT_TRUE(ok.ok());
  EXPECT_FALSE(IsEchoedFailure(ok));
}

}  // namespace
}  // namespace comm
}  // namespace chunkzero
