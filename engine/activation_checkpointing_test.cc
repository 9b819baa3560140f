#include "engine/activation_checkpointing.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

using ::testing::HasSubstr;

TEST(ActivationCheckpointingTest, NoneCheckpointsNothing) {
  const ActivationCheckpointing ac;
  EXPECT_FALSE(ac.enabled());
  EXPECT_FALSE(ac.Checkpoints(0));
  EXPECT_EQ(ac.CheckpointedBlocks(12), 0);
  EXPECT_EQ(ac.ToString(), "none");
}

TEST(ActivationCheckpointingTest, ParsesTheThreeSpellings) {
  EXPECT_EQ(ActivationCheckpointing::Parse("none")->every, 0);
  EXPECT_EQ(ActivationCheckpointing::Parse("layers")->every, 1);
  EXPECT_EQ(ActivationCheckpointing::Parse("every:3")->every, 3);
  for (const char* text : {"none", "layers", "every:2", "every:17"}) {
    EXPECT_EQ(ActivationCheckpointing::Parse(text)->ToString(), text);
  }
  EXPECT_EQ(ActivationCheckpointing::Parse("every:1")->ToString(), "layers");
}

TEST(ActivationCheckpointingTest, EveryKCheckpointsBlocksZeroKTwoK) {
  const ActivationCheckpointing ac{3};
  std::vector<int> checkpointed;
  for (int block = 0; block < 8; ++block) {
    if (ac.Checkpoints(block)) checkpointed.push_back(block);
  }
  EXPECT_EQ(checkpointed, (std::vector<int>{0, 3, 6}));
  EXPECT_EQ(ac.CheckpointedBlocks(8), 3);
  EXPECT_EQ(ac.CheckpointedBlocks(9), 3);
  EXPECT_EQ(ac.CheckpointedBlocks(10), 4);
  EXPECT_EQ(ActivationCheckpointing{1}.CheckpointedBlocks(4), 4);
  EXPECT_EQ(ActivationCheckpointing{9}.CheckpointedBlocks(4), 1);
  EXPECT_FALSE(ac.Checkpoints(-3));
}

TEST(ActivationCheckpointingTest, KeptBlocksOwnSlotsCheckpointedShareOne) {
  // every:3 over 8 blocks: 0, 3, 6 share slot 5; 1 2 4 5 7 take 0..4.
  const ActivationCheckpointing ac{3};
  EXPECT_EQ(ac.Slots(8), 6);
  std::vector<int> slots;
  for (int block = 0; block < 8; ++block) slots.push_back(ac.SlotOf(block, 8));
  EXPECT_EQ(slots, (std::vector<int>{5, 0, 1, 5, 2, 3, 5, 4}));
  EXPECT_EQ(ActivationCheckpointing{}.Slots(4), 4);
  EXPECT_EQ(ActivationCheckpointing{}.SlotOf(2, 4), 2);
  EXPECT_EQ(ActivationCheckpointing{1}.Slots(4), 1);
  EXPECT_EQ(ActivationCheckpointing{1}.SlotOf(3, 4), 0);
}

TEST(ActivationCheckpointingTest, RejectsAnythingElseQuotingIt) {
  for (const char* text :
       {"", "all", "every:", "every:0", "every:-2", "every:+2", "every: 2",
        "every:2x", "Layers", "every:99999999999"}) {
    const auto parsed = ActivationCheckpointing::Parse(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(parsed.status().message(),
                HasSubstr(absl::StrCat("'", text, "'")));
  }
}

}  // namespace
}  // namespace chunkzero
