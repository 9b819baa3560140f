// PlanTraining's memory checks for a GPU job, against fake GPUs: the host
// holds only what lives there, and each GPU's free memory is shared by the
// ranks placed on it.
#include "tools/train/train_plan.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/system_memory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr int64_t kGiB = int64_t{1} << 30;

// GPUs with the given free bytes each; `asked` records the indices asked.
GpuMemoryProbe FakeGpus(std::vector<int64_t> free_bytes,
                        std::vector<int>* asked = nullptr) {
  return {[free_bytes] { return static_cast<int>(free_bytes.size()); },
          [free_bytes, asked](int device) -> absl::StatusOr<int64_t> {
            if (asked != nullptr) asked->push_back(device);
            return free_bytes.at(device);
          }};
}

// GPT-2 124M in bf16 at batch 8, context 1024: ~15.7 GB by the CPU's count,
// almost all of it activations, which live on the GPU.
TrainOptions Gpt2Small() {
  TrainOptions o;
  o.model.layers = 12;
  o.model.d_model = 768;
  o.model.heads = 12;
  o.model.seq_len = 1024;
  o.model.vocab = 50257;
  o.precision = DType::kBF16;
  o.batch = 8;
  o.world_size = 1;
  o.device = ComputeDevice::kCuda;
  o.memory_limit_bytes = 4 * kGiB;  // A GPU machine's small, growing RAM.
  return o;
}

TEST(PlanTrainingOnGpus, TheHostHoldsOnlyWhatLivesThere) {
  TrainOptions o = Gpt2Small();
  std::vector<int> asked;
  absl::StatusOr<TrainPlan> plan =
      PlanTraining(o, FakeGpus({140 * kGiB}, &asked));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(asked, std::vector<int>{0});
  // The CPU count is far over the host's 4 GiB, the host's share under it.
  EXPECT_GT(plan->memory.total(), 3.0 * o.memory_limit_bytes);
  EXPECT_LT(plan->memory.HostTotal(o.offload, /*staged=*/true),
            static_cast<double>(o.memory_limit_bytes));
  // The same job on the CPU is refused, counting everything.
  o.device = ComputeDevice::kCpu;
  absl::StatusOr<TrainPlan> cpu = PlanTraining(o, FakeGpus({140 * kGiB}));
  EXPECT_EQ(cpu.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(cpu.status().message()),
              StartsWith("this job needs about "));
  EXPECT_THAT(std::string(cpu.status().message()), HasSubstr(" of memory ("));
}

// The plan printed before step 1: what a rank holds on its GPU and in
// host memory, the same figures the checks used; a CPU job has one line.
TEST(PlanTrainingOnGpus, ThePlanNamesTheDeviceAndTheHostBytes) {
  TrainOptions o = Gpt2Small();
  o.offload = OffloadPolicy::kOptimizer;
  absl::StatusOr<TrainPlan> plan = PlanTraining(o, FakeGpus({140 * kGiB}));
  ASSERT_TRUE(plan.ok()) << plan.status();
  const TrainMemoryEstimate& e = plan->memory;
  EXPECT_EQ(
      FormatPlan(*plan),
      absl::StrCat(
          "plan (what each rank will hold, estimated):\n  device: ",
          FormatBytes(DeviceMemoryNeeded(e, OffloadPolicy::kOptimizer)),
          " per rank on its GPU (chunks ",
          FormatBytes(e.chunks - e.reduce_scratch), ", activations ",
          FormatBytes(e.activations), ")\n  host: ",
          e.DescribeHost(OffloadPolicy::kOptimizer, /*staged=*/true), "\n"));
  // Only the host's share: no activations there.
  EXPECT_THAT(e.DescribeHost(OffloadPolicy::kOptimizer, true),
              Not(HasSubstr("activations")));

  o.device = ComputeDevice::kCpu;
  o.memory_limit_bytes = 0;
  o.batch = 1;
  o.model.seq_len = 64;
  plan = PlanTraining(o, FakeGpus({}));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(
      FormatPlan(*plan),
      absl::StrCat("plan (what each rank will hold, estimated):\n  host: ",
                   plan->memory.Describe(), "\n"));
}

TEST(PlanTrainingOnGpus, AHostTooSmallForItsShareIsRefusedNamingThatShare) {
  TrainOptions o = Gpt2Small();
  o.offload = OffloadPolicy::kOptimizer;
  o.memory_limit_bytes = kGiB;  // The offloaded optimizer alone is more.
  absl::StatusOr<TrainPlan> plan = PlanTraining(o, FakeGpus({140 * kGiB}));
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string message(plan.status().message());
  EXPECT_THAT(message, HasSubstr(" of host memory (1 rank x "));
  EXPECT_THAT(message, HasSubstr(" on the host (model init "));
  EXPECT_THAT(message, HasSubstr(", offloaded optimizer "));
  EXPECT_THAT(message, HasSubstr(", pinned staging "));
  EXPECT_THAT(message, HasSubstr("but 1.00 GiB is its limit"));
}

TEST(PlanTrainingOnGpus, AGpuTooSmallIsRefusedWithAdvice) {
  TrainOptions o = Gpt2Small();
  o.batch = 1;
  // Find what one rank needs on the GPU, then offer a little less.
  absl::StatusOr<TrainPlan> roomy = PlanTraining(o, FakeGpus({140 * kGiB}));
  ASSERT_TRUE(roomy.ok()) << roomy.status();
  const double need = DeviceMemoryNeeded(roomy->memory, o.offload);
  const double optimizer_offloaded =
      DeviceMemoryNeeded(roomy->memory, OffloadPolicy::kOptimizer);
  ASSERT_LT(optimizer_offloaded, need);
  const int64_t free_bytes =
      static_cast<int64_t>((need + optimizer_offloaded) / 2);
  absl::StatusOr<TrainPlan> plan = PlanTraining(o, FakeGpus({free_bytes}));
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string message(plan.status().message());
  EXPECT_THAT(message, StartsWith("--storage=sharded --offload=none needs "
                                  "about "));
  EXPECT_THAT(message, HasSubstr(" per rank on cuda:0 (chunks "));
  EXPECT_THAT(message,
              HasSubstr(absl::StrCat(
                  "but cuda:0 has ",
                  FormatBytes(static_cast<double>(free_bytes)), " free; ")));
  EXPECT_THAT(message, EndsWith("; try --offload=optimizer"));
  // The advice fits.
  o.offload = OffloadPolicy::kOptimizer;
  EXPECT_TRUE(PlanTraining(o, FakeGpus({free_bytes})).ok());
}

// Ranks as threads go to cuda:(r mod GPUs): two ranks on one GPU share it,
// and a second GPU gives each its own.
TEST(PlanTrainingOnGpus, RanksSharingAGpuShareItsFreeMemory) {
  TrainOptions o = Gpt2Small();
  o.batch = 1;
  o.world_size = 2;
  absl::StatusOr<TrainPlan> roomy = PlanTraining(o, FakeGpus({140 * kGiB}));
  ASSERT_TRUE(roomy.ok()) << roomy.status();
  const double need = DeviceMemoryNeeded(roomy->memory, o.offload);
  const int64_t one_and_a_half = static_cast<int64_t>(1.5 * need);
  absl::StatusOr<TrainPlan> shared =
      PlanTraining(o, FakeGpus({one_and_a_half}));
  EXPECT_EQ(shared.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(
      std::string(shared.status().message()),
      HasSubstr(absl::StrCat(
          "but cuda:0 has ", FormatBytes(static_cast<double>(one_and_a_half)),
          " free for its 2 ranks (",
          FormatBytes(static_cast<double>(one_and_a_half) / 2), " each)")));
  std::vector<int> asked;
  EXPECT_TRUE(
      PlanTraining(o, FakeGpus({one_and_a_half, one_and_a_half}, &asked)).ok());
  EXPECT_EQ(asked, (std::vector<int>{0, 1}));
  // The tighter GPU decides: cuda:1 has too little for its one rank.
  absl::StatusOr<TrainPlan> uneven =
      PlanTraining(o, FakeGpus({140 * kGiB, one_and_a_half / 2}));
  EXPECT_THAT(std::string(uneven.status().message()),
              HasSubstr(" per rank on cuda:1 (chunks "));
}

// One rank per process: its GPU is its local rank's.
TEST(PlanTrainingOnGpus, AProcessRankAsksOnlyItsOwnGpu) {
  TrainOptions o = Gpt2Small();
  o.world_size = 4;
  o.rank = 3;
  o.local_rank = 1;
  o.backend = Backend::kGloo;
  o.rendezvous = "/tmp/unused-rendezvous";
  std::vector<int> asked;
  absl::StatusOr<TrainPlan> plan =
      PlanTraining(o, FakeGpus({140 * kGiB, 140 * kGiB}, &asked));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(asked, std::vector<int>{1});
}

// The one placement rule the train job and planning share.
TEST(PlanTrainingOnGpus, ARanksGpuIsItsLocalRankOrElseItsRankModTheGpus) {
  TrainOptions o;
  EXPECT_EQ(GpuIndexOfRank(o, 0, 2), 0);
  EXPECT_EQ(GpuIndexOfRank(o, 5, 2), 1);
  EXPECT_EQ(GpuIndexOfRank(o, 5, 1), 0);
  o.local_rank = 2;
  EXPECT_EQ(GpuIndexOfRank(o, 5, 4), 2);
  EXPECT_EQ(GpuIndexOfRank(o, 5, 2), 0);
}

TEST(PlanTrainingOnGpus, AFlagLimitBelowTheGpuStillBinds) {
  TrainOptions o = Gpt2Small();
  o.batch = 1;
  o.device_memory_limit = 1024;
  absl::StatusOr<TrainPlan> plan = PlanTraining(o, FakeGpus({140 * kGiB}));
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(plan.status().message()),
              HasSubstr("but --device_memory_limit is 1.00 KiB; "));
}

TEST(PlanTrainingOnGpus, NoGpuOrAnUnreadableOneIsAnError) {
  TrainOptions o = Gpt2Small();
  absl::StatusOr<TrainPlan> none = PlanTraining(o, FakeGpus({}));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(none.status().message()),
              StartsWith("--device=cuda: no GPU is visible"));
  GpuMemoryProbe broken = {
      [] { return 1; },
      [](int) -> absl::StatusOr<int64_t> {
        return absl::InternalError("cudaMemGetInfo: an illegal memory access");
      }};
  absl::StatusOr<TrainPlan> unreadable = PlanTraining(o, broken);
  EXPECT_EQ(unreadable.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(unreadable.status().message(),
            "--device=cuda: the free memory of cuda:0: cudaMemGetInfo: an "
            "illegal memory access");
}

}  // namespace
}  // namespace chunkzero
