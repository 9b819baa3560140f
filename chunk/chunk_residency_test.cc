#include "chunk/chunk_residency.h"

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
using ::testing::ElementsAre;

const Device kSim = Device::Simulated(0);

// Four f32 chunks of 100 elements (400 B) on one rank, computing on sim:0
// and resting in host memory unless resident; chunk c holds 1000 * c + k.
struct Fixture {
  MemoryTracker tracker;
  std::unique_ptr<ChunkManager> manager;
  std::vector<Chunk*> c;
  std::vector<Tensor> views;

  absl::Status SetUp(comm::ProcessGroup& g, int64_t limit) {
    tracker.SetLimit(kSim, limit);
    ChunkManagerOptions options;
    options.chunk_size = 100;
    options.device = kSim;
    options.rest_device = Device::Cpu();
    options.auto_residency = true;
    manager = std::make_unique<ChunkManager>(&g, options, &tracker);
    CZ_RETURN_IF_ERROR(
        manager->CreateGroup("p", DType::kF32, MemoryCategory::kParam));
    for (int t = 0; t < 4; ++t) {
      std::vector<float> v(100);
      for (int k = 0; k < 100; ++k) v[k] = 1000.0f * t + k;
      CZ_ASSIGN_OR_RETURN(Tensor values, Tensor::FromFloats(v, {100}));
      CZ_ASSIGN_OR_RETURN(Tensor view, manager->AppendTensor(
                                           "p", absl::StrCat("t", t), values));
      views.push_back(view);
    }
    CZ_RETURN_IF_ERROR(manager->CloseGroup("p"));
    for (int t = 0; t < 4; ++t) c.push_back(manager->chunk("p", t));
    return absl::OkStatus();
  }

  // One use of chunk t: access, check its values, release.
  absl::Status Use(int t) {
    CZ_RETURN_IF_ERROR(manager->AccessChunk(c[t]));
    CZ_ASSIGN_OR_RETURN(std::vector<float> got, views[t].ToFloats());
    if (got[0] != 1000.0f * t || got[99] != 1000.0f * t + 99) {
      return absl::InternalError(absl::StrCat("chunk ", t, " lost its values"));
    }
    return manager->ReleaseChunk(c[t]);
  }

  // Forward c0..c3, backward c3..c0.
  void SetForwardBackwardSchedule() {
    manager->SetUseSchedule({c[0], c[1], c[2], c[3], c[3], c[2], c[1], c[0]});
  }

  // Which chunks rest on the device: "0110" for c1 and c2.
  std::string Residents() const {
    std::string s;
    for (const Chunk* chunk : c) s += chunk->rest_device() == kSim ? "1" : "0";
    return s;
  }
};

// Room for three chunks. A chunk whose use ends stays on the device, its
// shard refilled from its full buffer (no copy from the host), when there
// is room for the shard beside the full buffer, or when room can be made
// by sending back residents used later than it (schedule: forward c0..c3,
// backward c3..c0).
TEST(ChunkResidency, KeepsWhatFitsAndEvictsTheFarthestNextUse) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(1, [](comm::ProcessGroup& g) -> absl::Status {
        Fixture f;
        CZ_RETURN_IF_ERROR(f.SetUp(g, 1200));
        f.SetForwardBackwardSchedule();
        std::vector<std::string> after;
        for (int step = 0; step < 2; ++step) {
          for (int t : {0, 1, 2, 3, 3, 2, 1, 0}) {
            CZ_RETURN_IF_ERROR(f.Use(t));
            after.push_back(f.Residents());
            EXPECT_LE(f.tracker.PeakTotal(kSim), 1200);
          }
        }
        // Forward: c0 and c1 stay; keeping c2 sends c0 back (used last),
        // keeping c3 sends c1. Backward: c3 and c2 are on the device; keeping
        // c1 sends c3 (next used after c2), keeping c0 sends c2. Step 2 uses
        // c0 and c1 from the device, and goes on as step 1.
        EXPECT_THAT(after, ElementsAre("1000", "1100", "0110", "0011",  //
                                       "0011", "0011", "0110", "1100",  //
                                       "1100", "1100", "0110", "0011",  //
                                       "0011", "0011", "0110", "1100"));
        const ChunkResidency& r = *f.manager->residency();
        EXPECT_EQ(r.resident_bytes(), 800);
        EXPECT_EQ(r.evictions(), 4 + 4);
        // Step 1 gathered all 4 then c1, c0 from the host; step 2 only c2,
        // c3, c1, c0: half of the 8 that resting on the host costs. Each
        // eviction copies one chunk back.
        EXPECT_EQ(f.manager->TransferredBytes().rest_to_device, (6 + 4) * 400);
        EXPECT_EQ(f.manager->TransferredBytes().device_to_rest, (4 + 4) * 400);
        return absl::OkStatus();
      })));
}

// Without a limit every chunk comes to rest on the device after its first
// use, and later uses copy nothing between host and device.
TEST(ChunkResidency, WithoutALimitEveryChunkStaysOnTheDevice) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(1, [](comm::ProcessGroup& g) -> absl::Status {
        Fixture f;
        CZ_RETURN_IF_ERROR(f.SetUp(g, int64_t{1} << 40));
        for (int t : {0, 1, 2, 3}) CZ_RETURN_IF_ERROR(f.Use(t));
        EXPECT_EQ(f.Residents(), "1111");
        // Each chunk's shard came once, for its first gather; it stayed
        // from its full buffer.
        EXPECT_EQ(f.manager->TransferredBytes().rest_to_device, 4 * 400);
        EXPECT_EQ(f.manager->TransferredBytes().device_to_rest, 0);
        for (int t : {3, 2, 1, 0}) CZ_RETURN_IF_ERROR(f.Use(t));
        EXPECT_EQ(f.manager->TransferredBytes().rest_to_device, 4 * 400);
        EXPECT_EQ(f.manager->residency()->evictions(), 0);
        return absl::OkStatus();
      })));
}

// Activations (any allocation on the device) take room from resting chunks,
// farthest next use first, never from a chunk being used; what cannot be
// freed fails the allocation as it would without residency.
TEST(ChunkResidency, ActivationsReclaimRoomButNeverAChunkInUse) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(1, [](comm::ProcessGroup& g) -> absl::Status {
        Fixture f;
        CZ_RETURN_IF_ERROR(f.SetUp(g, 1600));
        f.SetForwardBackwardSchedule();
        for (int t : {0, 1, 2, 3}) CZ_RETURN_IF_ERROR(f.Use(t));
        EXPECT_EQ(f.Residents(), "0111");  // Keeping c3 sent c0 back.
        // 500 B of activations with 400 free: the clock is at c3's forward
        // use, and c1 is the resident used farthest ahead.
        CZ_RETURN_IF_ERROR(
            f.tracker.TryAdd(kSim, MemoryCategory::kActivation, 500));
        EXPECT_EQ(f.Residents(), "0011");
        // Gathering c3 for its backward use needs 400 B with 300 free: c2
        // goes (c3, beginning its use, never does).
        CZ_RETURN_IF_ERROR(f.manager->AccessChunk(f.c[3]));
        EXPECT_EQ(f.Residents(), "0001");
        // Nothing left to send back but c3, which is in use.
        EXPECT_EQ(
            f.tracker.TryAdd(kSim, MemoryCategory::kActivation, 400).code(),
            absl::StatusCode::kResourceExhausted);
        EXPECT_EQ(f.Residents(), "0001");
        EXPECT_LE(f.tracker.PeakTotal(kSim), 1600);
        // Every value survived the moves.
        CZ_RETURN_IF_ERROR(f.manager->ReleaseChunk(f.c[3]));
        for (int t : {0, 1, 2}) CZ_RETURN_IF_ERROR(f.Use(t));
        return absl::OkStatus();
      })));
}

}  // namespace
}  // namespace chunkzero
