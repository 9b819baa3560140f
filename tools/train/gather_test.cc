#include "tools/train/gather.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "comm/testing/spawn_ranks.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

using ::chunkzero::comm_testing::AllRanksOk;
using ::chunkzero::comm_testing::SpawnRanks;

TEST(AllGatherInt64, EveryValueArrivesExactly) {
  std::vector<std::vector<std::vector<int64_t>>> got(3);
  EXPECT_TRUE(AllRanksOk(SpawnRanks(3, [&](comm::ProcessGroup& g) {
    const int64_t r = g.rank();
    const std::vector<int64_t> mine = {r, -r - 1, (int64_t{1} << 53) + 1 + r,
                                       std::numeric_limits<int64_t>::max() - r,
                                       std::numeric_limits<int64_t>::min() + r};
    absl::StatusOr<std::vector<std::vector<int64_t>>> all =
        AllGatherInt64(g, mine);
    if (!all.ok()) return all.status();
    got[g.rank()] = *all;
    return absl::OkStatus();
  })));
  for (int me = 0; me < 3; ++me) {
    ASSERT_EQ(got[me].size(), 3u);
    for (int64_t r = 0; r < 3; ++r) {
      EXPECT_EQ(got[me][r], (std::vector<int64_t>{
                                r, -r - 1, (int64_t{1} << 53) + 1 + r,
                                std::numeric_limits<int64_t>::max() - r,
                                std::numeric_limits<int64_t>::min() + r}));
    }
  }
}

TEST(AllGatherBytes, StringsOfDifferentLengthsAndEveryByte) {
  std::string binary;
  for (int b = 0; b < 256; ++b) binary += static_cast<char>(b);
  const std::vector<std::string> sent = {"", binary, "rank two"};
  std::vector<std::vector<std::string>> got(3);
  EXPECT_TRUE(AllRanksOk(SpawnRanks(3, [&](comm::ProcessGroup& g) {
    absl::StatusOr<std::vector<std::string>> all =
        AllGatherBytes(g, sent[g.rank()]);
    if (!all.ok()) return all.status();
    got[g.rank()] = *all;
    return absl::OkStatus();
  })));
  for (int me = 0; me < 3; ++me) EXPECT_EQ(got[me], sent);
}

}  // namespace
}  // namespace chunkzero
