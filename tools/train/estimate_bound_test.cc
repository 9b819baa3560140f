// The device estimate the planner refuses layouts with is an upper bound of
// what the train job then holds, and a tight one: never below the measured
// device peak (a run capped at its estimate fits), never above 1.15 x it
// (a cap the run fits is not refused), across the layouts, precisions,
// offload modes, activation checkpointing and prefetch depths.
// (--offload=auto is left out: its chunks rest on the device while there
// is room, so its peak is whatever the cap allows, and hardening_test
// checks that it accepts every cap --offload=params accepts.)
#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tools/train/train_flags.h"
#include "tools/train/train_plan.h"
#include "tools/train/trainer.h"

namespace chunkzero {
namespace {

// Three shapes where different parts dominate: activations (long context),
// parameters and optimizer states (wide, short context), and many small
// chunks per block.
std::vector<TrainOptions> Shapes() {
  TrainOptions base;
  base.world_size = 2;
  base.steps = 2;
  base.warmup = 0;
  base.device_memory_limit = int64_t{1} << 40;
  std::vector<TrainOptions> shapes(3, base);
  shapes[0].model = {/*layers=*/2, /*d_model=*/64, /*heads=*/4,
                     /*seq_len=*/64, /*vocab=*/512};
  shapes[0].batch = 2;
  shapes[1].model = {3, 128, 4, 16, 256};
  shapes[1].batch = 1;
  shapes[2].model = {4, 64, 4, 16, 256};
  shapes[2].batch = 1;
  shapes[2].chunk_size = 16384;
  return shapes;
}

void ExpectTight(const TrainOptions& o) {
  absl::StatusOr<TrainPlan> plan = PlanTraining(o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const double estimate = DeviceMemoryNeeded(plan->memory, o.offload);
  absl::StatusOr<TrainResult> r = RunTraining(o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  const double peak = static_cast<double>(DevicePeak(*r));
  ASSERT_GT(peak, 0);
  EXPECT_GE(estimate, peak);
  EXPECT_LE(estimate, 1.15 * peak);
}

TEST(EstimateBound, EveryLayoutPrecisionOffloadAndCheckpointing) {
  int shape_index = 0;
  for (const TrainOptions& shape : Shapes()) {
    int variant = 0;
    for (ChunkLayout layout : {ChunkLayout::kReplicated, ChunkLayout::kSharded,
                               ChunkLayout::kOwner}) {
      for (OffloadPolicy offload :
           {OffloadPolicy::kNone, OffloadPolicy::kOptimizer,
            OffloadPolicy::kParams}) {
        for (int every : {0, 1, 2}) {
          TrainOptions o = shape;
          o.storage = layout;
          o.offload = offload;
          o.activation_checkpointing.every = every;
          // The precisions in turn, so that each meets every other choice.
          const DType dtypes[] = {DType::kF16, DType::kBF16, DType::kF32};
          o.precision = dtypes[variant++ % 3];
          SCOPED_TRACE(absl::StrCat("shape ", shape_index, " ",
                                    ChunkLayoutName(layout), " ",
                                    OffloadFlagValue(offload), " every ", every,
                                    " ", DTypeName(o.precision)));
          ExpectTight(o);
        }
      }
    }
    ++shape_index;
  }
}

// Sharded chunks offloaded (every chunk in flight comes to the device), and
// owned chunks resting on the device (only the others' are gathered).
TEST(EstimateBound, EveryPrefetchDepthWithRecomputation) {
  const struct {
    ChunkLayout layout;
    OffloadPolicy offload;
  } placements[] = {{ChunkLayout::kSharded, OffloadPolicy::kParams},
                    {ChunkLayout::kOwner, OffloadPolicy::kOptimizer}};
  for (const TrainOptions& shape : Shapes()) {
    for (const auto& placement : placements) {
      for (int prefetch : {0, 1, 2, 4}) {
        for (int every : {0, 1}) {
          TrainOptions o = shape;
          o.storage = placement.layout;
          o.offload = placement.offload;
          o.max_prefetch = prefetch;
          o.activation_checkpointing.every = every;
          SCOPED_TRACE(absl::StrCat("d_model ", o.model.d_model, " ",
                                    ChunkLayoutName(o.storage), " ",
                                    OffloadFlagValue(o.offload), " prefetch ",
                                    prefetch, " every ", every));
          ExpectTight(o);
        }
      }
    }
  }
}

}  // namespace
}  // namespace chunkzero
