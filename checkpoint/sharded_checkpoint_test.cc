#include "checkpoint/sharded_checkpoint.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/mutex.h"
#include "base/status_macros.h"
#include "checkpoint/checkpoint.pb.h"
#include "checkpoint/testing/edit_manifest.h"
#include "chunk/chunk_manager.h"
#include "comm/testing/spawn_ranks.h"
#include "ddp/zero_ddp.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "optim/zero_optimizer.h"
#include "tests/test_models.h"

namespace chunkzero {
namespace {

using ::chunkzero::comm_testing::AllRanksOk;
using ::chunkzero::comm_testing::SpawnRanks;
using ::testing::HasSubstr;

namespace fs = std::filesystem;

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp",
                                       "/sharded_checkpoint_test/", name);
  fs::remove_all(dir);
  return dir;
}

// One rank's model, chunks, ZeroDdp and AdamW in `layout`.
struct Rank {
  std::unique_ptr<TestModel> model;
  std::unique_ptr<ChunkManager> chunks;
  std::unique_ptr<ZeroDdp> ddp;
  std::unique_ptr<ZeroOptimizer> optimizer;
};

absl::StatusOr<Rank> MakeRank(comm::ProcessGroup& g, ChunkLayout layout,
                              uint32_t seed, DType compute = DType::kF32) {
  Rank r;
  r.model = MakeTestModel(TestModelKind::kMlp, seed);
  ChunkManagerOptions options;
  options.chunk_size = 32;
  options.layout = layout;
  options.comm_timeout = absl::Seconds(20);
  r.chunks = std::make_unique<ChunkManager>(&g, options);
  ZeroDdpOptions ddp_options;
  ddp_options.compute_dtype = compute;
  for (Parameter* p : r.model->Parameters()) {
    ddp_options.first_use_order.push_back(p->name());
  }
  CZ_ASSIGN_OR_RETURN(
      r.ddp, ZeroDdp::Create(r.model.get(), r.chunks.get(), ddp_options));
  CZ_ASSIGN_OR_RETURN(r.optimizer, ZeroOptimizer::Create(r.ddp.get(), {}));
  return r;
}

absl::Status TrainOneStep(comm::ProcessGroup& g, Rank& r) {
  const Batch batch = MakeBatch(*r.model, 2, 7 + g.rank());
  CZ_RETURN_IF_ERROR(r.model->Forward(*r.ddp, batch, g.rank()).status());
  CZ_RETURN_IF_ERROR(r.model->Backward(*r.ddp));
  CZ_RETURN_IF_ERROR(r.ddp->FinishBackward());
  return r.optimizer->Step().status();
}

// Every piece's values by "param/state", gathered from every rank.
absl::StatusOr<std::map<std::string, std::vector<float>>> Gathered(
    ZeroOptimizer& optimizer) {
  CZ_ASSIGN_OR_RETURN(OptimizerState state, optimizer.GatherState(false));
  std::map<std::string, std::vector<float>> values;
  for (const StatePiece& piece : state.pieces) {
    CZ_ASSIGN_OR_RETURN(values[piece.param + "/" + piece.state],
                        piece.values.ToFloats());
  }
  return values;
}

// Only the masters: optimizer states exist from the first step on, so a
// freshly loaded optimizer gathers the masters alone.
std::map<std::string, std::vector<float>> Masters(
    const std::map<std::string, std::vector<float>>& values) {
  std::map<std::string, std::vector<float>> masters;
  for (const auto& [key, v] : values) {
    if (absl::EndsWith(key, "/param")) masters[key] = v;
  }
  return masters;
}

TEST(ShardedCheckpoint, AResumedStepEqualsTheUninterruptedOneBitForBit) {
  const std::string dir = TestDir("resume");
  std::map<std::string, std::vector<float>> saved, uninterrupted, resumed;
  ASSERT_TRUE(
      AllRanksOk(SpawnRanks(2, [&](comm::ProcessGroup& g) -> absl::Status {
        CZ_ASSIGN_OR_RETURN(Rank r, MakeRank(g, ChunkLayout::kSharded, 1));
        CZ_RETURN_IF_ERROR(TrainOneStep(g, r));
        CZ_RETURN_IF_ERROR(SaveShardedCheckpoint(g, *r.ddp, *r.optimizer, dir,
                                                 1, {{"model", "mlp"}}));
        CZ_ASSIGN_OR_RETURN(auto at_save, Gathered(*r.optimizer));
        CZ_RETURN_IF_ERROR(TrainOneStep(g, r));
        CZ_ASSIGN_OR_RETURN(auto after, Gathered(*r.optimizer));
        if (g.rank() == 0) {
          saved = at_save;
          uninterrupted = after;
        }
        return absl::OkStatus();
      })));
  ASSERT_TRUE(
      AllRanksOk(SpawnRanks(2, [&](comm::ProcessGroup& g) -> absl::Status {
        // Another seed: every value must come from the checkpoint.
        CZ_ASSIGN_OR_RETURN(Rank r, MakeRank(g, ChunkLayout::kSharded, 99));
        CZ_ASSIGN_OR_RETURN(CheckpointMeta meta,
                            LoadShardedCheckpoint(dir, *r.optimizer));
        EXPECT_EQ(meta.step, 1);
        EXPECT_EQ(meta.config.at("model"), "mlp");
        CZ_RETURN_IF_ERROR(TrainOneStep(g, r));
        CZ_ASSIGN_OR_RETURN(auto after, Gathered(*r.optimizer));
        if (g.rank() == 0) resumed = after;
        return absl::OkStatus();
      })));
  ASSERT_FALSE(uninterrupted.empty());
  EXPECT_EQ(resumed, uninterrupted);
  EXPECT_GT(saved.size(), Masters(saved).size());  // States were saved too.
}

TEST(ShardedCheckpoint, LoadsAtAnotherWorldSizeAndLayout) {
  const std::string dir = TestDir("reshape");
  std::map<std::string, std::vector<float>> saved, loaded;
  ASSERT_TRUE(
      AllRanksOk(SpawnRanks(2, [&](comm::ProcessGroup& g) -> absl::Status {
        CZ_ASSIGN_OR_RETURN(Rank r, MakeRank(g, ChunkLayout::kSharded, 1));
        CZ_RETURN_IF_ERROR(TrainOneStep(g, r));
        CZ_RETURN_IF_ERROR(
            SaveShardedCheckpoint(g, *r.ddp, *r.optimizer, dir, 1, {}));
        CZ_ASSIGN_OR_RETURN(auto values, Gathered(*r.optimizer));
        if (g.rank() == 0) saved = values;
        return absl::OkStatus();
      })));
  Mutex mu;
  std::vector<CheckpointMeta> metas;
  ASSERT_TRUE(
      AllRanksOk(SpawnRanks(3, [&](comm::ProcessGroup& g) -> absl::Status {
        CZ_ASSIGN_OR_RETURN(Rank r, MakeRank(g, ChunkLayout::kOwner, 99));
        CZ_ASSIGN_OR_RETURN(CheckpointMeta meta,
                            LoadShardedCheckpoint(dir, *r.optimizer));
        CZ_ASSIGN_OR_RETURN(auto values, Gathered(*r.optimizer));
        MutexLock lock(&mu);
        metas.push_back(meta);
        if (g.rank() == 0) loaded = values;
        return absl::OkStatus();
      })));
  ASSERT_FALSE(saved.empty());
  EXPECT_EQ(Masters(loaded), Masters(saved));
  ASSERT_EQ(metas.size(), 3u);
  for (const CheckpointMeta& meta : metas) {
    EXPECT_EQ(meta.world_size, 2);
    EXPECT_EQ(meta.layout, "sharded");
  }
}

TEST(ShardedCheckpoint, AFailedSaveFailsOnEveryRankAndKeepsThePrevious) {
  const std::string dir = TestDir("keep");
  // Rank 1 is given a directory it cannot create (under a regular file).
  const std::string blocker = TestDir("blocker");
  { std::ofstream(blocker) << "a file"; }
  std::vector<absl::Status> second(2);
  ASSERT_TRUE(
      AllRanksOk(SpawnRanks(2, [&](comm::ProcessGroup& g) -> absl::Status {
        CZ_ASSIGN_OR_RETURN(Rank r, MakeRank(g, ChunkLayout::kSharded, 1));
        CZ_RETURN_IF_ERROR(TrainOneStep(g, r));
        CZ_RETURN_IF_ERROR(
            SaveShardedCheckpoint(g, *r.ddp, *r.optimizer, dir, 1, {}));
        CZ_RETURN_IF_ERROR(TrainOneStep(g, r));
        const std::string mine = g.rank() == 1 ? blocker + "/ckpt" : dir;
        second[g.rank()] =
            SaveShardedCheckpoint(g, *r.ddp, *r.optimizer, mine, 2, {});
        return absl::OkStatus();
      })));
  for (const absl::Status& s : second) EXPECT_FALSE(s.ok());
  EXPECT_EQ(second[0].message(), "a shard could not be written (rank 1)");
  EXPECT_THAT(std::string(second[1].message()), HasSubstr(blocker));
  // Step 1's checkpoint is still the committed one, and rank 0's step-2
  // shard is gone.
  const absl::StatusOr<CheckpointMeta> meta = ReadCheckpointMeta(dir);
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ(meta->step, 1);
  EXPECT_FALSE(fs::exists(dir + "/shard-2-0-of-2.bin"));
  EXPECT_TRUE(fs::exists(dir + "/shard-1-0-of-2.bin"));
}

// The loss scaler's state must fit the resuming optimizer's scaler (the
// default options here: scale in [1, 2^24], growth interval 2000,
// hysteresis 1): outside, the checkpoint is damaged, not the caller's
// argument. An optimizer without a scaler ignores that state.
TEST(ShardedCheckpoint, ALossScalerStateOutsideTheScalersRangeIsDataLoss) {
  const std::string dir = TestDir("scaler");
  ASSERT_TRUE(
      AllRanksOk(SpawnRanks(1, [&](comm::ProcessGroup& g) -> absl::Status {
        CZ_ASSIGN_OR_RETURN(Rank r,
                            MakeRank(g, ChunkLayout::kSharded, 1, DType::kF16));
        CZ_RETURN_IF_ERROR(TrainOneStep(g, r));
        return SaveShardedCheckpoint(g, *r.ddp, *r.optimizer, dir, 1, {});
      })));
  std::ifstream in(dir + "/manifest.pb", std::ios::binary);
  const std::string intact((std::istreambuf_iterator<char>(in)), {});
  struct Case {
    void (*edit)(CheckpointManifest&);
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {[](CheckpointManifest& m) { m.set_loss_scale(1e30); },
            "loss_scale = 1e+30 is outside [1, 16777216], the loss scaler's "
            "range"},
           {[](CheckpointManifest& m) { m.set_loss_scale(0.5); },
            "loss_scale = 0.5 is outside [1, 16777216], the loss scaler's "
            "range"},
           {[](CheckpointManifest& m) { m.set_growth_tracker(2000); },
            "growth_tracker = 2000 is not below the loss scaler's growth "
            "interval 2000"},
           {[](CheckpointManifest& m) { m.set_hysteresis_left(2); },
            "hysteresis_left = 2 is more than the loss scaler's hysteresis "
            "1"},
       }) {
    SCOPED_TRACE(c.says);
    std::ofstream(dir + "/manifest.pb", std::ios::binary | std::ios::trunc)
        << intact;
    ASSERT_EQ(checkpoint_testing::EditManifest(dir, c.edit), absl::OkStatus());
    std::vector<absl::Status> loaded(2);
    ASSERT_TRUE(
        AllRanksOk(SpawnRanks(1, [&](comm::ProcessGroup& g) -> absl::Status {
          for (const DType compute : {DType::kF16, DType::kF32}) {
            CZ_ASSIGN_OR_RETURN(Rank r,
                                MakeRank(g, ChunkLayout::kSharded, 2, compute));
            loaded[compute == DType::kF16 ? 0 : 1] =
                LoadShardedCheckpoint(dir, *r.optimizer).status();
          }
          return absl::OkStatus();
        })));
    EXPECT_EQ(loaded[0].code(), absl::StatusCode::kDataLoss) << loaded[0];
    EXPECT_EQ(loaded[0].message(),
              absl::StrCat("checkpoint ", dir, ": manifest field ", c.says));
    EXPECT_TRUE(loaded[1].ok()) << loaded[1];
  }
}

}  // namespace
}  // namespace chunkzero
