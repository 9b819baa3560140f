#include "chunk/chunk_packing.h"

#include <cstdint>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

using ::testing::HasSubstr;

std::vector<int64_t> Chunks(const ChunkPlan& plan) {
  std::vector<int64_t> out;
  for (const PackedTensor& t : plan.tensors) out.push_back(t.chunk);
  return out;
}
std::vector<int64_t> Offsets(const ChunkPlan& plan) {
  std::vector<int64_t> out;
  for (const PackedTensor& t : plan.tensors) out.push_back(t.offset);
  return out;
}

TEST(PlanChunks, AFitGoesIntoTheOpenChunkNeverAnEarlierOne) {
  // 4 would fit in chunk 0's 4 spare elements, but chunk 0 is closed.
  absl::StatusOr<ChunkPlan> plan = PlanChunks({6, 5, 4, 3, 0}, 10);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->capacities, (std::vector<int64_t>{10, 10, 10}));
  EXPECT_EQ(Chunks(*plan), (std::vector<int64_t>{0, 1, 1, 2, 2}));
  EXPECT_EQ(Offsets(*plan), (std::vector<int64_t>{0, 0, 5, 0, 3}));
  EXPECT_EQ(plan->used_elements, 18);
  EXPECT_TRUE(plan->tensors[0].opens_chunk);
  EXPECT_FALSE(plan->tensors[2].opens_chunk);
}

TEST(PlanChunks, ExactFitsShareAChunk) {
  absl::StatusOr<ChunkPlan> plan = PlanChunks({1, 8, 0, 1}, 10);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->capacities, (std::vector<int64_t>{10}));
  EXPECT_EQ(Offsets(*plan), (std::vector<int64_t>{0, 1, 9, 9}));
}

TEST(PlanChunks, ChunkingOffGivesEveryTensorItsOwnChunk) {
  for (std::optional<int64_t> off : {std::optional<int64_t>(), {0}}) {
    absl::StatusOr<ChunkPlan> plan = PlanChunks({3, 0, 7}, off);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->capacities, (std::vector<int64_t>{3, 1, 7}));
    EXPECT_EQ(Chunks(*plan), (std::vector<int64_t>{0, 1, 2}));
  }
}

TEST(PlanChunks, NoTensorsNeedNoChunks) {
  absl::StatusOr<ChunkPlan> plan = PlanChunks({}, 10);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->capacities.empty());
}

TEST(ChunkPacker, ErrorsNameTheTensorAndPlaceNothing) {
  ChunkPacker packer(10);
  ASSERT_TRUE(packer.Add(4).ok());
  EXPECT_EQ(packer.Add(11).status().message(),
            "tensor #1 has 11 elements and does not fit in a chunk of 10 "
            "elements");
  EXPECT_EQ(packer.Add(-2).status().message(),
            "tensor #1 has negative size -2");
  EXPECT_EQ(packer.plan().tensors.size(), 1u);
  absl::StatusOr<PackedTensor> next = packer.Add(6);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->chunk, 0);
  EXPECT_EQ(next->offset, 4);

  EXPECT_THAT(ChunkPacker(-1).Add(1).status().message(),
              HasSubstr("chunk size must be positive, got -1"));
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  ChunkPacker off(std::nullopt);
  ASSERT_TRUE(off.Add(kMax).ok());
  EXPECT_THAT(off.Add(1).status().message(),
              HasSubstr("tensors #0 to #1 hold more elements than an int64"));
}

}  // namespace
}  // namespace chunkzero
