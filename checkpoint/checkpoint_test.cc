#include "checkpoint/checkpoint.h"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/crc32c.h"
#include "base/file_lock.h"
#include "checkpoint/checkpoint.pb.h"
#include "checkpoint/testing/edit_manifest.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "optim/optimizer_state.h"
#include "tensor/tensor.h"

namespace chunkzero {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

constexpr int kWorld = 3;

// A fresh directory per test under TEST_TMPDIR (not created: the writer
// must create it).
std::string TestDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(
      tmp != nullptr ? tmp : "/tmp", "/checkpoint_test/",
      ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::remove_all(dir);
  return dir;
}

// Values whose bits matter: `seed` picks a pattern that includes -0, an
// infinity, a NaN with a payload and a subnormal, so a round trip through
// any float arithmetic would show.
Tensor Values(int64_t numel, uint32_t seed) {
  Tensor values = *Tensor::Empty({numel}, DType::kF32);
  constexpr uint32_t kSpecial[] = {0x80000000u, 0x7F800000u, 0x7FC01234u,
                                   0x00000001u};
  uint32_t x = seed * 2654435761u + 1;
  for (int64_t i = 0; i < numel; ++i) {
    x = x * 1664525u + 1013904223u;
    const uint32_t bits = i < 4 ? kSpecial[(i + seed) % 4] : x;
    std::memcpy(values.data<float>() + i, &bits, sizeof(bits));
  }
  return values;
}

StatePiece Piece(const std::string& param, const std::string& state,
                 Shape shape, int64_t begin, int64_t numel, uint32_t seed) {
  return StatePiece{param, state, std::move(shape), begin, Values(numel, seed)};
}

// An Adam state of three parameters split unevenly over kWorld ranks, as a
// sharded layout would: rank 2 holds nothing of "b", the scalar "g" lives
// on rank 1 only, and one piece is empty.
std::vector<OptimizerState> ShardedState(uint32_t seed) {
  std::vector<OptimizerState> shards(kWorld);
  for (const char* state : {kMasterState, kExpAvgState, kExpAvgSqState}) {
    shards[0].pieces.push_back(Piece("w", state, {4, 5}, 0, 7, seed++));
    shards[1].pieces.push_back(Piece("w", state, {4, 5}, 7, 9, seed++));
    shards[2].pieces.push_back(Piece("w", state, {4, 5}, 16, 4, seed++));
    shards[0].pieces.push_back(Piece("b", state, {5}, 0, 5, seed++));
    shards[1].pieces.push_back(Piece("g", state, {}, 0, 1, seed++));
    shards[2].pieces.push_back(Piece("b", state, {5}, 5, 0, seed++));
  }
  return shards;
}

CheckpointMeta Meta(int64_t step) {
  CheckpointMeta meta;
  meta.step = step;
  meta.world_size = kWorld;
  meta.layout = "sharded";
  OptimizerState scalars;
  scalars.updates = step - 1;
  scalars.iterations = step;
  scalars.loss_scale = 32768.0;
  scalars.growth_tracker = 17;
  scalars.hysteresis_left = 2;
  CopyOptimizerScalars(scalars, &meta);
  meta.config = {{"model", "gpt2-tiny"}, {"lr", "6e-4"}, {"empty", ""}};
  return meta;
}

std::vector<ShardIndex> WriteShards(const std::string& dir, int64_t step,
                                    const std::vector<OptimizerState>& shards) {
  std::vector<ShardIndex> indexes;
  for (int rank = 0; rank < kWorld; ++rank) {
    absl::StatusOr<ShardIndex> index =
        WriteCheckpointShard(dir, step, rank, kWorld, shards[rank]);
    EXPECT_TRUE(index.ok()) << index.status();
    if (index.ok()) indexes.push_back(*std::move(index));
  }
  return indexes;
}

// Writes a whole checkpoint of `shards` at `step`.
void Save(const std::string& dir, int64_t step,
          const std::vector<OptimizerState>& shards) {
  const std::vector<ShardIndex> indexes = WriteShards(dir, step, shards);
  ASSERT_TRUE(WriteCheckpointManifest(dir, Meta(step), indexes).ok());
}

// The pieces of every shard in rank order, as ReadCheckpoint returns them.
std::vector<StatePiece> AllPieces(const std::vector<OptimizerState>& shards) {
  std::vector<StatePiece> pieces;
  for (const OptimizerState& shard : shards) {
    pieces.insert(pieces.end(), shard.pieces.begin(), shard.pieces.end());
  }
  return pieces;
}

void ExpectSamePieces(const std::vector<StatePiece>& expected,
                      const std::vector<StatePiece>& actual) {
  ASSERT_EQ(expected.size(), actual.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("piece ", i, ": ", expected[i].param, " ",
                              expected[i].state));
    EXPECT_EQ(expected[i].param, actual[i].param);
    EXPECT_EQ(expected[i].state, actual[i].state);
    EXPECT_EQ(expected[i].shape, actual[i].shape);
    EXPECT_EQ(expected[i].begin, actual[i].begin);
    EXPECT_EQ(actual[i].values.dtype(), DType::kF32);
    ASSERT_EQ(expected[i].values.numel(), actual[i].values.numel());
    const size_t bytes = expected[i].values.nbytes();
    if (bytes > 0) {
      EXPECT_EQ(std::memcmp(expected[i].values.raw_data(),
                            actual[i].values.raw_data(), bytes),
                0);
    }
  }
}

void ExpectMetaEq(const CheckpointMeta& expected,
                  const CheckpointMeta& actual) {
  EXPECT_EQ(expected.step, actual.step);
  EXPECT_EQ(expected.world_size, actual.world_size);
  EXPECT_EQ(expected.layout, actual.layout);
  EXPECT_EQ(expected.updates, actual.updates);
  EXPECT_EQ(expected.iterations, actual.iterations);
  EXPECT_EQ(expected.loss_scale, actual.loss_scale);
  EXPECT_EQ(expected.growth_tracker, actual.growth_tracker);
  EXPECT_EQ(expected.hysteresis_left, actual.hysteresis_left);
  EXPECT_EQ(expected.config, actual.config);
}

std::vector<std::string> FileNames(const std::string& dir) {
  std::vector<std::string> names;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  return names;
}

void FlipByte(const std::string& path, int64_t offset, uint8_t mask = 0x01) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(offset);
  const char byte = static_cast<char>(file.get() ^ mask);
  file.seekp(offset);
  file.put(byte);
}

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), {});
}

TEST(Checkpoint, RoundTripsPiecesScalarsAndConfigBitForBit) {
  const std::string dir = TestDir();
  const std::vector<OptimizerState> shards = ShardedState(1);
  const ChunkPlacementMap placement = {{"w", {"fp32-0", 128}}};
  // Ranks are threads in the train job: write the shards concurrently.
  std::vector<absl::StatusOr<ShardIndex>> results(kWorld);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kWorld; ++rank) {
    ranks.emplace_back([&, rank] {
      results[rank] =
          WriteCheckpointShard(dir, 7, rank, kWorld, shards[rank], &placement);
    });
  }
  for (std::thread& rank : ranks) rank.join();
  std::vector<ShardIndex> indexes;
  for (int rank = 0; rank < kWorld; ++rank) {
    ASSERT_TRUE(results[rank].ok()) << results[rank].status();
    EXPECT_EQ(results[rank]->file(),
              absl::StrCat("shard-7-", rank, "-of-3.bin"));
    indexes.push_back(*results[rank]);
  }
  EXPECT_EQ(indexes[0].pieces(0).chunk(), "fp32-0");
  EXPECT_EQ(indexes[0].pieces(0).chunk_offset(), 128);
  EXPECT_EQ(indexes[0].pieces(1).chunk(), "");  // "b" has no placement.
  // The manifest takes the indexes in any order.
  std::swap(indexes[0], indexes[2]);
  ASSERT_EQ(WriteCheckpointManifest(dir, Meta(7), indexes), absl::OkStatus());

  const absl::StatusOr<Checkpoint> read = ReadCheckpoint(dir);
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectMetaEq(Meta(7), read->meta);
  EXPECT_EQ(read->state.updates, 6);
  EXPECT_EQ(read->state.iterations, 7);
  EXPECT_EQ(read->state.loss_scale, 32768.0);
  EXPECT_EQ(read->state.growth_tracker, 17);
  EXPECT_EQ(read->state.hysteresis_left, 2);
  ExpectSamePieces(AllPieces(shards), read->state.pieces);

  const absl::StatusOr<CheckpointMeta> meta = ReadCheckpointMeta(dir);
  ASSERT_TRUE(meta.ok()) << meta.status();
  ExpectMetaEq(Meta(7), *meta);
}

TEST(Checkpoint, ManifestIsTheSameBytesWithConfigKeysInOrder) {
  const std::vector<OptimizerState> shards = ShardedState(1);
  CheckpointMeta meta = Meta(3);
  for (int i = 0; i < 40; ++i) {
    meta.config[absl::StrFormat("key%02d", i)] = absl::StrCat(i);
  }
  std::vector<std::string> manifests;
  for (int copy = 0; copy < 2; ++copy) {
    const std::string dir = TestDir();
    const std::vector<ShardIndex> indexes = WriteShards(dir, 3, shards);
    ASSERT_TRUE(WriteCheckpointManifest(dir, meta, indexes).ok());
    std::ifstream in(dir + "/manifest.pb", std::ios::binary);
    manifests.emplace_back(std::istreambuf_iterator<char>(in),
                           std::istreambuf_iterator<char>());
  }
  EXPECT_EQ(manifests[0], manifests[1]);
  size_t previous = 0;
  for (int i = 0; i < 40; ++i) {
    const size_t at = manifests[0].find(absl::StrFormat("key%02d", i));
    ASSERT_NE(at, std::string::npos) << i;
    EXPECT_GT(at, previous) << "key" << i << " is out of order";
    previous = at;
  }
}

TEST(Checkpoint, FilterReadsOnlyTheChosenPieces) {
  const std::string dir = TestDir();
  const std::vector<OptimizerState> shards = ShardedState(1);
  Save(dir, 3, shards);
  const absl::StatusOr<Checkpoint> read =
      ReadCheckpoint(dir, [](const std::string& param, const std::string& state,
                             int64_t begin, int64_t numel) {
        return param == "w" && state == kExpAvgState && begin < 10;
      });
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectSamePieces({shards[0].pieces[2], shards[1].pieces[2]},
                   read->state.pieces);
}

TEST(Checkpoint, LaterSaveReplacesTheEarlierOnlyAtTheManifestRename) {
  const std::string dir = TestDir();
  const std::vector<OptimizerState> first = ShardedState(1);
  const std::vector<OptimizerState> second = ShardedState(1000);
  Save(dir, 10, first);

  // An interrupted save: every shard written, the manifest not.
  const std::vector<ShardIndex> indexes = WriteShards(dir, 20, second);
  absl::StatusOr<Checkpoint> read = ReadCheckpoint(dir);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->meta.step, 10);
  ExpectSamePieces(AllPieces(first), read->state.pieces);

  ASSERT_TRUE(WriteCheckpointManifest(dir, Meta(20), indexes).ok());
  read = ReadCheckpoint(dir);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->meta.step, 20);
  ExpectSamePieces(AllPieces(second), read->state.pieces);
  EXPECT_THAT(
      FileNames(dir),
      UnorderedElementsAre("manifest.pb", "shard-20-0-of-3.bin",
                           "shard-20-1-of-3.bin", "shard-20-2-of-3.bin"));
}

TEST(Checkpoint, ResavingTheSameStepNeverOverwritesTheCommittedShards) {
  const std::string dir = TestDir();
  const std::vector<OptimizerState> first = ShardedState(1);
  const std::vector<OptimizerState> second = ShardedState(1000);
  Save(dir, 5, first);

  const std::vector<ShardIndex> indexes = WriteShards(dir, 5, second);
  ASSERT_EQ(indexes.size(), kWorld);
  EXPECT_EQ(indexes[0].file(), "shard-5-0-of-3.1.bin");
  absl::StatusOr<Checkpoint> read = ReadCheckpoint(dir);
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectSamePieces(AllPieces(first), read->state.pieces);

  ASSERT_TRUE(WriteCheckpointManifest(dir, Meta(5), indexes).ok());
  read = ReadCheckpoint(dir);
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectSamePieces(AllPieces(second), read->state.pieces);
  EXPECT_THAT(
      FileNames(dir),
      UnorderedElementsAre("manifest.pb", "shard-5-0-of-3.1.bin",
                           "shard-5-1-of-3.1.bin", "shard-5-2-of-3.1.bin"));
}

TEST(Checkpoint, LoadsAfterSavingAtAnotherWorldSize) {
  // One rank holding everything: the checkpoint a world of 1 would save.
  const std::string dir = TestDir();
  OptimizerState whole;
  whole.pieces = AllPieces(ShardedState(1));
  const absl::StatusOr<ShardIndex> index =
      WriteCheckpointShard(dir, 4, 0, 1, whole);
  ASSERT_TRUE(index.ok()) << index.status();
  CheckpointMeta meta = Meta(4);
  meta.world_size = 1;
  ASSERT_TRUE(WriteCheckpointManifest(dir, meta, {*index}).ok());
  const absl::StatusOr<Checkpoint> read = ReadCheckpoint(dir);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->meta.world_size, 1);
  ExpectSamePieces(whole.pieces, read->state.pieces);
}

TEST(Checkpoint, CreatesNestedDirectoriesGivenWithATrailingSlash) {
  const std::string dir = TestDir() + "/a/b/";
  const std::vector<OptimizerState> shards = ShardedState(1);
  Save(dir, 1, shards);
  const absl::StatusOr<Checkpoint> read = ReadCheckpoint(dir);
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectSamePieces(AllPieces(shards), read->state.pieces);
}

TEST(Checkpoint, TruncatedShardIsDataLossNamingTheFile) {
  const std::string dir = TestDir();
  Save(dir, 2, ShardedState(1));
  const std::string shard = dir + "/shard-2-1-of-3.bin";
  fs::resize_file(shard, fs::file_size(shard) - 3);
  const absl::StatusOr<Checkpoint> read = ReadCheckpoint(dir);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(read.status().message(), HasSubstr(shard));
  EXPECT_THAT(read.status().message(), HasSubstr("truncated"));
}

TEST(Checkpoint, MissingShardIsDataLossNamingTheFile) {
  const std::string dir = TestDir();
  Save(dir, 2, ShardedState(1));
  const std::string shard = dir + "/shard-2-2-of-3.bin";
  fs::remove(shard);
  const absl::StatusOr<Checkpoint> read = ReadCheckpoint(dir);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(read.status().message(), HasSubstr(shard));
}

TEST(Checkpoint, FlippedShardByteIsDataLossNamingFileAndTensor) {
  const std::string dir = TestDir();
  const std::vector<OptimizerState> shards = ShardedState(1);
  const std::vector<ShardIndex> indexes = WriteShards(dir, 2, shards);
  ASSERT_TRUE(WriteCheckpointManifest(dir, Meta(2), indexes).ok());
  // Rank 1's third piece is "w" exp_avg, elements [7, 16).
  const PieceIndex& victim = indexes[1].pieces(2);
  ASSERT_EQ(victim.param(), "w");
  ASSERT_EQ(victim.state(), kExpAvgState);
  const std::string shard = dir + "/shard-2-1-of-3.bin";
  FlipByte(shard, victim.byte_offset() + 13);
  const absl::StatusOr<Checkpoint> read = ReadCheckpoint(dir);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(read.status().message(), HasSubstr(shard));
  EXPECT_THAT(read.status().message(),
              HasSubstr("tensor w state exp_avg elements [7, 16)"));
}

TEST(Checkpoint, ShardWithBadMagicIsDataLoss) {
  const std::string dir = TestDir();
  Save(dir, 2, ShardedState(1));
  const std::string shard = dir + "/shard-2-0-of-3.bin";
  FlipByte(shard, 0);
  const absl::StatusOr<Checkpoint> read = ReadCheckpoint(dir);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(read.status().message(), HasSubstr(shard));
}

TEST(Checkpoint, EveryFlippedManifestBitIsDataLossNamingTheManifest) {
  const std::string dir = TestDir();
  Save(dir, 2, ShardedState(1));
  const std::string manifest = dir + "/manifest.pb";
  const std::string intact = ReadFile(manifest);
  for (size_t offset = 0; offset < intact.size(); ++offset) {
    for (int bit = 0; bit < 8; ++bit) {
      SCOPED_TRACE(absl::StrCat("byte ", offset, " bit ", bit));
      FlipByte(manifest, offset, static_cast<uint8_t>(1 << bit));
      const absl::StatusOr<CheckpointMeta> meta = ReadCheckpointMeta(dir);
      ASSERT_EQ(meta.status().code(), absl::StatusCode::kDataLoss);
      ASSERT_THAT(meta.status().message(), HasSubstr(manifest));
      FlipByte(manifest, offset, static_cast<uint8_t>(1 << bit));
    }
  }
  const absl::StatusOr<Checkpoint> read = ReadCheckpoint(dir);
  EXPECT_TRUE(read.ok()) << read.status();
}

TEST(Checkpoint, TruncatedManifestIsDataLoss) {
  const std::string dir = TestDir();
  Save(dir, 2, ShardedState(1));
  const std::string manifest = dir + "/manifest.pb";
  fs::resize_file(manifest, fs::file_size(manifest) / 2);
  const absl::StatusOr<Checkpoint> read = ReadCheckpoint(dir);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(read.status().message(), HasSubstr(manifest));
}

TEST(Checkpoint, UnknownFormatVersionIsFailedPrecondition) {
  const std::string dir = TestDir();
  fs::create_directories(dir);
  CheckpointManifest manifest;
  manifest.set_format_version(kCheckpointFormatVersion + 1);
  ManifestFile file;
  manifest.SerializeToString(file.mutable_manifest());
  file.set_crc32c(Crc32c(file.manifest().data(), file.manifest().size()));
  std::ofstream(dir + "/manifest.pb", std::ios::binary)
      << file.SerializeAsString();
  const absl::StatusOr<Checkpoint> read = ReadCheckpoint(dir);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(read.status().message(), HasSubstr("format version 2"));
}

TEST(Checkpoint, MissingDirectoryOrManifestIsNotFound) {
  const std::string dir = TestDir();
  EXPECT_EQ(ReadCheckpoint(dir).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ReadCheckpointMeta(dir).status().code(),
            absl::StatusCode::kNotFound);
  // Shards alone are no checkpoint.
  WriteShards(dir, 1, ShardedState(1));
  EXPECT_EQ(ReadCheckpoint(dir).status().code(), absl::StatusCode::kNotFound);
}

TEST(Checkpoint, ManifestNeedsOneShardPerRankOfItsStep) {
  const std::string dir = TestDir();
  std::vector<ShardIndex> indexes = WriteShards(dir, 1, ShardedState(1));
  ASSERT_EQ(indexes.size(), kWorld);

  std::vector<ShardIndex> missing = indexes;
  missing.pop_back();
  EXPECT_EQ(WriteCheckpointManifest(dir, Meta(1), missing).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<ShardIndex> repeated = indexes;
  repeated[2] = repeated[1];
  EXPECT_EQ(WriteCheckpointManifest(dir, Meta(1), repeated).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteCheckpointManifest(dir, Meta(2), indexes).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(dir + "/manifest.pb"));
}

TEST(Checkpoint, BadPieceOrRankIsInvalidArgumentAndLeavesNoFile) {
  const std::string dir = TestDir();
  OptimizerState outside;
  outside.pieces.push_back(Piece("w", kMasterState, {4, 5}, 15, 6, 1));
  EXPECT_EQ(WriteCheckpointShard(dir, 1, 0, 1, outside).status().code(),
            absl::StatusCode::kInvalidArgument);
  OptimizerState f16;
  f16.pieces.push_back(
      StatePiece{"w", kMasterState, {2}, 0, *Tensor::Zeros({2}, DType::kF16)});
  EXPECT_EQ(WriteCheckpointShard(dir, 1, 0, 1, f16).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteCheckpointShard(dir, 1, 3, 3, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(FileNames(dir), ::testing::IsEmpty());
}

// A diverged run's state must never become a checkpoint: a trainer asks
// CheckPiecesFinite first (the writer itself keeps any bits).
TEST(Checkpoint, CheckPiecesFiniteNamesThePieceHoldingInfOrNaN) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    OptimizerState state;
    state.pieces.push_back(Piece("a", kMasterState, {4}, 0, 4, 1));
    state.pieces.push_back(Piece("w", kMasterState, {2, 3}, 0, 6, 2));
    for (StatePiece& piece : state.pieces) {
      for (int i = 0; i < piece.values.numel(); ++i) {
        piece.values.data<float>()[i] = 0.5f * i;
      }
    }
    EXPECT_TRUE(CheckPiecesFinite(state).ok());
    state.pieces[1].values.data<float>()[4] = bad;
    const absl::Status status = CheckPiecesFinite(state);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(status.message(),
              "tensor w state param elements [0, 6) holds Inf or NaN");
  }
}

// ---- Manifest fields: each is checked when read ----

struct FieldCase {
  const char* name;
  std::function<void(CheckpointManifest&)> edit;
  std::string says;  // After "checkpoint DIR: manifest field ".
};

// Meta(7) saved at world 3: step 7, iterations 7, updates 6, loss scale
// 32768, growth tracker 17, hysteresis left 2.
std::vector<FieldCase> BadFieldCases() {
  using M = CheckpointManifest;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const int64_t max = std::numeric_limits<int64_t>::max();
  auto every_shard_step = [](M& m, int64_t step) {
    m.set_step(step);
    for (ShardIndex& s : *m.mutable_shards()) s.set_step(step);
  };
  return {
      {"negative step", [=](M& m) { every_shard_step(m, -5); },
       "step = -5 is negative"},
      {"huge step",
       [=](M& m) {
         every_shard_step(m, max);
         m.set_iterations(max);
       },
       "step = 9223372036854775807 is above 2^53 = 9007199254740992, more "
       "steps than a run takes"},
      {"negative iterations", [](M& m) { m.set_iterations(-100); },
       "iterations = -100 is negative"},
      {"huge iterations", [=](M& m) { m.set_iterations(max); },
       "iterations = 9223372036854775807 is above 2^53 = 9007199254740992, "
       "more steps than a run takes"},
      {"iterations other than step", [](M& m) { m.set_iterations(8); },
       "iterations = 8 is not step = 7 (the optimizer steps once per step, "
       "skipped steps included)"},
      {"negative updates", [](M& m) { m.set_updates(-1); },
       "updates = -1 is negative"},
      {"more updates than iterations", [](M& m) { m.set_updates(8); },
       "updates = 8 is more than iterations = 7 (skipped steps count in "
       "iterations only)"},
      {"NaN loss scale", [=](M& m) { m.set_loss_scale(nan); },
       "loss_scale = nan is not finite"},
      {"infinite loss scale", [=](M& m) { m.set_loss_scale(inf); },
       "loss_scale = inf is not finite"},
      {"negative loss scale", [](M& m) { m.set_loss_scale(-1); },
       "loss_scale = -1 is negative"},
      {"zero loss scale with a scaler's state",
       [](M& m) { m.set_loss_scale(0); },
       "growth_tracker = 17 is not 0, though loss_scale = 0 says no loss "
       "scaler saved it"},
      {"zero loss scale with hysteresis left",
       [](M& m) {
         m.set_loss_scale(0);
         m.set_growth_tracker(0);
       },
       "hysteresis_left = 2 is not 0, though loss_scale = 0 says no loss "
       "scaler saved it"},
      {"negative growth tracker", [](M& m) { m.set_growth_tracker(-1); },
       "growth_tracker = -1 is negative"},
      {"huge growth tracker", [=](M& m) { m.set_growth_tracker(max); },
       "growth_tracker = 9223372036854775807 is above 2^53 = "
       "9007199254740992, more steps than a run takes"},
      {"no hysteresis left", [](M& m) { m.set_hysteresis_left(0); },
       "hysteresis_left = 0 is not positive, though loss_scale = 32768 says "
       "a loss scaler saved it"},
      {"negative hysteresis left", [](M& m) { m.set_hysteresis_left(-3); },
       "hysteresis_left = -3 is not positive, though loss_scale = 32768 says "
       "a loss scaler saved it"},
      {"zero world size", [](M& m) { m.set_world_size(0); },
       "world_size = 0 is not positive"},
      {"negative world size", [](M& m) { m.set_world_size(-1); },
       "world_size = -1 is not positive"},
      {"world size above the shards", [](M& m) { m.set_world_size(4); },
       "world_size = 4 but the manifest lists 3 shards"},
      {"a shard of another step",
       [](M& m) { m.mutable_shards(1)->set_step(6); },
       "shards[1].step = 6 is not step = 7"},
      {"a shard of another world",
       [](M& m) { m.mutable_shards(2)->set_world_size(2); },
       "shards[2].world_size = 2 is not world_size = 3"},
      {"a shard's byte size",
       [](M& m) {
         m.mutable_shards(0)->set_byte_size(m.shards(0).byte_size() + 4);
       },
       "shards[0].byte_size = 156 is not 152, the bytes of its header and "
       "pieces"},
      {"a piece out of place",
       [](M& m) {
         PieceIndex* p = m.mutable_shards(1)->mutable_pieces(1);
         p->set_byte_offset(p->byte_offset() + 4);
       },
       "shards[1].pieces[1].byte_offset = 48 is not 44, where the piece "
       "before it ends"},
      {"a negative piece size",
       [](M& m) { m.mutable_shards(0)->mutable_pieces(0)->set_numel(-1); },
       "shards[0].pieces[0].numel = -1 is negative"},
      {"a piece larger than any file",
       [=](M& m) { m.mutable_shards(0)->mutable_pieces(0)->set_numel(max); },
       "shards[0].pieces[0].numel = 9223372036854775807 is more than a file "
       "can hold"},
  };
}

TEST(CheckpointManifestFields, EveryBadScalarIsDataLossNamingFieldAndValue) {
  const std::string dir = TestDir();
  Save(dir, 7, ShardedState(1));
  const std::string intact = ReadFile(dir + "/manifest.pb");
  for (const FieldCase& c : BadFieldCases()) {
    SCOPED_TRACE(c.name);
    std::ofstream(dir + "/manifest.pb", std::ios::binary | std::ios::trunc)
        << intact;
    ASSERT_EQ(checkpoint_testing::EditManifest(dir, c.edit), absl::OkStatus());
    const std::string want =
        absl::StrCat("checkpoint ", dir, ": manifest field ", c.says);
    const absl::StatusOr<CheckpointMeta> meta = ReadCheckpointMeta(dir);
    EXPECT_EQ(meta.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(meta.status().message(), want);
    const absl::StatusOr<Checkpoint> read = ReadCheckpoint(dir);
    EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(read.status().message(), want);
    EXPECT_EQ(CheckpointShardFiles(dir).status().code(),
              absl::StatusCode::kDataLoss);
  }
}

// The same values are refused when written: a writer cannot commit what no
// reader would take.
TEST(CheckpointManifestFields, BadScalarsAreRefusedWhenWritten) {
  const std::string dir = TestDir();
  const std::vector<ShardIndex> indexes = WriteShards(dir, 7, ShardedState(1));
  struct Case {
    void (*edit)(CheckpointMeta&);
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {[](CheckpointMeta& m) { m.iterations = -100; },
            "checkpoint meta field iterations = -100 is negative"},
           {[](CheckpointMeta& m) { m.iterations = 6; },
            "checkpoint meta field iterations = 6 is not step = 7 (the "
            "optimizer steps once per step, skipped steps included)"},
           {[](CheckpointMeta& m) {
              m.loss_scale = std::numeric_limits<double>::quiet_NaN();
            },
            "checkpoint meta field loss_scale = nan is not finite"},
       }) {
    SCOPED_TRACE(c.says);
    CheckpointMeta meta = Meta(7);
    c.edit(meta);
    const absl::Status status = WriteCheckpointManifest(dir, meta, indexes);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(status.message(), c.says);
    EXPECT_FALSE(fs::exists(dir + "/manifest.pb"));
  }
}

// What a run without a loss scaler saves (f32, bf16), and a run whose every
// step overflowed, are valid.
TEST(CheckpointManifestFields, EdgeValuesThatRunsProduceAreAccepted) {
  const std::string dir = TestDir();
  const std::vector<ShardIndex> indexes = WriteShards(dir, 7, ShardedState(1));
  CheckpointMeta no_scaler = Meta(7);
  no_scaler.loss_scale = 0;
  no_scaler.growth_tracker = 0;
  no_scaler.hysteresis_left = 0;
  ASSERT_TRUE(WriteCheckpointManifest(dir, no_scaler, indexes).ok());
  absl::StatusOr<Checkpoint> read = ReadCheckpoint(dir);
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectMetaEq(no_scaler, read->meta);

  CheckpointMeta all_skipped = Meta(7);
  all_skipped.updates = 0;
  all_skipped.growth_tracker = 0;
  all_skipped.loss_scale = 0.5;
  ASSERT_TRUE(WriteCheckpointManifest(dir, all_skipped, indexes).ok());
  read = ReadCheckpoint(dir);
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectMetaEq(all_skipped, read->meta);

  // Step 0: a checkpoint saved before training.
  const std::string zero = dir + "/zero";
  CheckpointMeta start = Meta(0);
  start.updates = 0;
  start.growth_tracker = 0;
  ASSERT_TRUE(WriteCheckpointManifest(zero, start,
                                      WriteShards(zero, 0, ShardedState(1)))
                  .ok());
  EXPECT_TRUE(ReadCheckpoint(zero).ok());
}

// ---- Readers and a saver in one directory ----

using checkpoint_internal::ManifestReadPoint;

// The manifest-read hook, set for the object's lifetime.
class ScopedReadHook {
 public:
  explicit ScopedReadHook(checkpoint_internal::ManifestReadHook hook) {
    checkpoint_internal::SetManifestReadHookForTesting(std::move(hook));
  }
  ~ScopedReadHook() {
    checkpoint_internal::SetManifestReadHookForTesting(nullptr);
  }
};

// Another job commits a checkpoint after this reader has read the manifest
// and before it opens the shards: the reader still reads the checkpoint it
// began with, whole, as the saver leaves the shards it replaced for the next
// save to delete.
TEST(CheckpointConcurrency, ASaveBetweenManifestAndShardsLeavesTheReaderWhole) {
  const std::string dir = TestDir();
  const std::vector<OptimizerState> first = ShardedState(1);
  const std::vector<OptimizerState> second = ShardedState(1000);
  Save(dir, 10, first);
  int saves = 0;
  {
    ScopedReadHook hook([&](ManifestReadPoint point, const std::string&) {
      if (point == ManifestReadPoint::kAfter && saves++ == 0) {
        Save(dir, 20, second);
      }
    });
    const absl::StatusOr<Checkpoint> read = ReadCheckpoint(dir);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->meta.step, 10);
    ExpectSamePieces(AllPieces(first), read->state.pieces);
  }
  EXPECT_EQ(saves, 1);
  absl::StatusOr<Checkpoint> read = ReadCheckpoint(dir);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->meta.step, 20);
  ExpectSamePieces(AllPieces(second), read->state.pieces);
  EXPECT_THAT(FileNames(dir),
              UnorderedElementsAre("manifest.pb", "shard-10-0-of-3.bin",
                                   "shard-10-1-of-3.bin", "shard-10-2-of-3.bin",
                                   "shard-20-0-of-3.bin", "shard-20-1-of-3.bin",
                                   "shard-20-2-of-3.bin"));
  // With no reader left, the next save deletes both.
  Save(dir, 30, ShardedState(2000));
  EXPECT_THAT(
      FileNames(dir),
      UnorderedElementsAre("manifest.pb", "shard-30-0-of-3.bin",
                           "shard-30-1-of-3.bin", "shard-30-2-of-3.bin"));
}

// A save holds the directory's commit lock while it deletes the shards it
// replaced: a reader waits for it, then reads the checkpoint whole.
TEST(CheckpointConcurrency, AReaderWaitsForACommitInProgress) {
  const std::string dir = TestDir();
  const std::vector<OptimizerState> shards = ShardedState(1);
  Save(dir, 10, shards);
  absl::StatusOr<std::unique_ptr<FileLock>> committing =
      FileLock::AcquireDirectory(dir, LockMode::kExclusive,
                                 absl::ZeroDuration());
  ASSERT_TRUE(committing.ok()) << committing.status();
  std::promise<absl::StatusOr<Checkpoint>> result;
  std::thread reader([&] { result.set_value(ReadCheckpoint(dir)); });
  std::future<absl::StatusOr<Checkpoint>> read = result.get_future();
  // The lock is held: the reader cannot have returned, however long it runs.
  EXPECT_EQ(read.wait_for(std::chrono::milliseconds(200)),
            std::future_status::timeout);
  committing->reset();
  const absl::StatusOr<Checkpoint> got = read.get();
  reader.join();
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectSamePieces(AllPieces(shards), got->state.pieces);
}

// A saver stopped in the middle of a commit does not hold readers for ever.
TEST(CheckpointConcurrency, AReaderGivesUpOnACommitThatNeverEnds) {
  const std::string dir = TestDir();
  Save(dir, 10, ShardedState(1));
  absl::StatusOr<std::unique_ptr<FileLock>> committing =
      FileLock::AcquireDirectory(dir, LockMode::kExclusive,
                                 absl::ZeroDuration());
  ASSERT_TRUE(committing.ok()) << committing.status();
  CheckpointReadOptions options;
  options.lock_timeout = absl::Milliseconds(50);
  const absl::StatusOr<Checkpoint> read = ReadCheckpoint(dir, options);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(read.status().message(),
            absl::StrCat("checkpoint ", dir,
                         ": waited 50ms for a save into it to finish "
                         "committing (it locks the directory while it "
                         "deletes the shards it replaced, which takes "
                         "milliseconds): the saving process is stopped or "
                         "hung"));
  // Reading the manifest alone needs no lock.
  EXPECT_TRUE(ReadCheckpointMeta(dir).ok());
}

// While another process reads (here: holds the commit lock shared), a save
// commits at once and leaves the shards it replaced; the first commit with
// no reader deletes every shard its manifest does not name, and nothing
// else: the lock is the directory itself, and another job's lock file or
// notes are not shards.
TEST(CheckpointConcurrency, ASaveNeverWaitsForReadersAndCleansUpLater) {
  const std::string dir = TestDir();
  Save(dir, 10, ShardedState(1));
  std::ofstream(dir + "/lock") << "1234\n";
  std::ofstream(dir + "/notes.txt") << "keep";
  {
    absl::StatusOr<std::unique_ptr<FileLock>> reading =
        FileLock::AcquireDirectory(dir, LockMode::kShared,
                                   absl::ZeroDuration());
    ASSERT_TRUE(reading.ok()) << reading.status();
    Save(dir, 20, ShardedState(2));
    EXPECT_THAT(
        FileNames(dir),
        UnorderedElementsAre("manifest.pb", "lock", "notes.txt",
                             "shard-10-0-of-3.bin", "shard-10-1-of-3.bin",
                             "shard-10-2-of-3.bin", "shard-20-0-of-3.bin",
                             "shard-20-1-of-3.bin", "shard-20-2-of-3.bin"));
    // Readers share the lock.
    EXPECT_TRUE(ReadCheckpoint(dir).ok());
  }
  Save(dir, 30, ShardedState(3));
  EXPECT_THAT(FileNames(dir),
              UnorderedElementsAre("manifest.pb", "lock", "notes.txt",
                                   "shard-30-0-of-3.bin", "shard-30-1-of-3.bin",
                                   "shard-30-2-of-3.bin"));
  // A read creates nothing.
  ASSERT_TRUE(ReadCheckpoint(dir).ok());
  EXPECT_EQ(FileNames(dir).size(), 6u);
}

}  // namespace
}  // namespace chunkzero
