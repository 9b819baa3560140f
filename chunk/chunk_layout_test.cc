#include "chunk/chunk_layout.h"

#include <cstdint>
#include <limits>
#include <vector>

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

constexpr ChunkLayout kAllLayouts[] = {
    ChunkLayout::kReplicated, ChunkLayout::kOwner, ChunkLayout::kSharded};

ChunkSharding Sharding(ChunkLayout layout, int64_t capacity, int world,
                       int rank, int owner = 0) {
  return ChunkSharding{layout, capacity, world, rank, owner};
}

TEST(ChunkLayout, IntersectRangesKeepsTheLowEndWhenEmpty) {
  EXPECT_EQ(IntersectRanges({0, 10}, {4, 8}), ElementRange(4, 8));
  EXPECT_EQ(IntersectRanges({4, 12}, {0, 9}), ElementRange(4, 9));
  EXPECT_EQ(IntersectRanges({0, 4}, {4, 8}), ElementRange(4, 4));
  EXPECT_EQ(IntersectRanges({8, 12}, {0, 5}), ElementRange(8, 8));
  EXPECT_EQ(IntersectRanges({0, 5}, {8, 12}), ElementRange(8, 8));
}

TEST(ChunkLayout, HoldersKeepTheFullBuffer) {
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_TRUE(IsHolder(Sharding(ChunkLayout::kReplicated, 10, 3, rank)));
    EXPECT_FALSE(IsHolder(Sharding(ChunkLayout::kSharded, 10, 3, rank)));
    EXPECT_EQ(IsHolder(Sharding(ChunkLayout::kOwner, 10, 3, rank, /*owner=*/1)),
              rank == 1);
  }
  // One rank still holds no sharded chunk whole: it keeps a shard of all.
  EXPECT_FALSE(IsHolder(Sharding(ChunkLayout::kSharded, 10, 1, 0)));
}

TEST(ChunkLayout, RankPartIsTheShardOrTheWholeChunk) {
  // 10 elements over 3 ranks: shards of 4, the last one padding from 10.
  EXPECT_EQ(RankPart(Sharding(ChunkLayout::kSharded, 10, 3, 0)),
            ElementRange(0, 4));
  EXPECT_EQ(RankPart(Sharding(ChunkLayout::kSharded, 10, 3, 1)),
            ElementRange(4, 8));
  EXPECT_EQ(RankPart(Sharding(ChunkLayout::kSharded, 10, 3, 2)),
            ElementRange(8, 12));
  // The padded capacity gives the same shards.
  EXPECT_EQ(RankPart(Sharding(ChunkLayout::kSharded, 12, 3, 2)),
            ElementRange(8, 12));
  EXPECT_EQ(RankPart(Sharding(ChunkLayout::kSharded, 10, 1, 0)),
            ElementRange(0, 10));
  // Fewer elements than ranks: one each, the rest padding.
  EXPECT_EQ(RankPart(Sharding(ChunkLayout::kSharded, 2, 4, 3)),
            ElementRange(3, 4));
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(RankPart(Sharding(ChunkLayout::kReplicated, 10, 3, rank)),
              ElementRange(0, 10));
    // A non-owner's part too is the whole chunk, though it keeps none of it.
    EXPECT_EQ(RankPart(Sharding(ChunkLayout::kOwner, 10, 3, rank, 2)),
              ElementRange(0, 10));
  }
}

TEST(ChunkLayout, RestElementsAreWhatARankKeeps) {
  EXPECT_EQ(RestElements(Sharding(ChunkLayout::kSharded, 10, 3, 2)), 4);
  EXPECT_EQ(RestElements(Sharding(ChunkLayout::kReplicated, 10, 3, 2)), 10);
  EXPECT_EQ(RestElements(Sharding(ChunkLayout::kOwner, 10, 3, 2, 2)), 10);
  EXPECT_EQ(RestElements(Sharding(ChunkLayout::kOwner, 10, 3, 1, 2)), 0);
  // Only a sharded rank keeps a shard beside the full buffer.
  EXPECT_EQ(ShardStorageElements(Sharding(ChunkLayout::kSharded, 10, 3, 2)), 4);
  EXPECT_EQ(ShardStorageElements(Sharding(ChunkLayout::kSharded, 10, 1, 0)),
            10);
  EXPECT_EQ(ShardStorageElements(Sharding(ChunkLayout::kReplicated, 10, 3, 2)),
            0);
  EXPECT_EQ(ShardStorageElements(Sharding(ChunkLayout::kOwner, 10, 3, 2, 2)),
            0);
}

TEST(ChunkLayout, UpdateRangeIsTheUsedPartARankKeeps) {
  // 10 used of 10 over 3 ranks: the last shard is short.
  EXPECT_EQ(UpdateRange(Sharding(ChunkLayout::kSharded, 10, 3, 0), 10),
            ElementRange(0, 4));
  EXPECT_EQ(UpdateRange(Sharding(ChunkLayout::kSharded, 10, 3, 1), 10),
            ElementRange(4, 8));
  EXPECT_EQ(UpdateRange(Sharding(ChunkLayout::kSharded, 10, 3, 2), 10),
            ElementRange(8, 10));
  // 5 used: the boundary inside rank 1's shard, rank 2 empty at its start.
  EXPECT_EQ(UpdateRange(Sharding(ChunkLayout::kSharded, 10, 3, 0), 5),
            ElementRange(0, 4));
  EXPECT_EQ(UpdateRange(Sharding(ChunkLayout::kSharded, 10, 3, 1), 5),
            ElementRange(4, 5));
  EXPECT_EQ(UpdateRange(Sharding(ChunkLayout::kSharded, 10, 3, 2), 5),
            ElementRange(8, 8));
  // 4 used: exactly rank 0's shard.
  EXPECT_EQ(UpdateRange(Sharding(ChunkLayout::kSharded, 10, 3, 0), 4),
            ElementRange(0, 4));
  EXPECT_EQ(UpdateRange(Sharding(ChunkLayout::kSharded, 10, 3, 1), 4),
            ElementRange(4, 4));
  EXPECT_EQ(UpdateRange(Sharding(ChunkLayout::kSharded, 10, 3, 0), 0),
            ElementRange(0, 0));
  EXPECT_EQ(UpdateRange(Sharding(ChunkLayout::kReplicated, 10, 3, 1), 7),
            ElementRange(0, 7));
  EXPECT_EQ(UpdateRange(Sharding(ChunkLayout::kOwner, 10, 3, 1, 1), 7),
            ElementRange(0, 7));
  EXPECT_EQ(UpdateRange(Sharding(ChunkLayout::kOwner, 10, 3, 0, 1), 7),
            ElementRange(0, 0));
}

TEST(ChunkLayout, AccountRangeSlicesReplicatedChunks) {
  // Replicated: the r-th of world slices, rounded down at both ends.
  EXPECT_EQ(AccountRange(Sharding(ChunkLayout::kReplicated, 10, 3, 0), 10),
            ElementRange(0, 3));
  EXPECT_EQ(AccountRange(Sharding(ChunkLayout::kReplicated, 10, 3, 1), 10),
            ElementRange(3, 6));
  EXPECT_EQ(AccountRange(Sharding(ChunkLayout::kReplicated, 10, 3, 2), 10),
            ElementRange(6, 10));
  EXPECT_EQ(AccountRange(Sharding(ChunkLayout::kReplicated, 10, 4, 0), 7),
            ElementRange(0, 1));
  EXPECT_EQ(AccountRange(Sharding(ChunkLayout::kReplicated, 10, 4, 1), 7),
            ElementRange(1, 3));
  EXPECT_EQ(AccountRange(Sharding(ChunkLayout::kReplicated, 10, 4, 2), 7),
            ElementRange(3, 5));
  EXPECT_EQ(AccountRange(Sharding(ChunkLayout::kReplicated, 10, 4, 3), 7),
            ElementRange(5, 7));
  EXPECT_EQ(AccountRange(Sharding(ChunkLayout::kReplicated, 10, 1, 0), 7),
            ElementRange(0, 7));
  // The other layouts account for what they update.
  EXPECT_EQ(AccountRange(Sharding(ChunkLayout::kSharded, 10, 3, 2), 10),
            ElementRange(8, 10));
  EXPECT_EQ(AccountRange(Sharding(ChunkLayout::kOwner, 10, 3, 1, 1), 7),
            ElementRange(0, 7));
  EXPECT_EQ(AccountRange(Sharding(ChunkLayout::kOwner, 10, 3, 0, 1), 7),
            ElementRange(0, 0));
}

TEST(ChunkLayout, EveryUsedElementIsAccountedOnceAndUpdatedByItsKeepers) {
  for (ChunkLayout layout : kAllLayouts) {
    for (int world = 1; world <= 5; ++world) {
      for (int64_t capacity = 1; capacity <= 13; ++capacity) {
        for (int64_t used = 0; used <= capacity; ++used) {
          const int owner = static_cast<int>(capacity % world);
          std::vector<int> accounted(used, 0), updated(used, 0);
          for (int rank = 0; rank < world; ++rank) {
            const ChunkSharding p =
                Sharding(layout, capacity, world, rank, owner);
            // Empty ranges may start past `used` (lo, lo); others end
            // within it.
            const auto [a_lo, a_hi] = AccountRange(p, used);
            ASSERT_TRUE(a_lo == a_hi ||
                        (0 <= a_lo && a_lo < a_hi && a_hi <= used));
            for (int64_t e = a_lo; e < a_hi; ++e) ++accounted[e];
            const auto [u_lo, u_hi] = UpdateRange(p, used);
            ASSERT_TRUE(u_lo == u_hi ||
                        (0 <= u_lo && u_lo < u_hi && u_hi <= used));
            for (int64_t e = u_lo; e < u_hi; ++e) ++updated[e];
          }
          const int keepers = layout == ChunkLayout::kReplicated ? world : 1;
          for (int64_t e = 0; e < used; ++e) {
            ASSERT_EQ(accounted[e], 1)
                << layout << " world " << world << " capacity " << capacity
                << " used " << used << " element " << e;
            ASSERT_EQ(updated[e], keepers)
                << layout << " world " << world << " capacity " << capacity
                << " used " << used << " element " << e;
          }
        }
      }
    }
  }
}

TEST(ChunkLayout, OwnersGoRoundRobinOrToTheLeastLoaded) {
  const int expected[] = {0, 1, 2, 0, 1, 2, 0};
  for (int i = 0; i < 7; ++i) EXPECT_EQ(RoundRobinOwner(i, 3), expected[i]);
  EXPECT_EQ(RoundRobinOwner(5, 1), 0);
  EXPECT_EQ(LeastLoadedOwner({5, 3, 3, 4}), 1);
  EXPECT_EQ(LeastLoadedOwner({0, 0}), 0);
  EXPECT_EQ(LeastLoadedOwner({9, 8, 7}), 2);
  EXPECT_EQ(LeastLoadedOwner({7}), 0);
}

TEST(ChunkLayout, CostFactors) {
  EXPECT_EQ(MeanRestFraction(ChunkLayout::kReplicated, 4), 1.0);
  EXPECT_EQ(MeanRestFraction(ChunkLayout::kSharded, 4), 0.25);
  EXPECT_EQ(MeanRestFraction(ChunkLayout::kOwner, 4), 0.25);
  EXPECT_EQ(MeanRestFraction(ChunkLayout::kSharded, 1), 1.0);
  EXPECT_EQ(BusFactorPerStep(ChunkLayout::kReplicated, 4), 1.5);
  EXPECT_EQ(BusFactorPerStep(ChunkLayout::kSharded, 4), 2.25);
  EXPECT_EQ(BusFactorPerStep(ChunkLayout::kOwner, 4), 3.0);
  for (ChunkLayout layout : kAllLayouts) {
    EXPECT_EQ(BusFactorPerStep(layout, 1), 0.0) << layout;
  }
}

TEST(ChunkLayout, NamesRoundTrip) {
  for (ChunkLayout layout : kAllLayouts) {
    EXPECT_EQ(*ParseChunkLayout(ChunkLayoutName(layout)), layout);
  }
  EXPECT_FALSE(ParseChunkLayout("striped").ok());
}

}  // namespace
}  // namespace chunkzero
