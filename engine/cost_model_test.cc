#include "engine/cost_model.h"

#include "gtest/gtest.h"

namespace chunkzero {
namespace {

EngineOptions Options(DType precision, OptimizerKind kind) {
  EngineOptions o;
  o.precision = precision;
  o.optimizer.kind = kind;
  return o;
}

TEST(ModelBytesPerParameter, ComputeMasterStatesAndAccumulation) {
  EXPECT_EQ(
      ModelBytesPerParameter(Options(DType::kF16, OptimizerKind::kAdamW), 1),
      2 + 4 + 8);
  EXPECT_EQ(
      ModelBytesPerParameter(Options(DType::kF32, OptimizerKind::kAdam), 4),
      4 + 4 + 8 + 4);
  EXPECT_EQ(
      ModelBytesPerParameter(Options(DType::kBF16, OptimizerKind::kSgd), 1),
      2 + 4);
  EngineOptions momentum = Options(DType::kBF16, OptimizerKind::kSgd);
  momentum.optimizer.momentum = 0.9;  // One f32 buffer more.
  EXPECT_EQ(ModelBytesPerParameter(momentum, 1), 2 + 4 + 4);
  EXPECT_EQ(ReplicatedBytesPerParameter(
                Options(DType::kF16, OptimizerKind::kAdamW), 1),
            16);
}

TEST(ExpectedCommBytesPerStep, EachLayout) {
  EngineOptions o = Options(DType::kF16, OptimizerKind::kAdamW);
  o.layout = ChunkLayout::kReplicated;
  EXPECT_DOUBLE_EQ(ExpectedCommBytesPerStep(o, 4, 1, 1000), 2 * 2 * 750.0);
  o.layout = ChunkLayout::kSharded;
  EXPECT_DOUBLE_EQ(ExpectedCommBytesPerStep(o, 4, 2, 1000), 2 * 3 * 2 * 750.0);
  o.layout = ChunkLayout::kOwner;
  EXPECT_DOUBLE_EQ(ExpectedCommBytesPerStep(o, 4, 1, 1000), 3 * 2 * 1000.0);
  EXPECT_DOUBLE_EQ(ExpectedCommBytesPerStep(o, 1, 1, 1000), 0);
}

// 1000 parameters, largest tensor 300, f16 AdamW on 4 ranks.
TEST(EstimateChunkMemory, ShardedWorkedOutByHand) {
  EngineOptions o = Options(DType::kF16, OptimizerKind::kAdamW);
  o.chunk_size = 400;
  o.max_prefetch = 1;
  const ChunkMemory m = EstimateChunkMemory(o, {1000, 300, 3}, 4, 1);
  // 3 chunks of 400: 1200 elements, 300 per rank at rest.
  EXPECT_DOUBLE_EQ(m.chunks_at_rest, 2 * 300);
  // 2 * 1 + 3 = 5 chunks could be in flight, but there are only 3.
  EXPECT_DOUBLE_EQ(m.in_flight, 2 * 1200);
  EXPECT_DOUBLE_EQ(m.in_flight_shards, 2 * 1200 / 4.0);
  EXPECT_DOUBLE_EQ(m.reduce_scratch, 2 * 4 * 400);
  EXPECT_DOUBLE_EQ(m.chunks, 600 + 2400 + 3200);
  EXPECT_DOUBLE_EQ(m.optimizer, 12 * 300);
}

// The same on the NVMe tier: the masters and states (12 bytes of each
// held element) go to disk, each chunk's three 4 KiB-padded; host memory
// keeps three chunks' staging (a rank's 100 elements of a chunk of 400).
TEST(EstimateChunkMemory, NvmeMovesMastersAndStatesToDisk) {
  EngineOptions o = Options(DType::kF16, OptimizerKind::kAdamW);
  o.chunk_size = 400;
  o.max_prefetch = 1;
  o.offload = OffloadPolicy::kNvme;
  ChunkMemory m = EstimateChunkMemory(o, {1000, 300, 3}, 4, 1);
  EXPECT_DOUBLE_EQ(m.disk, 12 * 300 + 3 * 4096 * 3);
  // Three pieces (here whole: 100 elements) of 3 groups, and a bounce
  // buffer of one 4 KiB region.
  EXPECT_DOUBLE_EQ(m.optimizer, 3 * 3 * (4 * 100 + 4096) + 4096);
  // The accumulation stays in host memory.
  m = EstimateChunkMemory(o, {1000, 300, 3}, 4, 2);
  EXPECT_DOUBLE_EQ(m.optimizer, 4 * 300 + 3 * 3 * (4 * 100 + 4096) + 4096);
  // Pieces smaller than a rank's part of a chunk stage less.
  o.optimizer.disk_piece_elements = 64;
  m = EstimateChunkMemory(o, {1000, 300, 3}, 4, 1);
  EXPECT_DOUBLE_EQ(m.optimizer, 3 * 3 * (4 * 64 + 4096) + 4096);
  EXPECT_DOUBLE_EQ(m.chunks_at_rest, 2 * 300);  // The chunks do not move.
}

TEST(EstimateChunkMemory, ReplicatedKeepsEverythingAtRest) {
  EngineOptions o = Options(DType::kF32, OptimizerKind::kSgd);
  o.layout = ChunkLayout::kReplicated;
  o.chunk_size = 400;
  o.max_prefetch = 0;
  const ChunkMemory m = EstimateChunkMemory(o, {1000, 300, 0}, 4, 2);
  // Unknown packing: one chunk more than the parameters fill.
  EXPECT_DOUBLE_EQ(m.chunks, 4 * 1400);
  EXPECT_DOUBLE_EQ(m.chunks_at_rest, 4 * 1400);
  EXPECT_DOUBLE_EQ(m.in_flight, 4 * 1200);  // 3 chunks of 400.
  EXPECT_DOUBLE_EQ(m.reduce_scratch, 0);
  EXPECT_DOUBLE_EQ(m.optimizer, (4 + 4) * 1400);  // Master + accumulation.
}

TEST(EstimateChunkMemory, OneChunkPerTensorPadsNothing) {
  EngineOptions o = Options(DType::kBF16, OptimizerKind::kAdamW);
  o.layout = ChunkLayout::kOwner;
  const ChunkMemory m = EstimateChunkMemory(o, {1000, 300, 0}, 2, 1);
  // The largest tensor is the chunk; an owner may hold one more.
  EXPECT_DOUBLE_EQ(m.chunks_at_rest, 2 * (500 + 300));
  EXPECT_DOUBLE_EQ(m.in_flight_shards, 0);
  EXPECT_DOUBLE_EQ(m.optimizer, 12 * (500 + 300));
}

TEST(EstimateChunkMemory, OwnerGathersOnlyOthersChunks) {
  EngineOptions o = Options(DType::kF16, OptimizerKind::kAdamW);
  o.layout = ChunkLayout::kOwner;
  o.chunk_size = 100;
  o.max_prefetch = 1;
  ParameterPacking packing;
  packing.parameters = 950;
  packing.largest_tensor = 100;
  packing.num_chunks = 10;
  packing.block_parameters = 350;  // Spans ceil(3.5) = 4 chunks.
  ChunkMemory m = EstimateChunkMemory(o, packing, 2, 1);
  // 5 owned chunks rest; 2p + 3 = 5 in flight, of which 4 are consecutive
  // (2 of them owned) plus the tied weight's: 3 gathered.
  EXPECT_DOUBLE_EQ(m.chunks_at_rest, 2 * 500);
  EXPECT_DOUBLE_EQ(m.in_flight, 2 * 500);
  EXPECT_DOUBLE_EQ(m.reduce_scratch, 2 * 4 * 100);
  EXPECT_DOUBLE_EQ(m.chunks, 2 * 500 + 2 * 300 + 800);

  // Recomputing a block: p + 2 + 4 = 7 in flight, all consecutive, 4 of
  // them another rank's (7 - floor(7 / 2)).
  o.activation_checkpointing.every = 1;
  m = EstimateChunkMemory(o, packing, 2, 1);
  EXPECT_DOUBLE_EQ(m.in_flight, 2 * 700);
  EXPECT_DOUBLE_EQ(m.chunks, 2 * 500 + 2 * 400 + 800);

  // Three ranks: 4 owned rest on the busiest; of 7 consecutive at least 2
  // are this rank's, so 5 are gathered.
  m = EstimateChunkMemory(o, packing, 3, 1);
  EXPECT_DOUBLE_EQ(m.chunks_at_rest, 2 * 400);
  EXPECT_DOUBLE_EQ(m.chunks, 2 * 400 + 2 * 500 + 800);

  // One rank owns everything and gathers nothing.
  m = EstimateChunkMemory(o, packing, 1, 1);
  EXPECT_DOUBLE_EQ(m.chunks, 2 * 1000 + 0 + 800);
}

}  // namespace
}  // namespace chunkzero
