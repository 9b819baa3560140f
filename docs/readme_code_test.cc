// README.md's C++ blocks compile (the generated readme_code.cc is part of
// this test) and run: each function block on 2 in-process ranks returns OK
// on both.
#include "docs/readme_code.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/testing/spawn_ranks.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

using ::chunkzero::comm_testing::AllRanksOk;
using ::chunkzero::comm_testing::SpawnRanks;

TEST(ReadmeCode, EveryBlockRunsOnTwoRanks) {
  const std::vector<ReadmeBlock> blocks = ReadmeBlocks();
  ASSERT_FALSE(blocks.empty());
  for (const ReadmeBlock& block : blocks) {
    SCOPED_TRACE(absl::StrCat("README.md:", block.line));
    EXPECT_TRUE(AllRanksOk(SpawnRanks(2, block.run)));
  }
}

}  // namespace
}  // namespace chunkzero
