#include "engine/engine.h"

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "base/mutex.h"
#include "base/status_macros.h"
#include "comm/testing/spawn_ranks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/expect_close.h"
#include "tests/test_models.h"

namespace chunkzero {
namespace {

using ::chunkzero::comm_testing::AllRanksOk;
using ::chunkzero::comm_testing::SpawnRanks;
using ::testing::HasSubstr;

constexpr int kRows = 8;  // Rows of the global batch, split over the ranks.

EngineOptions SmallChunks(DType precision = DType::kF32) {
  EngineOptions options;
  options.chunk_size = 32;  // Several chunks even for these tiny models.
  options.precision = precision;
  options.optimizer.kind = OptimizerKind::kSgd;
  options.optimizer.lr = LrSchedule::Constant(0.1);
  options.comm_timeout = absl::Seconds(30);
  return options;
}

// What a run leaves: every step's metrics and the final weights (rank 0).
struct TrainingRun {
  std::vector<StepMetrics> steps;
  std::map<std::string, std::vector<float>> weights;
};

std::map<std::string, std::vector<float>> ToVectors(
    const std::map<std::string, Tensor>& dict) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, t] : dict) {
    const float* p = t.data<float>();
    out[name] = std::vector<float>(p, p + t.numel());
  }
  return out;
}

// Trains `kind` for `steps` steps on `world` ranks over one global batch
// of kRows rows, split into `micro_batches` micro-batches, each split over
// the ranks.
absl::StatusOr<TrainingRun> Train(TestModelKind kind, int world, int steps,
                                  int micro_batches,
                                  const EngineOptions& options) {
  TrainingRun run;
  Mutex mu;
  const std::vector<absl::Status> statuses =
      SpawnRanks(world, [&](comm::ProcessGroup& group) -> absl::Status {
        std::unique_ptr<TestModel> model = MakeTestModel(kind, /*seed=*/7);
        CZ_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                            Engine::Create(group, *model, options));
        const int per_micro = kRows / micro_batches;
        const int rows = per_micro / world;
        for (int s = 0; s < steps; ++s) {
          // The same global batch every step, so the loss must fall.
          const Batch global = MakeBatch(*model, kRows, /*seed=*/3);
          std::vector<Batch> mine;
          for (int m = 0; m < micro_batches; ++m) {
            const int begin = m * per_micro + group.rank() * rows;
            mine.push_back(SliceBatch(global, begin, begin + rows));
          }
          CZ_ASSIGN_OR_RETURN(
              StepMetrics metrics,
              engine->Step(
                  micro_batches,
                  [&](ParamHooks& hooks, int m) -> absl::StatusOr<double> {
                    return model->Forward(hooks, mine[m], group.rank());
                  },
                  [&](ParamHooks& hooks, int, float) {
                    return model->Backward(hooks);
                  }));
          if (group.rank() == 0) {
            MutexLock lock(&mu);
            run.steps.push_back(metrics);
          }
        }
        CZ_ASSIGN_OR_RETURN(const auto weights, engine->GatherWeights());
        if (group.rank() == 0) {
          MutexLock lock(&mu);
          run.weights = ToVectors(weights);
        }
        return absl::OkStatus();
      });
  for (const absl::Status& s : statuses) CZ_RETURN_IF_ERROR(s);
  return run;
}

void ExpectSameTraining(const TrainingRun& got, const TrainingRun& want,
                        double tol) {
  ASSERT_EQ(got.steps.size(), want.steps.size());
  for (size_t s = 0; s < got.steps.size(); ++s) {
    EXPECT_NEAR(got.steps[s].loss, want.steps[s].loss,
                tol * std::abs(want.steps[s].loss))
        << "step " << s + 1;
    EXPECT_NEAR(got.steps[s].grad_norm, want.steps[s].grad_norm,
                tol * want.steps[s].grad_norm)
        << "step " << s + 1;
  }
  ASSERT_EQ(got.weights.size(), want.weights.size());
  for (const auto& [name, w] : want.weights) {
    ASSERT_EQ(got.weights.count(name), 1u) << name;
    ExpectClose(got.weights.at(name), w, tol, name);
  }
}

class EngineModels : public ::testing::TestWithParam<TestModelKind> {};

// The engine's result does not depend on how many ranks share the batch:
// 2 ranks with half the rows each train as 1 rank with all of them, for a
// plain model and one whose input and output share a weight.
TEST_P(EngineModels, TwoRanksTrainAsOne) {
  const absl::StatusOr<TrainingRun> one =
      Train(GetParam(), 1, 5, 1, SmallChunks());
  const absl::StatusOr<TrainingRun> two =
      Train(GetParam(), 2, 5, 1, SmallChunks());
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_TRUE(two.ok()) << two.status();
  ExpectSameTraining(*two, *one, 1e-5);
  EXPECT_LT(one->steps.back().loss, one->steps.front().loss);
}

// Two micro-batches of 4 rows make the step one micro-batch of 8 does.
TEST_P(EngineModels, AccumulatedMicroBatchesTrainAsOneBatch) {
  const absl::StatusOr<TrainingRun> whole =
      Train(GetParam(), 2, 3, 1, SmallChunks());
  const absl::StatusOr<TrainingRun> split =
      Train(GetParam(), 2, 3, 2, SmallChunks());
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_TRUE(split.ok()) << split.status();
  ExpectSameTraining(*split, *whole, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Kinds, EngineModels,
                         ::testing::Values(TestModelKind::kMlp,
                                           TestModelKind::kTied),
                         [](const auto& info) {
                           return std::string(TestModelName(info.param));
                         });

TEST(Engine, StepReportsEveryRankAndCountsSteps) {
  const absl::StatusOr<TrainingRun> run =
      Train(TestModelKind::kMlp, 2, 2, 1, SmallChunks(DType::kF16));
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->steps.size(), 2u);
  for (int s = 0; s < 2; ++s) {
    const StepMetrics& m = run->steps[s];
    EXPECT_EQ(m.step, s + 1);
    EXPECT_EQ(m.steps, 0);  // The caller's to fill in.
    EXPECT_DOUBLE_EQ(m.lr, 0.1);
    EXPECT_EQ(m.loss_scale, 65536);  // The scaler's initial f16 scale.
    ASSERT_EQ(m.ranks.size(), 2u);
    for (const RankStepMetrics& r : m.ranks) {
      // Sharded chunks: gathered for forward and backward, grads
      // reduce-scattered.
      EXPECT_GT(r.comm_bytes.at("all_gather"), 0);
      EXPECT_GT(r.comm_bytes.at("reduce_scatter"), 0);
      EXPECT_GT(r.peak_bytes.at("param"), 0);
      EXPECT_EQ(r.peak_device_bytes, 0);  // Everything is on the host.
      EXPECT_EQ(r.h2d_bytes, 0);
    }
  }
}

// A host memory limit needs the NVMe tier; negative figures are refused.
// (tools/train's nvme_train_test trains under one.)
TEST(Engine, AHostLimitNeedsTheTier) {
  EngineOptions nvme = SmallChunks(DType::kBF16);
  nvme.offload = OffloadPolicy::kNvme;
  nvme.nvme_path = "/tmp";
  nvme.host_memory_limit = 1 << 20;
  ASSERT_TRUE(PlaceMemory(nvme).ok());
  EXPECT_TRUE(PlaceMemory(nvme)->host_limited);
  EXPECT_TRUE(PlaceMemory(nvme)->chunks.disk_residency);
  EXPECT_EQ(PlaceMemory(nvme)->chunks.disk_lookahead, 2);
  // On the host the parameter chunks rest where they compute; on a device
  // they get three tiers: the host (and disk), and the device as kAuto.
  EXPECT_FALSE(PlaceMemory(nvme)->chunks.rest_device.has_value());
  EXPECT_FALSE(PlaceMemory(nvme)->chunks.auto_residency);
  EngineOptions tiers = nvme;
  tiers.device = Device::Simulated(0);
  ASSERT_TRUE(PlaceMemory(tiers).ok());
  EXPECT_EQ(PlaceMemory(tiers)->chunks.rest_device, Device::Cpu());
  EXPECT_TRUE(PlaceMemory(tiers)->chunks.auto_residency);
  EXPECT_TRUE(PlaceMemory(tiers)->chunks.disk_residency);
  EXPECT_EQ(PlaceMemory(tiers)->masters, Device::Cpu());
  // Without a host limit a device job's parameter chunks stay on it.
  tiers.host_memory_limit = 0;
  EXPECT_FALSE(PlaceMemory(tiers)->chunks.rest_device.has_value());
  EXPECT_FALSE(PlaceMemory(tiers)->chunks.disk_residency);
  // The limit needs the tier; a negative one is refused.
  EngineOptions bad = SmallChunks();
  bad.host_memory_limit = 1 << 20;
  EXPECT_THAT(PlaceMemory(bad).status().message(),
              HasSubstr("host_memory_limit needs EngineOptions::offload "
                        "kNvme"));
  bad = nvme;
  bad.host_memory_limit = -1;
  EXPECT_THAT(PlaceMemory(bad).status().message(),
              HasSubstr("host_memory_limit is -1 bytes"));
  bad = nvme;
  bad.disk_lookahead = -1;
  EXPECT_THAT(PlaceMemory(bad).status().message(),
              HasSubstr("disk_lookahead is -1"));
}

// A run saved after 2 steps and resumed for 2 more has the losses of a
// run of 4, bit for bit; a config that disagrees is refused naming the key.
TEST(Engine, SaveAndResumeContinueBitForBit) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/engine_ckpt");
  const EngineOptions options = SmallChunks(DType::kF16);
  const absl::StatusOr<TrainingRun> straight =
      Train(TestModelKind::kMlp, 2, 4, 1, options);
  ASSERT_TRUE(straight.ok()) << straight.status();
  const std::map<std::string, std::string> config = {{"model", "mlp"}};
  std::vector<double> losses;
  Mutex mu;
  auto steps = [&](Engine& engine, TestModel& model, comm::ProcessGroup& g,
                   int from, int to) -> absl::Status {
    for (int s = from; s < to; ++s) {
      const Batch all = MakeBatch(model, kRows, /*seed=*/3);
      const Batch mine = SliceBatch(all, g.rank() * 4, (g.rank() + 1) * 4);
      CZ_ASSIGN_OR_RETURN(
          StepMetrics m,
          engine.Step(
              1,
              [&](ParamHooks& hooks, int) -> absl::StatusOr<double> {
                return model.Forward(hooks, mine, g.rank());
              },
              [&](ParamHooks& hooks, int, float) {
                return model.Backward(hooks);
              }));
      if (g.rank() == 0) {
        MutexLock lock(&mu);
        losses.push_back(m.loss);
      }
    }
    return absl::OkStatus();
  };
  ASSERT_TRUE(AllRanksOk(SpawnRanks(2, [&](comm::ProcessGroup& g) {
    std::unique_ptr<TestModel> model = MakeTestModel(TestModelKind::kMlp, 7);
    CZ_ASSIGN_OR_RETURN(auto engine, Engine::Create(g, *model, options));
    CZ_RETURN_IF_ERROR(steps(*engine, *model, g, 0, 2));
    return engine->Save(dir, config);
  })));
  ASSERT_TRUE(AllRanksOk(SpawnRanks(2, [&](comm::ProcessGroup& g) {
    // Other starting weights: the checkpoint's masters replace them.
    std::unique_ptr<TestModel> model = MakeTestModel(TestModelKind::kMlp, 99);
    CZ_ASSIGN_OR_RETURN(auto engine, Engine::Create(g, *model, options));
    CZ_ASSIGN_OR_RETURN(const CheckpointMeta meta, engine->Resume(dir, config));
    if (meta.step != 2 || engine->step() != 2) {
      return absl::InternalError(absl::StrCat("resumed at ", meta.step));
    }
    return steps(*engine, *model, g, 2, 4);
  })));
  ASSERT_EQ(losses.size(), 4u);
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(losses[s], straight->steps[s].loss) << "step " << s + 1;
  }

  const std::vector<absl::Status> refused =
      SpawnRanks(2, [&](comm::ProcessGroup& g) -> absl::Status {
        std::unique_ptr<TestModel> model =
            MakeTestModel(TestModelKind::kMlp, 7);
        CZ_ASSIGN_OR_RETURN(auto engine, Engine::Create(g, *model, options));
        return engine->Resume(dir, {{"model", "tied"}}, "--from=here").status();
      });
  for (const absl::Status& s : refused) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("--from=here was saved with model=mlp, this run "
                          "has model=tied"));
  }
}

TEST(Engine, RefusesBadOptionsAndStepsAndReportsDivergence) {
  ASSERT_TRUE(AllRanksOk(SpawnRanks(2, [](comm::ProcessGroup& g) {
    std::unique_ptr<TestModel> model = MakeTestModel(TestModelKind::kMlp, 7);
    EngineOptions bad = SmallChunks();
    bad.offload = OffloadPolicy::kParams;  // On the host: nowhere to go.
    const absl::Status created = Engine::Create(g, *model, bad).status();
    if (created.code() != absl::StatusCode::kInvalidArgument) {
      return absl::InternalError(
          absl::StrCat("bad options: ", created.ToString()));
    }
    CZ_ASSIGN_OR_RETURN(auto engine, Engine::Create(g, *model, SmallChunks()));
    const Batch batch = MakeBatch(*model, 4, 1);
    auto forward = [&](ParamHooks& hooks, int) -> absl::StatusOr<double> {
      return model->Forward(hooks, batch, g.rank());
    };
    auto backward = [&](ParamHooks& hooks, int, float) {
      return model->Backward(hooks);
    };
    const absl::Status none = engine->Step(0, forward, backward).status();
    if (!absl::IsInvalidArgument(none) ||
        !absl::StrContains(none.message(), "0 micro-batches")) {
      return absl::InternalError(
          absl::StrCat("0 micro-batches: ", none.ToString()));
    }
    // A forward that fails fails the step with its error, before any
    // collective (so on every rank alike here).
    const absl::Status failed =
        engine
            ->Step(
                1,
                [](ParamHooks&, int) -> absl::StatusOr<double> {
                  return absl::DataLossError("the batch is gone");
                },
                backward)
            .status();
    if (!absl::IsDataLoss(failed)) {
      return absl::InternalError(
          absl::StrCat("forward error: ", failed.ToString()));
    }
    // A loss that is not finite on one rank ends the step on every rank.
    const absl::Status diverged =
        engine
            ->Step(
                1,
                [&](ParamHooks& hooks, int m) -> absl::StatusOr<double> {
                  CZ_ASSIGN_OR_RETURN(double loss, forward(hooks, m));
                  return g.rank() == 1 ? NAN : loss;
                },
                backward)
            .status();
    if (!absl::IsFailedPrecondition(diverged) ||
        !absl::StrContains(diverged.message(), "no longer finite")) {
      return absl::InternalError(
          absl::StrCat("diverged: ", diverged.ToString()));
    }
    return absl::OkStatus();
  })));
}

}  // namespace
}  // namespace chunkzero
