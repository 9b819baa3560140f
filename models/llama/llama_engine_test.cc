// LlamaModel trained through the engine (engine/engine.h) on in-process
// ranks, as a user's own model is: every layout, precision, offload and
// activation checkpointing, against the same model trained on one rank.
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/world.h"
#include "engine/engine.h"
#include "gtest/gtest.h"
#include "models/llama/llama_model.h"

namespace chunkzero {
namespace {

LlamaConfig Tiny() {
  LlamaConfig c;
  c.layers = 3;
  c.d_model = 32;
  c.heads = 4;
  c.kv_heads = 2;
  c.ffn = 48;
  c.vocab = 64;
  c.seq_len = 8;
  c.rope_theta = 500000;
  return c;
}

constexpr int kBatch = 4, kSeq = 8, kSteps = 4;

// Batch `step`'s tokens and next-token targets, [kBatch, kSeq + 1] cut.
void Batch(int step, int first_row, int rows, std::vector<int32_t>* tokens,
           std::vector<int32_t>* targets) {
  tokens->clear();
  targets->clear();
  for (int r = first_row; r < first_row + rows; ++r) {
    for (int t = 0; t < kSeq; ++t) {
      const int at = step * 131 + r * 17 + t;
      tokens->push_back((at * 7 + at / 5) % 64);
      targets->push_back(((at + 1) * 7 + (at + 1) / 5) % 64);
    }
  }
}

struct Trained {
  std::vector<double> losses;
  // With `evaluate`: Engine::Evaluate's loss on each step's batch, run just
  // before the step (and once more after the last).
  std::vector<double> evaluated;
  // Every parameter's final f32 bytes, rank 0's.
  std::map<std::string, std::vector<float>> weights;
};

absl::StatusOr<Trained> Train(int world_size, EngineOptions options,
                              gemm::Precision products = gemm::Precision::kF32,
                              bool tied = false, bool evaluate = false) {
  comm::WorldSpec spec;
  spec.world_size = world_size;
  CZ_ASSIGN_OR_RETURN(std::unique_ptr<comm::World> world,
                      comm::MakeWorld(spec));
  Trained trained;
  comm::FailureCause failures;
  std::vector<std::thread> ranks;
  for (int r : world->local_ranks()) {
    ranks.emplace_back([&, r] {
      absl::Status status = [&]() -> absl::Status {
        CZ_ASSIGN_OR_RETURN(comm::ProcessGroup * group, world->group(r));
        LlamaConfig config = Tiny();
        config.tie_word_embeddings = tied;
        CZ_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model,
                            LlamaModel::Create(config, 3));
        model->set_matmul_precision(products);
        MemoryTracker tracker;
        CZ_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                            Engine::Create(*group, *model, options, &tracker));
        CZ_RETURN_IF_ERROR(
            model->set_memory_accounting(&tracker, options.device));
        const int rows = kBatch / world_size;
        std::vector<int32_t> tokens, targets;
        auto forward = [&](ParamHooks& hooks, int) -> absl::StatusOr<double> {
          CZ_ASSIGN_OR_RETURN(
              const float loss,
              model->Forward(hooks, rows, kSeq, tokens, targets));
          return loss;
        };
        for (int step = 0; step <= kSteps; ++step) {
          Batch(step, r * rows, rows, &tokens, &targets);
          if (evaluate) {
            CZ_ASSIGN_OR_RETURN(const double loss,
                                engine->Evaluate(1, forward));
            if (r == 0) trained.evaluated.push_back(loss);
          }
          if (step == kSteps) break;
          CZ_ASSIGN_OR_RETURN(
              const StepMetrics m,
              engine->Step(
                  1,
                  [&](ParamHooks& hooks, int) -> absl::StatusOr<double> {
                    CZ_ASSIGN_OR_RETURN(
                        const float loss,
                        model->Forward(hooks, rows, kSeq, tokens, targets));
                    return loss;
                  },
                  [&](ParamHooks& hooks, int, float scale) {
                    return model->Backward(hooks, scale);
                  }));
          if (r == 0) trained.losses.push_back(m.loss);
        }
        CZ_ASSIGN_OR_RETURN(const auto weights, engine->GatherWeights());
        if (r == 0) {
          for (const auto& [name, t] : weights) {
            trained.weights[name] = *t.ToFloats();
          }
        }
        engine.reset();
        return model->set_memory_accounting(nullptr, options.device);
      }();
      if (!status.ok()) world->Abort(failures.Record(r, status));
    });
  }
  for (std::thread& t : ranks) t.join();
  CZ_RETURN_IF_ERROR(failures.cause());
  return trained;
}

EngineOptions F32() {
  EngineOptions o;
  o.precision = DType::kF32;
  o.optimizer.lr = LrSchedule::Constant(3e-3);
  return o;
}

TEST(LlamaThroughTheEngine, TwoShardedRanksTrainAsOne) {
  const absl::StatusOr<Trained> one = Train(1, F32());
  ASSERT_TRUE(one.ok()) << one.status();
  const absl::StatusOr<Trained> two = Train(2, F32());
  ASSERT_TRUE(two.ok()) << two.status();
  ASSERT_EQ(two->losses.size(), kSteps);
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_NEAR(two->losses[s], one->losses[s], 2e-6 * one->losses[s]) << s;
  }
  EXPECT_LT(two->losses.back(), two->losses.front());
}

TEST(LlamaThroughTheEngine, EveryLayoutAndCheckpointingGiveTheSameBits) {
  const absl::StatusOr<Trained> base = Train(2, F32());
  ASSERT_TRUE(base.ok()) << base.status();
  for (ChunkLayout layout :
       {ChunkLayout::kReplicated, ChunkLayout::kOwner, ChunkLayout::kSharded}) {
    for (int every : {0, 1, 2}) {
      EngineOptions o = F32();
      o.layout = layout;
      o.chunk_size = 4096;
      o.activation_checkpointing.every = every;
      SCOPED_TRACE(absl::StrCat(ChunkLayoutName(layout), " every ", every));
      const absl::StatusOr<Trained> run = Train(2, o);
      ASSERT_TRUE(run.ok()) << run.status();
      EXPECT_EQ(run->losses, base->losses);
    }
  }
}

TEST(LlamaThroughTheEngine, SixteenBitOffloadedAndTied) {
  for (DType precision : {DType::kBF16, DType::kF16}) {
    EngineOptions o = F32();
    o.precision = precision;
    o.device = Device::Simulated(0);
    o.offload = OffloadPolicy::kParams;
    o.chunk_size = 4096;
    const gemm::Precision products = precision == DType::kBF16
                                         ? gemm::Precision::kBf16
                                         : gemm::Precision::kF32;
    SCOPED_TRACE(DTypeName(precision));
    const absl::StatusOr<Trained> plain = Train(2, o, products, true);
    ASSERT_TRUE(plain.ok()) << plain.status();
    EXPECT_LT(plain->losses.back(), plain->losses.front());
    o.activation_checkpointing.every = 1;
    const absl::StatusOr<Trained> again = Train(2, o, products, true);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->losses, plain->losses);
  }
}

// A forward-only pass between steps changes no bit of the training, in
// every layout, precision, offload mode, tier and checkpointing mode, from
// before step 1 (whose order is still to be recorded) on; and its loss is
// the next step's, bit for bit, since it computes the same forward.
TEST(LlamaThroughTheEngine, EvaluationBetweenStepsChangesNoBit) {
  struct Case {
    std::string name;
    void (*set)(EngineOptions&);
    gemm::Precision products = gemm::Precision::kF32;
  };
  const std::string scratch = ::testing::TempDir();
  const Case cases[] = {
      {"sharded f32", [](EngineOptions&) {}},
      {"replicated",
       [](EngineOptions& o) { o.layout = ChunkLayout::kReplicated; }},
      {"owner", [](EngineOptions& o) { o.layout = ChunkLayout::kOwner; }},
      {"f16", [](EngineOptions& o) { o.precision = DType::kF16; }},
      {"bf16", [](EngineOptions& o) { o.precision = DType::kBF16; },
       gemm::Precision::kBf16},
      {"checkpointing",
       [](EngineOptions& o) { o.activation_checkpointing.every = 1; }},
      {"offload optimizer",
       [](EngineOptions& o) {
         o.device = Device::Simulated(0);
         o.offload = OffloadPolicy::kOptimizer;
       }},
      {"offload params",
       [](EngineOptions& o) {
         o.device = Device::Simulated(0);
         o.offload = OffloadPolicy::kParams;
       }},
      {"auto under a limit",
       [](EngineOptions& o) {
         o.device = Device::Simulated(0);
         o.offload = OffloadPolicy::kAuto;
         o.device_memory_limit = 400 << 10;
       }},
      {"nvme",
       [](EngineOptions& o) {
         o.offload = OffloadPolicy::kNvme;
         o.nvme_path = ::testing::TempDir();
       }},
      {"three tiers",
       [](EngineOptions& o) {
         o.device = Device::Simulated(0);
         o.offload = OffloadPolicy::kNvme;
         o.nvme_path = ::testing::TempDir();
         o.host_memory_limit = 2 << 20;
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EngineOptions o = F32();
    o.chunk_size = 4096;
    c.set(o);
    const absl::StatusOr<Trained> plain = Train(2, o, c.products);
    ASSERT_TRUE(plain.ok()) << plain.status();
    const absl::StatusOr<Trained> evaluated =
        Train(2, o, c.products, /*tied=*/false, /*evaluate=*/true);
    ASSERT_TRUE(evaluated.ok()) << evaluated.status();
    EXPECT_EQ(evaluated->losses, plain->losses);
    EXPECT_EQ(evaluated->weights, plain->weights);
    ASSERT_EQ(evaluated->evaluated.size(), kSteps + 1u);
    for (int s = 0; s < kSteps; ++s) {
      EXPECT_EQ(evaluated->evaluated[s], plain->losses[s]) << "step " << s + 1;
    }
  }
}

}  // namespace
}  // namespace chunkzero
