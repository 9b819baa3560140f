#include "chunk/chunk_layout.h"

#include <cstdint>
#include <limits>

#include "gtest/gtest.h"

namespace chunkzero {
namespace {

TEST(ChunkLayout, ShardedChunksArePaddedToEqualShards) {
  EXPECT_EQ(ShardSize(ChunkLayout::kSharded, 10, 3), 4);
  EXPECT_EQ(PaddedCapacity(ChunkLayout::kSharded, 10, 3), 12);
  EXPECT_EQ(ShardSize(ChunkLayout::kSharded, 12, 3), 4);
  EXPECT_EQ(PaddedCapacity(ChunkLayout::kSharded, 12, 3), 12);
  EXPECT_EQ(PaddedCapacity(ChunkLayout::kSharded, 1, 4), 4);
}

TEST(ChunkLayout, OtherLayoutsKeepTheWholeChunk) {
  for (ChunkLayout layout : {ChunkLayout::kReplicated, ChunkLayout::kOwner}) {
    EXPECT_EQ(ShardSize(layout, 10, 3), 10);
    EXPECT_EQ(PaddedCapacity(layout, 10, 3), 10);
  }
}

TEST(ChunkLayout, HugeCapacitiesDoNotOverflow) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(ShardSize(ChunkLayout::kSharded, kMax, 2), kMax / 2 + 1);
  EXPECT_EQ(PaddedCapacity(ChunkLayout::kSharded, kMax, 2), kMax);
  EXPECT_EQ(PaddedCapacity(ChunkLayout::kSharded, kMax - 1, 2), kMax - 1);
}

TEST(ChunkLayout, NamesRoundTrip) {
  for (ChunkLayout layout :
       {ChunkLayout::kReplicated, ChunkLayout::kOwner, ChunkLayout::kSharded}) {
    EXPECT_EQ(*ParseChunkLayout(ChunkLayoutName(layout)), layout);
  }
  EXPECT_FALSE(ParseChunkLayout("striped").ok());
}

}  // namespace
}  // namespace chunkzero
