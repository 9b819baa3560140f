// The model contract (ddp/param_hooks.h) as the engine enforces it: the
// four slips a user makes in a model of their own -- a forward between
// steps, a forward use without its HandGrad, a weight read after its
// grad, a device limit that cannot hold the optimizer states -- each an
// error naming the parameter (or the options), never a wrong update; and
// the forward-only pass that makes evaluating between steps safe.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/mutex.h"
#include "base/status_macros.h"
#include "comm/testing/spawn_ranks.h"
#include "engine/cost_model.h"
#include "engine/engine.h"
#include "engine/testing/slip_hooks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_models.h"

namespace chunkzero {
namespace {

using ::chunkzero::comm_testing::AllRanksOk;
using ::chunkzero::comm_testing::SpawnRanks;
using ::chunkzero::engine_testing::SlipHooks;
using ::testing::HasSubstr;

EngineOptions Options() {
  EngineOptions options;
  options.chunk_size = 32;
  options.precision = DType::kF32;
  options.optimizer.kind = OptimizerKind::kAdam;
  options.optimizer.lr = LrSchedule::Constant(0.01);
  options.comm_timeout = absl::Seconds(30);
  return options;
}

struct Trained {
  std::vector<double> losses;
  std::vector<double> evaluated;
};

// Trains kMlp (or `kind`) for `steps` steps on 2 ranks; `each_step` runs on
// every rank before each step and may evaluate, slip or check.
using BeforeStep = std::function<absl::Status(Engine&, TestModel&, int rank,
                                              const Batch&, int step)>;
std::vector<absl::Status> TrainTwoRanks(
    TestModelKind kind, int steps, const EngineOptions& options, Trained* run,
    const BeforeStep& before_step = nullptr,
    const std::function<void(SlipHooks&, int rank)>& slips = nullptr) {
  Mutex mu;
  return SpawnRanks(2, [&](comm::ProcessGroup& g) -> absl::Status {
    std::unique_ptr<TestModel> model = MakeTestModel(kind, 7);
    CZ_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                        Engine::Create(g, *model, options));
    for (int step = 0; step < steps; ++step) {
      const Batch global = MakeBatch(*model, 8, /*seed=*/step);
      const Batch mine = SliceBatch(global, 4 * g.rank(), 4 * g.rank() + 4);
      if (before_step) {
        CZ_RETURN_IF_ERROR(before_step(*engine, *model, g.rank(), mine, step));
      }
      CZ_ASSIGN_OR_RETURN(
          const StepMetrics m,
          engine->Step(
              1,
              [&](ParamHooks& hooks, int) -> absl::StatusOr<double> {
                return model->Forward(hooks, mine, g.rank());
              },
              [&](ParamHooks& hooks, int, float) {
                SlipHooks slipping(hooks);
                if (slips) slips(slipping, g.rank());
                return model->Backward(slipping);
              }));
      if (g.rank() == 0) {
        MutexLock lock(&mu);
        run->losses.push_back(m.loss);
      }
    }
    return absl::OkStatus();
  });
}

// 1. The supported mode: a forward-only pass between every two steps, for
// a plain model, one applying a layer twice and one with a tied weight
// (several forward uses each: none of the pass's may count).
TEST(EngineContract, EvaluatingBetweenStepsChangesNoBit) {
  for (TestModelKind kind :
       {TestModelKind::kMlp, TestModelKind::kTwice, TestModelKind::kTied}) {
    for (ChunkLayout layout : {ChunkLayout::kReplicated, ChunkLayout::kOwner,
                               ChunkLayout::kSharded}) {
      SCOPED_TRACE(
          absl::StrCat(TestModelName(kind), " ", ChunkLayoutName(layout)));
      EngineOptions options = Options();
      options.layout = layout;
      Trained plain, evaluated;
      ASSERT_TRUE(AllRanksOk(TrainTwoRanks(kind, 4, options, &plain)));
      Mutex mu;
      ASSERT_TRUE(AllRanksOk(TrainTwoRanks(
          kind, 4, options, &evaluated,
          [&](Engine& engine, TestModel& model, int rank, const Batch& batch,
              int) -> absl::Status {
            CZ_ASSIGN_OR_RETURN(const double loss,
                                engine.Evaluate(1, [&](ParamHooks& hooks, int) {
                                  return model.Forward(hooks, batch, rank);
                                }));
            if (rank == 0) {
              MutexLock lock(&mu);
              evaluated.evaluated.push_back(loss);
            }
            return absl::OkStatus();
          })));
      EXPECT_EQ(evaluated.losses, plain.losses);
      // The pass computes the forward the step then computes.
      EXPECT_EQ(evaluated.evaluated, plain.losses);
    }
  }
}

// 1. Without the mode: a forward of one's own between steps is refused,
// naming the parameter, and the training after it is unchanged.
TEST(EngineContract, AForwardBetweenStepsIsRefusedNamingTheParameter) {
  Trained plain, tried;
  ASSERT_TRUE(
      AllRanksOk(TrainTwoRanks(TestModelKind::kMlp, 3, Options(), &plain)));
  ASSERT_TRUE(AllRanksOk(TrainTwoRanks(
      TestModelKind::kMlp, 3, Options(), &tried,
      [](Engine& engine, TestModel& model, int rank, const Batch& batch,
         int step) -> absl::Status {
        if (step == 0) return absl::OkStatus();
        const absl::Status forward =
            model.Forward(engine.ddp(), batch, rank).status();
        if (!absl::IsFailedPrecondition(forward) ||
            !absl::StrContains(
                forward.message(),
                "PreForward on parameter 'fc1.weight' outside Engine::Step "
                "and Engine::Evaluate")) {
          return absl::InternalError(forward.ToString());
        }
        return absl::OkStatus();
      })));
  EXPECT_EQ(tried.losses, plain.losses);
}

// The pass takes no backward, and no pass runs inside a step.
TEST(EngineContract, TheForwardOnlyPassRefusesWhatIsNotAForward) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(2, [](comm::ProcessGroup& g) -> absl::Status {
        std::unique_ptr<TestModel> model =
            MakeTestModel(TestModelKind::kMlp, 7);
        CZ_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                            Engine::Create(g, *model, Options()));
        const Batch batch = MakeBatch(*model, 4, 1);
        const absl::Status backward =
            engine
                ->Evaluate(
                    1,
                    [&](ParamHooks& hooks, int) -> absl::StatusOr<double> {
                      CZ_ASSIGN_OR_RETURN(const float loss,
                                          model->Forward(hooks, batch, 0));
                      CZ_RETURN_IF_ERROR(model->Backward(hooks));
                      return loss;
                    })
                .status();
        if (!absl::StrContains(backward.message(),
                               "PreBackward on parameter 'fc2.weight' in a "
                               "forward-only pass (Engine::Evaluate)")) {
          return absl::InternalError(backward.ToString());
        }
        const absl::Status nested =
            engine
                ->Step(
                    1,
                    [&](ParamHooks& hooks, int) -> absl::StatusOr<double> {
                      CZ_ASSIGN_OR_RETURN(const float loss,
                                          model->Forward(hooks, batch, 0));
                      CZ_RETURN_IF_ERROR(
                          engine
                              ->Evaluate(1,
                                         [&](ParamHooks& h, int) {
                                           return model->Forward(h, batch, 0);
                                         })
                              .status());
                      return loss;
                    },
                    [&](ParamHooks& hooks, int, float) {
                      return model->Backward(hooks);
                    })
                .status();
        if (!absl::StrContains(nested.message(),
                               "BeginEvaluation inside a step")) {
          return absl::InternalError(nested.ToString());
        }
        return absl::OkStatus();
      })));
}

// 2. A forward use without its HandGrad (on one rank) fails the step on
// every rank, naming the parameter with its uses and grads; with
// find_unused_parameters too, which is about parameters no forward used.
TEST(EngineContract, AMissingGradFailsTheStepEverywhere) {
  for (bool find_unused : {false, true}) {
    SCOPED_TRACE(find_unused);
    EngineOptions options = Options();
    options.find_unused_parameters = find_unused;
    Trained run;
    const std::vector<absl::Status> statuses =
        TrainTwoRanks(TestModelKind::kMlp, 2, options, &run, nullptr,
                      [](SlipHooks& hooks, int rank) {
                        if (rank == 1) hooks.drop_grad_of = "fc2.bias";
                      });
    EXPECT_EQ(statuses[1].code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(statuses[1].message()),
                HasSubstr("parameter 'fc2.bias' was used 1 time in this "
                          "step's forward but handed 0 grads"));
    EXPECT_EQ(statuses[0].code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(statuses[0].message()),
                HasSubstr("another rank's step broke the model contract"));
    EXPECT_TRUE(run.losses.empty());  // No update was made.
  }
}

// 3. A weight read after its grad was written is refused, naming it.
TEST(EngineContract, AWeightReadAfterItsGradFailsTheStep) {
  Trained run;
  const std::vector<absl::Status> statuses = TrainTwoRanks(
      TestModelKind::kMlp, 1, Options(), &run, nullptr,
      [](SlipHooks& hooks, int) { hooks.read_after_grad_of = "fc2.weight"; });
  for (const absl::Status& s : statuses) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("parameter 'fc2.weight' was read (data()) after "
                          "its grad was written into its chunk slice"));
  }
  EXPECT_TRUE(run.losses.empty());
}

// Outside any scope, data() is the weights where a chunk keeps them (the
// replicated layout), else not materialised (a sharded chunk released);
// GatherWeights reads them anywhere.
TEST(EngineContract, AReadOutsideAnyScopeIsTheWeightsOrNothing) {
  for (ChunkLayout layout : {ChunkLayout::kReplicated, ChunkLayout::kSharded}) {
    SCOPED_TRACE(ChunkLayoutName(layout));
    EngineOptions options = Options();
    options.layout = layout;
    Trained run;
    EXPECT_TRUE(AllRanksOk(TrainTwoRanks(
        TestModelKind::kMlp, 2, options, &run,
        [&](Engine& engine, TestModel& model, int, const Batch&,
            int step) -> absl::Status {
          if (step == 0) return absl::OkStatus();
          CZ_ASSIGN_OR_RETURN(const auto weights,
                              engine.GatherWeights(/*all_ranks=*/true));
          for (Parameter* p : model.Parameters()) {
            const Tensor& data = p->data();
            if (layout == ChunkLayout::kSharded) {
              if (data.is_materialized()) {
                return absl::InternalError(p->name() + " is materialised");
              }
              continue;
            }
            if (*data.ToFloats() != *weights.at(p->name()).ToFloats()) {
              return absl::InternalError(p->name() + " is not the weights");
            }
          }
          return absl::OkStatus();
        })));
  }
}

// 4. A device limit that cannot hold the optimizer states (made at the
// first update) is refused by Create, naming the lighter layout that fits:
// 10,640 parameters (64 -> 128 with bias, a LayerNorm of 128, 128 -> 16
// with bias), chunks of 8192, 2 ranks, sim:0 at 128 KiB, fp32, Adam.
class Shapes : public Module {
 public:
  explicit Shapes(const std::vector<Shape>& shapes) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      params_.push_back(std::make_unique<Parameter>(
          absl::StrCat("p", i), *Tensor::Zeros(shapes[i], DType::kF32)));
    }
  }
  std::vector<Parameter*> Parameters() override {
    std::vector<Parameter*> out;
    for (auto& p : params_) out.push_back(p.get());
    return out;
  }

 private:
  std::vector<std::unique_ptr<Parameter>> params_;
};

TEST(EngineContract, CreateRefusesALimitTheStepCannotHold) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(2, [](comm::ProcessGroup& g) -> absl::Status {
        Shapes model({{64, 128}, {128}, {128}, {128}, {128, 16}, {16}});
        EngineOptions options = Options();
        options.chunk_size = 8192;
        options.device = Device::Simulated(0);
        options.device_memory_limit = 128 << 10;
        const absl::Status refused = Engine::Create(g, model, options).status();
        if (!absl::IsResourceExhausted(refused) ||
            refused.message() !=
                "EngineOptions::device_memory_limit is 128.00 KiB, but a step "
                "needs about 192.00 KiB on sim:0 (compute chunks 96.00 KiB, "
                "masters and optimizer states 96.00 KiB (the states made at "
                "the "
                "first update), the model's buffers 0 B); try "
                "EngineOptions::offload=optimizer") {
          return absl::InternalError(refused.ToString());
        }
        options.offload = OffloadPolicy::kOptimizer;
        return Engine::Create(g, model, options).status();
      })));
}

TEST(CheckDeviceLimit, CountsTheModelsBuffersAndSaysWhenNothingFits) {
  EngineOptions options = Options();
  options.chunk_size = 8192;
  options.device = Device::Simulated(0);
  options.device_memory_limit = 128 << 10;
  options.offload = OffloadPolicy::kOptimizer;
  const std::vector<int64_t> sizes = {8192, 128, 128, 128, 2048, 16};
  EXPECT_TRUE(CheckDeviceLimit(options, sizes, 2, 32 << 10).ok());
  const absl::Status over = CheckDeviceLimit(options, sizes, 2, 33 << 10);
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(over.message()),
              HasSubstr("the model's buffers 33.00 KiB); try "
                        "EngineOptions::offload=params"));
  const absl::Status none = CheckDeviceLimit(options, sizes, 2, 1 << 20);
  EXPECT_THAT(std::string(none.message()), HasSubstr("no layout fits"));
  options.device_memory_limit = 0;
  EXPECT_TRUE(CheckDeviceLimit(options, sizes, 2, 1 << 30).ok());
}

}  // namespace
}  // namespace chunkzero
