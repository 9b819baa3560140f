// The train job with --activation_checkpointing: the same losses, bit for
// bit, as keeping the activations (every layout, precision, offload mode,
// with accumulation, a recorded order and across a resume); each
// checkpointed block's chunks materialised once more and no more bytes
// gathered; and the cap that refuses the plain run trains the
// checkpointed one in every step.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/train/train_flags.h"
#include "tools/train/trainer.h"

namespace chunkzero {
namespace {

using ::testing::HasSubstr;

// Three blocks, so that every:2 mixes checkpointed and kept blocks.
TrainOptions ThreeBlocks() {
  TrainOptions o;
  o.model.layers = 3;
  o.model.d_model = 32;
  o.model.heads = 2;
  o.model.seq_len = 16;
  o.model.vocab = 256;
  o.world_size = 2;
  o.batch = 2;
  o.steps = 3;
  o.warmup = 1;
  o.chunk_size = 8192;
  return o;
}

TrainOptions With(TrainOptions o, const std::string& checkpointing) {
  o.activation_checkpointing = *ParseActivationCheckpointingFlag(checkpointing);
  return o;
}

TrainResult Train(const TrainOptions& options) {
  absl::StatusOr<TrainResult> result = RunTraining(options, nullptr);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *std::move(result) : TrainResult();
}

// Every step's loss and grad norm, the same bits.
void ExpectSameRun(const TrainResult& got, const TrainResult& want) {
  ASSERT_EQ(got.steps.size(), want.steps.size());
  ASSERT_FALSE(want.steps.empty());
  for (size_t i = 0; i < want.steps.size(); ++i) {
    EXPECT_EQ(got.steps[i].loss, want.steps[i].loss) << "step " << i + 1;
    EXPECT_EQ(got.steps[i].grad_norm, want.steps[i].grad_norm)
        << "step " << i + 1;
    EXPECT_EQ(got.steps[i].skipped, want.steps[i].skipped);
  }
}

void ExpectCheckpointingChangesNothing(const TrainOptions& o) {
  const TrainResult plain = Train(o);
  for (const char* ac : {"layers", "every:2"}) {
    SCOPED_TRACE(ac);
    ExpectSameRun(Train(With(o, ac)), plain);
  }
}

TEST(ActivationCheckpointingTest, SameLossesInEveryLayoutAndPrecision) {
  for (const char* storage : {"replicated", "owner", "sharded"}) {
    for (const char* precision : {"fp32", "fp16", "bf16"}) {
      SCOPED_TRACE(absl::StrCat(storage, " ", precision));
      TrainOptions o = ThreeBlocks();
      o.storage = *ParseStorageFlag(storage);
      o.precision = *ParsePrecisionFlag(precision);
      ExpectCheckpointingChangesNothing(o);
    }
  }
}

TEST(ActivationCheckpointingTest, SameLossesOffloadedAccumulatedAndRecorded) {
  for (const char* offload : {"optimizer", "params", "auto"}) {
    SCOPED_TRACE(offload);
    TrainOptions o = ThreeBlocks();
    o.offload = *ParseOffloadFlag(offload);
    ExpectCheckpointingChangesNothing(o);
  }
  {
    SCOPED_TRACE("grad_accum 2");
    TrainOptions o = ThreeBlocks();
    o.grad_accum = 2;
    ExpectCheckpointingChangesNothing(o);
  }
  {
    SCOPED_TRACE("param_order record");
    TrainOptions o = ThreeBlocks();
    o.param_order = ParamOrder::kRecord;
    ExpectCheckpointingChangesNothing(o);
  }
}

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/ac_", name);
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(ActivationCheckpointingTest, ResumedCheckpointedRunEqualsPlainRun) {
  TrainOptions o = ThreeBlocks();
  o.steps = 4;
  const TrainResult plain = Train(o);
  // Two checkpointed steps saved, then resumed (checkpointed) to four.
  TrainOptions first = With(o, "layers");
  first.steps = 2;
  first.save = TestDir("resume");
  ASSERT_EQ(Train(first).steps.size(), 2u);
  TrainOptions rest = With(o, "layers");
  rest.resume = first.save;
  const TrainResult resumed = Train(rest);
  ASSERT_EQ(resumed.steps.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(resumed.steps[i].loss, plain.steps[2 + i].loss);
    EXPECT_EQ(resumed.steps[i].grad_norm, plain.steps[2 + i].grad_norm);
  }
}

int64_t AllGatherBytes(const StepMetrics& m) {
  const auto it = m.ranks[0].comm_bytes.find("all_gather");
  return it == m.ranks[0].comm_bytes.end() ? 0 : it->second;
}

// One chunk per tensor: a block's 12 tensors are 12 chunks. The recomputed
// forward materialises each checkpointed block's chunks again and its
// backward uses them as they are, so from step 2 (which follows step 1's
// schedule) a step gathers what the plain run gathers, less one gather of
// the tied wte: the schedule knows the output layer's backward comes right
// after its forward and keeps the chunk, where the plain rules release it.
TEST(ActivationCheckpointingTest, RecomputeMaterialisesEachBlockOnceMore) {
  TrainOptions o = ThreeBlocks();
  o.chunk_size = 0;
  o.storage = ChunkLayout::kSharded;
  const TrainResult plain = Train(o);
  // wte: 256 x 32 f16 elements, half of them gathered from the other rank.
  const int64_t wte_gather = 256 * 32 * 2 / 2;
  for (const auto& [ac, blocks] : std::vector<std::pair<std::string, int>>{
           {"layers", 3}, {"every:2", 2}}) {
    SCOPED_TRACE(ac);
    const TrainResult r = Train(With(o, ac));
    ASSERT_EQ(r.steps.size(), 3u);
    for (size_t i = 0; i < r.steps.size(); ++i) {
      EXPECT_EQ(r.steps[i].recompute_accesses, 12 * blocks) << "step " << i;
      EXPECT_EQ(plain.steps[i].recompute_accesses, 0);
    }
    for (size_t i = 1; i < r.steps.size(); ++i) {
      EXPECT_EQ(AllGatherBytes(r.steps[i]),
                AllGatherBytes(plain.steps[i]) - wte_gather)
          << "step " << i + 1;
    }
  }
}

TEST(ActivationCheckpointingTest, ReportsActivationBytesKeptAndRecomputed) {
  TrainOptions o = ThreeBlocks();
  o.steps = 1;
  const StepMetrics plain = Train(o).steps.at(0);
  const StepMetrics layers = Train(With(o, "layers")).steps.at(0);
  EXPECT_EQ(plain.activation_recomputed_bytes, 0);
  EXPECT_GT(layers.activation_recomputed_bytes, 0);
  // What is recomputed is what is no longer kept (the buffer it is
  // recomputed into is working memory, counted in neither).
  EXPECT_EQ(layers.activation_kept_bytes + layers.activation_recomputed_bytes,
            plain.activation_kept_bytes);
  EXPECT_LT(layers.activation_kept_bytes, plain.activation_kept_bytes / 2);
}

// A cap of 0.6 x the plain run's device peak: the plain run is refused
// before step 1 (advised to recompute), the checkpointed one trains under
// it in every step.
TEST(ActivationCheckpointingTest, CapThatRefusesThePlainRunTrainsCheckpointed) {
  TrainOptions o = ThreeBlocks();
  o.model.layers = 4;
  o.model.seq_len = 128;
  o.steps = 2;
  o.device_memory_limit = int64_t{1} << 30;
  int64_t plain_peak = 0;
  for (const StepMetrics& m : Train(o).steps) {
    for (const RankStepMetrics& r : m.ranks) {
      plain_peak = std::max(plain_peak, r.peak_device_bytes);
    }
  }
  ASSERT_GT(plain_peak, 0);
  o.device_memory_limit = plain_peak * 6 / 10;
  absl::StatusOr<TrainResult> refused = RunTraining(o, nullptr);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("try --activation_checkpointing=layers"));
  const TrainResult capped = Train(With(o, "layers"));
  ASSERT_EQ(capped.steps.size(), 2u);
  for (const StepMetrics& m : capped.steps) {
    for (const RankStepMetrics& r : m.ranks) {
      EXPECT_GT(r.peak_device_bytes, 0);
      EXPECT_LE(r.peak_device_bytes, o.device_memory_limit)
          << "step " << m.step;
    }
  }
}

}  // namespace
}  // namespace chunkzero
