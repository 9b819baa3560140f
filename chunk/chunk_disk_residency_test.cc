#include "chunk/chunk_disk_residency.h"

#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "chunk/chunk_manager.h"
#include "comm/testing/spawn_ranks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

using ::chunkzero::comm_testing::AllRanksOk;
using ::chunkzero::comm_testing::SpawnRanks;
using ::testing::HasSubstr;

constexpr int64_t kChunkBytes = 4096;  // 1024 f32: one direct-I/O block.

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp",
                                       "/chunk_disk_residency_test/", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// `n` f32 parameter chunks of 1024 elements on one rank computing in host
// memory, resting on a disk tier under a host limit of `limit` bytes;
// chunk c holds 1000 * c + k.
struct Fixture {
  MemoryTracker tracker;
  std::unique_ptr<ChunkDiskTier> disk;
  std::unique_ptr<ChunkManager> manager;
  std::vector<Chunk*> c;
  std::vector<Tensor> views;

  absl::Status SetUp(comm::ProcessGroup& g, int64_t limit,
                     const std::string& dir, int lookahead = 2, int n = 4) {
    tracker.SetLimit(Device::Cpu(), limit);
    CZ_ASSIGN_OR_RETURN(disk, ChunkDiskTier::Create(dir));
    ChunkManagerOptions options;
    options.chunk_size = 1024;
    options.disk = disk.get();
    options.disk_residency = true;
    options.disk_lookahead = lookahead;
    manager = std::make_unique<ChunkManager>(&g, options, &tracker);
    CZ_RETURN_IF_ERROR(
        manager->CreateGroup("p", DType::kF32, MemoryCategory::kParam));
    for (int t = 0; t < n; ++t) {
      std::vector<float> v(1024);
      for (int k = 0; k < 1024; ++k) v[k] = 1000.0f * t + k;
      CZ_ASSIGN_OR_RETURN(Tensor values, Tensor::FromFloats(v, {1024}));
      CZ_ASSIGN_OR_RETURN(Tensor view, manager->AppendTensor(
                                           "p", absl::StrCat("t", t), values));
      views.push_back(view);
    }
    CZ_RETURN_IF_ERROR(manager->CloseGroup("p"));
    for (int t = 0; t < n; ++t) c.push_back(manager->chunk("p", t));
    return absl::OkStatus();
  }

  // One use of chunk t: access, check its values, release.
  absl::Status Use(int t) {
    CZ_RETURN_IF_ERROR(manager->AccessChunk(c[t]));
    CZ_ASSIGN_OR_RETURN(std::vector<float> got, views[t].ToFloats());
    if (got[0] != 1000.0f * t || got[1023] != 1000.0f * t + 1023) {
      return absl::InternalError(absl::StrCat("chunk ", t, " lost its values"));
    }
    return manager->ReleaseChunk(c[t]);
  }

  // Whose payload is in host memory: "1001" for c0 and c3.
  std::string InMemory() const {
    std::string s;
    for (const Chunk* chunk : c) s += chunk->payload_on_disk() ? "0" : "1";
    return s;
  }
};

// Room for two payloads and a bit: while registering, each new chunk makes
// room by sending the complete chunk managed last to disk, so the first
// chunks the step uses stay.
TEST(ChunkDiskResidency, RegistrationKeepsTheFirstChunksInMemory) {
  const std::string dir = TestDir("registration");
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(1, [&](comm::ProcessGroup& g) -> absl::Status {
        Fixture f;
        CZ_RETURN_IF_ERROR(f.SetUp(g, 2 * kChunkBytes + 100, dir));
        EXPECT_EQ(f.InMemory(), "1001");
        EXPECT_EQ(f.manager->disk_residency()->evictions(), 2);
        EXPECT_EQ(f.disk->stats().bytes_written, 2 * kChunkBytes);
        EXPECT_LE(f.tracker.PeakTotal(Device::Cpu()), 2 * kChunkBytes + 100);
        for (int t = 0; t < 4; ++t) {
          EXPECT_TRUE(f.c[t]->rests_on_disk());
          EXPECT_TRUE(f.c[t]->keeps_payload_between_uses());
        }
        return absl::OkStatus();
      })));
}

// Forward c0..c7 and backward c7..c0 under room for six and a half
// chunks: every use finds its values, the limit holds, the chunks used next
// are read ahead, and a payload read but not written is never written
// again.
TEST(ChunkDiskResidency, BeladyWithReadsAheadAndNoRewriteOfCleanPayloads) {
  const std::string dir = TestDir("belady");
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(1, [&](comm::ProcessGroup& g) -> absl::Status {
        Fixture f;
        const int64_t limit = 6 * kChunkBytes + kChunkBytes / 2;
        CZ_RETURN_IF_ERROR(f.SetUp(g, limit, dir, /*lookahead=*/1, 8));
        EXPECT_EQ(f.InMemory(), "11111001");
        std::vector<int> order = {0, 1, 2, 3, 4, 5, 6, 7};
        for (int t = 7; t >= 0; --t) order.push_back(t);
        std::vector<Chunk*> uses;
        for (int t : order) uses.push_back(f.c[t]);
        f.manager->SetUseSchedule(uses);
        // A chunk that was never on disk is written the first time it goes
        // there; after that, never: nothing was modified.
        for (int t : order) CZ_RETURN_IF_ERROR(f.Use(t));
        const int64_t written = f.disk->stats().bytes_written;
        EXPECT_LE(written, 8 * kChunkBytes);
        for (int step = 1; step < 3; ++step) {
          for (int t : order) CZ_RETURN_IF_ERROR(f.Use(t));
        }
        EXPECT_LE(f.tracker.PeakTotal(Device::Cpu()), limit);
        EXPECT_GT(f.manager->disk_residency()->reads_ahead(), 0);
        EXPECT_GT(f.disk->stats().bytes_read, 0);
        EXPECT_EQ(f.disk->stats().bytes_written, written);
        EXPECT_TRUE(f.manager->disk_residency()->first_error().ok());

        // A use that writes: its eviction writes it.
        CZ_RETURN_IF_ERROR(f.manager->AccessChunk(f.c[0]));
        std::vector<float> v(1024, 7.0f);
        CZ_ASSIGN_OR_RETURN(Tensor sevens, Tensor::FromFloats(v, {1024}));
        CZ_RETURN_IF_ERROR(f.c[0]->CopyTensorToChunkSlice(0, sevens));
        CZ_RETURN_IF_ERROR(f.manager->ReleaseChunk(f.c[0]));
        EXPECT_FALSE(f.c[0]->disk_copy_current());
        CZ_RETURN_IF_ERROR(f.c[0]->EvictPayload());
        EXPECT_EQ(f.disk->stats().bytes_written, written + kChunkBytes);
        CZ_RETURN_IF_ERROR(f.manager->AccessChunk(f.c[0]));
        EXPECT_EQ(*f.views[0].ToFloats(), v);
        return f.manager->ReleaseChunk(f.c[0]);
      })));
}

// Reclaim frees what it is asked from chunks not in use, farthest next use
// first, and reports the bytes; an accessed chunk never goes.
TEST(ChunkDiskResidency, ReclaimTakesTheFarthestAndSparesAccessedChunks) {
  const std::string dir = TestDir("reclaim");
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(1, [&](comm::ProcessGroup& g) -> absl::Status {
        Fixture f;
        CZ_RETURN_IF_ERROR(f.SetUp(g, 64 * kChunkBytes, dir));
        EXPECT_EQ(f.InMemory(), "1111");
        // Next uses from the start: c1 (1), c3 (2), c0 (3), c2 (never).
        f.manager->SetUseSchedule({f.c[1], f.c[3], f.c[0]});
        ChunkDiskResidency& residency =
            const_cast<ChunkDiskResidency&>(*f.manager->disk_residency());
        EXPECT_EQ(residency.Reclaim(1), kChunkBytes);
        EXPECT_EQ(f.InMemory(), "1101");
        CZ_RETURN_IF_ERROR(f.manager->AccessChunk(f.c[0]));
        EXPECT_EQ(residency.Reclaim(2 * kChunkBytes), 2 * kChunkBytes);
        EXPECT_EQ(f.InMemory(), "1000");  // c3, then c1; c0 is in use.
        EXPECT_EQ(residency.Reclaim(kChunkBytes), 0);
        const absl::Status busy = f.c[0]->EvictPayload();
        EXPECT_EQ(busy.code(), absl::StatusCode::kFailedPrecondition);
        EXPECT_THAT(busy.message(), HasSubstr("while it is accessed"));
        CZ_RETURN_IF_ERROR(f.manager->ReleaseChunk(f.c[0]));
        EXPECT_EQ(residency.resident_bytes(), kChunkBytes);
        for (int t = 0; t < 4; ++t) CZ_RETURN_IF_ERROR(f.Use(t));
        return absl::OkStatus();
      })));
}

// A chunk whose full buffer is materialised outside an access (a rank
// joining a reduction with zeros) is about to be reduced into its payload:
// it never goes, and a reduction of a payload on disk brings it back.
TEST(ChunkDiskResidency, APayloadAboutToBeReducedStays) {
  const std::string dir = TestDir("reduce");
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(1, [&](comm::ProcessGroup& g) -> absl::Status {
        Fixture f;
        CZ_RETURN_IF_ERROR(f.SetUp(g, 64 * kChunkBytes, dir));
        ChunkDiskResidency& residency =
            const_cast<ChunkDiskResidency&>(*f.manager->disk_residency());
        CZ_RETURN_IF_ERROR(f.c[1]->EvictPayload());
        CZ_RETURN_IF_ERROR(f.c[0]->MaterialiseZeros());
        CZ_RETURN_IF_ERROR(f.c[1]->MaterialiseZeros());
        EXPECT_FALSE(f.c[0]->CanEvictPayload());
        const absl::Status busy = f.c[0]->EvictPayload();
        EXPECT_EQ(busy.code(), absl::StatusCode::kFailedPrecondition);
        EXPECT_THAT(busy.message(), HasSubstr("while it is in use"));
        // Only c2 and c3 may go.
        EXPECT_EQ(residency.Reclaim(64 * kChunkBytes), 2 * kChunkBytes);
        EXPECT_EQ(f.InMemory(), "1000");
        for (Chunk* chunk : {f.c[0], f.c[1]}) {
          CZ_RETURN_IF_ERROR(chunk->SetTensorState(0, TensorState::kCompute));
          CZ_RETURN_IF_ERROR(
              chunk->SetTensorState(0, TensorState::kReadyForReduce));
          CZ_RETURN_IF_ERROR(chunk->Reduce());
        }
        // One rank's sum of zeros: the payloads are zeros now.
        EXPECT_EQ(f.InMemory(), "1100");
        CZ_RETURN_IF_ERROR(f.manager->AccessChunk(f.c[1]));
        EXPECT_EQ(*f.views[1].ToFloats(), std::vector<float>(1024, 0.0f));
        return f.manager->ReleaseChunk(f.c[1]);
      })));
}

// A payload on disk is still checked for Inf and NaN (the fp16 overflow
// check), from a copy read back.
TEST(ChunkDiskResidency, InfOrNanIsFoundInAPayloadOnDisk) {
  const std::string dir = TestDir("inf");
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(1, [&](comm::ProcessGroup& g) -> absl::Status {
        Fixture f;
        CZ_RETURN_IF_ERROR(f.SetUp(g, 64 * kChunkBytes, dir));
        std::vector<float> v(1024, 1.0f);
        v[1023] = std::numeric_limits<float>::infinity();
        CZ_ASSIGN_OR_RETURN(Tensor inf, Tensor::FromFloats(v, {1024}));
        CZ_RETURN_IF_ERROR(f.c[2]->CopyTensorToChunkSlice(0, inf));
        for (Chunk* chunk : f.c) CZ_RETURN_IF_ERROR(chunk->EvictPayload());
        EXPECT_EQ(f.InMemory(), "0000");
        for (int t = 0; t < 4; ++t) {
          CZ_ASSIGN_OR_RETURN(bool bad, f.c[t]->HasInfOrNan());
          EXPECT_EQ(bad, t == 2) << t;
        }
        return absl::OkStatus();
      })));
}

// A chunk must rest in host memory to rest on disk.
TEST(ChunkDiskResidency, OnlyChunksRestingInHostMemoryAttach) {
  const std::string dir = TestDir("attach");
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(1, [&](comm::ProcessGroup& g) -> absl::Status {
        CZ_ASSIGN_OR_RETURN(std::unique_ptr<ChunkDiskTier> disk,
                            ChunkDiskTier::Create(dir));
        ChunkOptions options;
        options.capacity = 8;
        options.dtype = DType::kF32;
        options.device = Device::Simulated(0);
        CZ_ASSIGN_OR_RETURN(std::unique_ptr<Chunk> chunk,
                            Chunk::Create(options, &g));
        ChunkDiskResidency residency(disk.get(), nullptr, 1);
        const absl::Status s = residency.Manage(chunk.get());
        EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
        EXPECT_THAT(s.message(), HasSubstr("it must rest in host memory"));
        EXPECT_FALSE(residency.manages(chunk.get()));
        return absl::OkStatus();
      })));
}

// Three tiers (the auto placement's): a managed chunk moved to rest on the
// device brings its payload from disk and stays attached, out of this
// tier's reach until it comes back to host memory, when it may go to disk
// again (written: the device may have changed it). Values never change.
TEST(ChunkDiskResidency, AChunkRestingOnTheDeviceIsOutOfReach) {
  const std::string dir = TestDir("device");
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(1, [&](comm::ProcessGroup& g) -> absl::Status {
        CZ_ASSIGN_OR_RETURN(std::unique_ptr<ChunkDiskTier> disk,
                            ChunkDiskTier::Create(dir));
        ChunkOptions options;
        options.capacity = 1024;
        options.dtype = DType::kF32;
        options.device = Device::Simulated(0);
        options.rest_device = Device::Cpu();
        CZ_ASSIGN_OR_RETURN(std::unique_ptr<Chunk> chunk,
                            Chunk::Create(options, &g));
        std::vector<float> want(1024);
        for (int k = 0; k < 1024; ++k) want[k] = 0.5f * k;
        CZ_ASSIGN_OR_RETURN(Tensor values, Tensor::FromFloats(want, {1024}));
        CZ_RETURN_IF_ERROR(chunk->Append("w", values).status());
        CZ_RETURN_IF_ERROR(chunk->Close());
        auto payload = [&]() -> absl::StatusOr<std::vector<float>> {
          std::vector<float> got(1024);
          CZ_RETURN_IF_ERROR(chunk->ReadRestPayload(got.data()));
          return got;
        };
        ChunkDiskResidency residency(disk.get(), nullptr, 1);
        CZ_RETURN_IF_ERROR(residency.Manage(chunk.get()));
        EXPECT_EQ(residency.Reclaim(1), kChunkBytes);
        EXPECT_TRUE(chunk->payload_on_disk());

        CZ_RETURN_IF_ERROR(chunk->MoveRestTo(Device::Simulated(0)));
        EXPECT_EQ(disk->stats().bytes_read, kChunkBytes);
        EXPECT_TRUE(chunk->rests_on_disk());
        EXPECT_FALSE(chunk->payload_on_disk());
        EXPECT_EQ(chunk->payload_bytes(Device::Simulated(0)), kChunkBytes);
        EXPECT_EQ(residency.resident_bytes(), 0);
        EXPECT_FALSE(chunk->CanEvictPayload());
        EXPECT_EQ(residency.Reclaim(1 << 20), 0);
        const absl::Status refused = chunk->EvictPayload();
        EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
        EXPECT_THAT(refused.message(),
                    HasSubstr("to disk while it is resting on sim:0"));
        EXPECT_EQ(*payload(), want);

        CZ_RETURN_IF_ERROR(chunk->MoveRestTo(Device::Cpu()));
        EXPECT_EQ(residency.resident_bytes(), kChunkBytes);
        EXPECT_FALSE(chunk->disk_copy_current());
        EXPECT_EQ(residency.Reclaim(1), kChunkBytes);
        EXPECT_EQ(disk->stats().bytes_written, 2 * kChunkBytes);
        EXPECT_EQ(*payload(), want);
        EXPECT_EQ(residency.evictions(), 2);

        // A pinned payload does not move; a chunk spilled for good (the
        // masters' way) does not leave the host.
        CZ_RETURN_IF_ERROR(chunk->LoadPayload());
        chunk->PinPayload();
        EXPECT_THAT(chunk->MoveRestTo(Device::Simulated(0)).message(),
                    HasSubstr("while its payload is pinned"));
        chunk->UnpinPayload();
        residency.Forget(chunk.get());
        CZ_RETURN_IF_ERROR(chunk->SpillRest(disk.get()));
        EXPECT_THAT(chunk->MoveRestTo(Device::Simulated(0)).message(),
                    HasSubstr("it rests on disk"));
        return absl::OkStatus();
      })));
}

}  // namespace
}  // namespace chunkzero
