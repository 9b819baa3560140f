#include "tools/train/engine_spec.h"

#include "gtest/gtest.h"
#include "tools/train/train_plan.h"

namespace chunkzero {
namespace {

TrainOptions Small() {
  TrainOptions o;
  o.world_size = 2;
  o.model.layers = 1;
  o.model.d_model = 32;
  o.model.heads = 2;
  o.model.seq_len = 16;
  o.steps = 10;
  return o;
}

TEST(EngineOptionsFromFlags, CarriesWhatTheFlagsDecide) {
  TrainOptions o = Small();
  o.storage = ChunkLayout::kOwner;
  o.precision = DType::kBF16;
  o.optimizer = OptimizerKind::kSgd;
  o.weight_decay = 0.25;
  o.clip = 0.5;
  o.max_prefetch = 3;
  o.comm_timeout_s = 12;
  o.activation_checkpointing.every = 2;
  const EngineOptions e = EngineOptionsFromFlags(o);
  EXPECT_EQ(e.layout, ChunkLayout::kOwner);
  EXPECT_EQ(e.precision, DType::kBF16);
  EXPECT_EQ(e.optimizer.kind, OptimizerKind::kSgd);
  EXPECT_EQ(e.optimizer.weight_decay, 0.25);
  EXPECT_EQ(e.optimizer.max_grad_norm, 0.5);
  EXPECT_EQ(e.max_prefetch, 3);
  EXPECT_EQ(e.comm_timeout, absl::Seconds(12));
  EXPECT_EQ(e.activation_checkpointing.every, 2);
  o.weight_decay = -1;  // PyTorch's default: left to the optimizer.
  EXPECT_FALSE(EngineOptionsFromFlags(o).optimizer.weight_decay.has_value());
}

TEST(EngineOptionsForRun, ThePlanGivesChunksOrderAndSchedule) {
  const absl::StatusOr<TrainPlan> plan = PlanTraining(Small());
  ASSERT_TRUE(plan.ok()) << plan.status();
  const absl::StatusOr<EngineOptions> e =
      EngineOptionsForRun(*plan, Device::Simulated(0));
  ASSERT_TRUE(e.ok()) << e.status();
  // Nothing offloaded or capped: the chunks compute on the host.
  EXPECT_EQ(e->device, Device::Cpu());
  EXPECT_EQ(e->chunk_size, plan->chunk_size);
  EXPECT_EQ(e->first_use_order, plan->order);
  EXPECT_FALSE(e->first_use_order.empty());
  // Warm-up then cosine: step 1 of 5 warm-up steps runs at lr / 5.
  EXPECT_DOUBLE_EQ(e->optimizer.lr.At(0), plan->options.lr / 5);
}

TEST(EngineOptionsForRun, OffloadAndCapsComputeOnTheRanksDevice) {
  TrainOptions o = Small();
  o.offload = OffloadPolicy::kOptimizer;
  o.param_order = ParamOrder::kRecord;
  absl::StatusOr<TrainPlan> plan = PlanTraining(o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<EngineOptions> e =
      EngineOptionsForRun(*plan, Device::Simulated(0));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->device, Device::Simulated(0));
  EXPECT_EQ(e->offload, OffloadPolicy::kOptimizer);
  EXPECT_TRUE(e->first_use_order.empty());  // Recorded in step 1.

  // An auto the limit leaves no room in runs as params.
  plan->options.offload = OffloadPolicy::kAuto;
  plan->auto_rests_on_host = true;
  e = EngineOptionsForRun(*plan, Device::Simulated(0));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->offload, OffloadPolicy::kParams);
  plan->auto_rests_on_host = false;
  EXPECT_EQ(EngineOptionsForRun(*plan, Device::Simulated(0))->offload,
            OffloadPolicy::kAuto);
}

TEST(EngineOptionsForRun, AScheduleTheOptimizerRefusesIsAnError) {
  absl::StatusOr<TrainPlan> plan = PlanTraining(Small());
  ASSERT_TRUE(plan.ok()) << plan.status();
  plan->options.lr = -1;
  EXPECT_EQ(EngineOptionsForRun(*plan, Device::Cpu()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The engine names its options; the train job names its flags.
TEST(EngineErrorInFlags, TranslatesEveryFieldToItsFlag) {
  const absl::Status engine(
      absl::StatusCode::kNotFound,
      "cannot open /x: No such file; EngineOptions::nvme_path; "
      "EngineOptions::device_memory_limit caps the compute device, but "
      "EngineOptions::device is the host; EngineOptions::nvme_io, "
      "EngineOptions::activation_checkpointing.every is -1, "
      "EngineOptions::comm_timeout");
  const absl::Status flags = EngineErrorInFlags(engine);
  EXPECT_EQ(flags.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(flags.message(),
            "cannot open /x: No such file; --nvme_path; --device_memory_limit "
            "caps the compute device, but --device is the host; --nvme_io, "
            "--activation_checkpointing is -1, --comm_timeout_s");
  EXPECT_TRUE(EngineErrorInFlags(absl::OkStatus()).ok());
}

}  // namespace
}  // namespace chunkzero
