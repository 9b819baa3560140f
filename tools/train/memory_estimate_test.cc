#include "tools/train/memory_estimate.h"

#include <cmath>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/system_memory.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

// L 1, C 8, NH 2, V 16, P = T = 4, B 2, 2 ranks as threads, f16 AdamW,
// one chunk per tensor. Psi = V C + P C + (12 C^2 + 13 C) + 2 C = 128 + 32 +
// 872 + 16 = 1048; the largest tensor has 4 C^2 = 256 elements.
TrainMemoryInput Small() {
  TrainMemoryInput in;
  in.model.layers = 1;
  in.model.d_model = 8;
  in.model.heads = 2;
  in.model.vocab = 16;
  in.model.seq_len = 4;
  in.seq_len = 4;
  in.batch = 2;
  in.world_size = 2;
  in.ranks_in_process = 2;
  in.dtype = DType::kF16;
  in.layout = ChunkLayout::kSharded;
  in.optimizer = OptimizerKind::kAdamW;
  in.chunk_size = 0;
  in.max_prefetch = 1;
  in.data_bytes = 100;
  return in;
}

TEST(EstimateTrainMemory, ShardedFiguresWorkedOutByHand) {
  absl::StatusOr<TrainMemoryEstimate> e = EstimateTrainMemory(Small());
  ASSERT_TRUE(e.ok()) << e.status();
  // The largest parameter, c_fc's weight of 256 elements, made, its f32
  // master and its compute copy: 12 bytes an element.
  EXPECT_EQ(e->model_init, 12 * 256);
  // Shard 2 * 1048 / 2, in flight min(1048, (2 * 1 + 3) * 256) * 2 (every
  // chunk), reduce buffers 2 * 4 * 256.
  EXPECT_EQ(e->chunks, 1048 + 2096 + 2048);
  EXPECT_EQ(e->in_flight, 2096);
  EXPECT_EQ(e->in_flight_shards, 2096 / 2);  // Their shards, 2 ranks.
  EXPECT_EQ(e->optimizer, 12 * 524);  // Master 4 + exp_avg 4 + exp_avg_sq 4.
  // Floats: block 16 N C + 4 N + B NH T^2 = 1024 + 32 + 64; embeddings and
  // ln_f 2 N C + 2 N = 144; probabilities N V = 128; backward 2 N C + one
  // thread's attention block T^2 + 3 T C / NH = 128 + 64; grad and widen
  // buffers, c_fc's weight and bias, 2 * 288; the tied wte's f32 grad
  // V C = 128. Plus 2 N int32 ids and N f64 row losses.
  EXPECT_EQ(e->activations,
            4 * (1120 + 144 + 128 + 192 + 576 + 128) + 4 * 16 + 8 * 8);
  EXPECT_EQ(e->data, 100 + 400);  // The bytes and their int32 ids.
  EXPECT_EQ(e->per_rank(), 3072 + 5192 + 6288 + 9280);
  EXPECT_EQ(e->total(), 2 * 23832 + 500);
  EXPECT_EQ(e->LargestPartFlags(),
            "--batch, --seq_len, --vocab, --d_model, --layers");
}

// On a GPU the backward keeps its own dqkv and datty (4 N C) and the
// attention's B NH T^2 = 64 floats; the fused attention keeps B NH T = 16
// floats per block, and as many for the backward.
TEST(EstimateTrainMemory, TheFusedAttentionKeepsARowPerQuery) {
  TrainMemoryInput in = Small();
  in.gpu = true;
  absl::StatusOr<TrainMemoryEstimate> e = EstimateTrainMemory(in);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->activations,
            4 * (1120 + 144 + 128 + (128 + 256 + 64) + 576 + 128) + 128);
  in.fused_attention = true;
  e = EstimateTrainMemory(in);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->activations,
            4 * (1120 - 48 + 144 + 128 + (128 + 256 + 16) + 576 + 128) + 128);
}

// Each thread of a rank keeps one attention block (T^2 + 3 T C / NH = 64
// floats), for at most B NH = 4 heads at once.
TEST(EstimateTrainMemory, TheCpuAttentionKeepsABlockPerThread) {
  TrainMemoryInput in = Small();
  absl::StatusOr<TrainMemoryEstimate> one = EstimateTrainMemory(in);
  ASSERT_TRUE(one.ok());
  in.threads_per_rank = 3;
  absl::StatusOr<TrainMemoryEstimate> three = EstimateTrainMemory(in);
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(three->activations - one->activations, 4 * 2 * 64);
  in.threads_per_rank = 64;
  absl::StatusOr<TrainMemoryEstimate> many = EstimateTrainMemory(in);
  ASSERT_TRUE(many.ok());
  EXPECT_EQ(many->activations - one->activations, 4 * 3 * 64);
}

// A checkpointed block keeps its output (N C = 64 floats); its other
// activations, 15 N C + 4 N + B NH T^2 = 960 + 32 + 64 floats, live in the
// one slot the checkpointed blocks share.
TEST(EstimateTrainMemory, CheckpointedBlocksShareOneActivationSlot) {
  TrainMemoryInput in = Small();
  in.model.layers = 3;
  const double none = EstimateTrainMemory(in)->activations;
  in.activation_checkpointing.every = 1;  // 3 blocks, 1 slot.
  EXPECT_EQ(EstimateTrainMemory(in)->activations, none - 4 * 2 * 1056);
  in.activation_checkpointing.every = 2;  // Blocks 0 and 2 share a slot.
  EXPECT_EQ(EstimateTrainMemory(in)->activations, none - 4 * 1 * 1056);
  in.activation_checkpointing.every = 5;  // Block 0 alone: its own slot.
  EXPECT_EQ(EstimateTrainMemory(in)->activations, none);
}

TEST(EstimateTrainMemory, ReplicatedHoldsEverythingOnEveryRank) {
  TrainMemoryInput in = Small();
  in.layout = ChunkLayout::kReplicated;
  in.optimizer = OptimizerKind::kSgd;  // The train job's SGD keeps no state.
  in.grad_accum = 2;                   // An f32 accumulation buffer.
  absl::StatusOr<TrainMemoryEstimate> e = EstimateTrainMemory(in);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->chunks, 2 * 1048);
  // Brought to the device only when the parameters rest on the host; no
  // shards.
  EXPECT_EQ(e->in_flight, 2096);
  EXPECT_EQ(e->in_flight_shards, 0);
  EXPECT_EQ(e->optimizer, (4 + 4) * 1048);
}

// A size still to be searched counts as the smallest candidate, the
// largest tensor, plus one chunk of padding: 1048 + 256 elements.
TEST(EstimateTrainMemory, AnUnsearchedSizeCountsTheLargestTensor) {
  TrainMemoryInput in = Small();
  in.chunk_size = -1;
  absl::StatusOr<TrainMemoryEstimate> e = EstimateTrainMemory(in);
  ASSERT_TRUE(e.ok());
  // In flight: min(1304, 5 * 256) * 2.
  EXPECT_EQ(e->chunks, 1304 + 2560 + 2048);
  EXPECT_EQ(e->optimizer, 12 * 652);
}

// At most 2 max_prefetch + 3 chunks are gathered at once (the peak the
// train job measures: hardening_test's TheDeviceEstimateIsNeverBelowThePeak),
// never more than the packing has; a known packing counts its own padding,
// which can pass one chunk by far.
TEST(EstimateTrainMemory, InFlightFollowsThePrefetchAndThePacking) {
  TrainMemoryInput in = Small();
  in.model.layers = 20;  // Psi = 128 + 32 + 20 * 872 + 16 = 17616.
  in.chunk_size = 300;
  for (int prefetch : {0, 1, 3, 6}) {
    SCOPED_TRACE(prefetch);
    in.max_prefetch = prefetch;
    absl::StatusOr<TrainMemoryEstimate> e = EstimateTrainMemory(in);
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->in_flight, (2 * prefetch + 3) * 300 * 2);
  }
  in.max_prefetch = 1;
  in.num_chunks = 90;  // 27000 elements allocated for 17616 used.
  absl::StatusOr<TrainMemoryEstimate> packed = EstimateTrainMemory(in);
  ASSERT_TRUE(packed.ok());
  EXPECT_EQ(packed->chunks_at_rest, 2 * 27000 / 2);
  EXPECT_EQ(packed->optimizer, 12 * 27000 / 2);
  in.num_chunks = 2;  // Fewer chunks than the prefetch reaches.
  packed = EstimateTrainMemory(in);
  ASSERT_TRUE(packed.ok());
  EXPECT_EQ(packed->in_flight, 2 * 300 * 2);
  in.num_chunks = -1;
  EXPECT_EQ(EstimateTrainMemory(in).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(EstimateTrainMemory, AHugeChunkSizeIsCountedNotOverflowed) {
  TrainMemoryInput in = Small();
  in.chunk_size = 9223372036854775807;
  absl::StatusOr<TrainMemoryEstimate> e = EstimateTrainMemory(in);
  ASSERT_TRUE(e.ok());
  EXPECT_GT(e->chunks, 1e18);
  EXPECT_TRUE(std::isfinite(e->total()));
  EXPECT_EQ(e->LargestPartFlags(),
            "--chunk_size, --storage, --vocab, --d_model, --layers");
}

TEST(EstimateTrainMemory, HugeShapesAreFiniteNumbers) {
  TrainMemoryInput in = Small();
  in.model.vocab = 2000000000;
  absl::StatusOr<TrainMemoryEstimate> e = EstimateTrainMemory(in);
  ASSERT_TRUE(e.ok());
  EXPECT_GT(e->total(), 1e11);
  EXPECT_TRUE(std::isfinite(e->total()));
}

TEST(EstimateTrainMemory, SizesTheKernelsCannotIndexAreInvalidArgument) {
  TrainMemoryInput rows = Small();
  rows.batch = 2000000000;
  rows.seq_len = rows.model.seq_len = 2;
  absl::Status status = EstimateTrainMemory(rows).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(status.message(), "--batch x --seq_len: rows"))
      << status;
  TrainMemoryInput wide = Small();
  wide.model.d_model = 2000000000;
  status = EstimateTrainMemory(wide).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(status.message(), "--d_model: 4 x d_model"))
      << status;
  TrainMemoryInput zero = Small();
  zero.batch = 0;
  EXPECT_EQ(EstimateTrainMemory(zero).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TrainMemoryEstimate, DescribeNamesEveryPart) {
  absl::StatusOr<TrainMemoryEstimate> e = EstimateTrainMemory(Small());
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->Describe(),
            "2 ranks x 23.27 KiB (model init 3.00 KiB, chunks 5.07 KiB, "
            "optimizer 6.14 KiB, activations 9.06 KiB) + data 500 B = "
            "47.04 KiB");
}

// On a GPU the host keeps the initial weights and the reduce scratch, plus
// what each offload policy sends there and the pinned staging copies.
TEST(TrainMemoryEstimate, HostBytesCountOnlyWhatLivesOnTheHost) {
  absl::StatusOr<TrainMemoryEstimate> e = EstimateTrainMemory(Small());
  ASSERT_TRUE(e.ok());
  const double base = e->model_init + e->reduce_scratch;
  EXPECT_EQ(e->HostBytesPerRank(OffloadPolicy::kNone, false), base);
  EXPECT_EQ(e->HostBytesPerRank(OffloadPolicy::kNone, true),
            base + e->in_flight);
  EXPECT_EQ(e->HostBytesPerRank(OffloadPolicy::kOptimizer, false),
            base + e->optimizer);
  for (const OffloadPolicy rests :
       {OffloadPolicy::kParams, OffloadPolicy::kAuto}) {
    EXPECT_EQ(e->HostBytesPerRank(rests, true),
              base + e->optimizer + e->chunks_at_rest + e->in_flight);
  }
  EXPECT_EQ(e->HostTotal(OffloadPolicy::kNone, false), 2 * base + e->data);
  EXPECT_LT(e->HostTotal(OffloadPolicy::kParams, true), e->total());
  EXPECT_EQ(e->DescribeHost(OffloadPolicy::kOptimizer, true),
            absl::StrCat(
                "2 ranks x ", FormatBytes(base + e->optimizer + e->in_flight),
                " on the host (model init 3.00 KiB, reduce scratch ",
                FormatBytes(e->reduce_scratch),
                ", offloaded optimizer 6.14 KiB, pinned staging ",
                FormatBytes(e->in_flight), ") + data 500 B = ",
                FormatBytes(e->HostTotal(OffloadPolicy::kOptimizer, true))));
}

}  // namespace
}  // namespace chunkzero
