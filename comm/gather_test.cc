#include "comm/gather.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "comm/recording_process_group.h"
#include "comm/testing/spawn_ranks.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace comm {
namespace {

using ::chunkzero::comm_testing::AllRanksOk;
using ::chunkzero::comm_testing::SpawnRanks;

TEST(AllGatherInt64, EveryValueArrivesExactly) {
  std::vector<std::vector<std::vector<int64_t>>> got(3);
  EXPECT_TRUE(AllRanksOk(SpawnRanks(3, [&](ProcessGroup& g) {
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
  EXPECT_TRUE(AllRanksOk(SpawnRanks(3, [&](ProcessGroup& g) {
    absl::StatusOr<std::vector<std::string>> all =
        AllGatherBytes(g, sent[g.rank()]);
    if (!all.ok()) return all.status();
    got[g.rank()] = *all;
    return absl::OkStatus();
  })));
  for (int me = 0; me < 3; ++me) EXPECT_EQ(got[me], sent);
}

TEST(AllGatherBytes, MovesEachByteOnceAsU8AfterTheI64Lengths) {
  const std::vector<std::string> sent = {"ab", std::string(100, 'x'), "c"};
  std::vector<RecordingSnapshot> snapshots(3);
  std::vector<std::vector<std::string>> calls(3);
  EXPECT_TRUE(AllRanksOk(SpawnRanks(3, [&](ProcessGroup& g) {
    RecordingProcessGroup recording(g);
    absl::StatusOr<std::vector<std::string>> all =
        AllGatherBytes(recording, sent[g.rank()]);
    if (!all.ok()) return all.status();
    snapshots[g.rank()] = recording.Snapshot();
    for (const CollectiveCall& call : snapshots[g.rank()].calls) {
      calls[g.rank()].push_back(call.ToString());
    }
    return absl::OkStatus();
  })));
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(calls[r], (std::vector<std::string>{"AllGather(i64, count=1)",
                                                  "AllGather(u8, count=100)"}));
    // 3 lengths of 8 bytes, then 3 strings padded to 100 bytes.
    EXPECT_EQ(snapshots[r][CollectiveKind::kAllGather].payload_bytes,
              3u * 8 + 3u * 100);
  }
}

}  // namespace
}  // namespace comm
}  // namespace chunkzero
