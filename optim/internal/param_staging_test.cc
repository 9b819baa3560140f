#include "optim/internal/param_staging.h"

#include <memory>
#include <vector>

#include "base/status_macros.h"
#include "comm/testing/spawn_ranks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor/memory/allocator.h"

namespace chunkzero {
namespace optim_internal {
namespace {

using ::chunkzero::comm_testing::AllRanksOk;
using ::chunkzero::comm_testing::SpawnRanks;
using ::testing::ElementsAre;

constexpr Device kSim = Device::Simulated(0);

// A closed f32 chunk of 8 elements 0..7 resting on sim:0.
std::unique_ptr<Chunk> SimChunk(comm::ProcessGroup& g, const char* group) {
  ChunkOptions o;
  o.group = group;
  o.dtype = DType::kF32;
  o.capacity = 8;
  o.layout = ChunkLayout::kReplicated;
  o.device = kSim;
  std::unique_ptr<Chunk> chunk = *Chunk::Create(o, &g);
  EXPECT_TRUE(
      chunk->Append("t", *Tensor::FromFloats({0, 1, 2, 3, 4, 5, 6, 7}, {8}))
          .ok());
  EXPECT_TRUE(chunk->Close().ok());
  return chunk;
}

// Two chunks staged at once: each range arrives on the host, is changed
// there, and lands back in its chunk; the staging memory all goes back.
TEST(ParamStaging, RangesRoundTripThroughHostMemory) {
  EXPECT_TRUE(AllRanksOk(SpawnRanks(1, [](comm::ProcessGroup& g) {
    std::unique_ptr<Chunk> a = SimChunk(g, "a"), b = SimChunk(g, "b");
    std::unique_ptr<AsyncCopier> copier = *AsyncCopier::Create(kSim);
    HostAllocator host(Device::Cpu());
    CountingAllocator counting(&host);
    ParamStaging staging(copier.get(), &counting);
    CZ_RETURN_IF_ERROR(staging.Fetch(a.get(), 2, 5));
    CZ_RETURN_IF_ERROR(staging.Fetch(b.get(), 0, 8));
    CZ_ASSIGN_OR_RETURN(void* got_a, staging.Get(a.get()));
    float* fa = static_cast<float*>(got_a);
    EXPECT_THAT(std::vector<float>(fa, fa + 3), ElementsAre(2, 3, 4));
    for (int k = 0; k < 3; ++k) fa[k] *= 10;
    CZ_RETURN_IF_ERROR(staging.Return(a.get()));
    CZ_ASSIGN_OR_RETURN(void* got_b, staging.Get(b.get()));
    static_cast<float*>(got_b)[7] = -1;
    CZ_RETURN_IF_ERROR(staging.Return(b.get()));
    CZ_RETURN_IF_ERROR(staging.Finish());
    EXPECT_THAT(*a->TensorView(0).ToFloats(),
                ElementsAre(0, 1, 20, 30, 40, 5, 6, 7));
    EXPECT_THAT(*b->TensorView(0).ToFloats(),
                ElementsAre(0, 1, 2, 3, 4, 5, 6, -1));
    EXPECT_EQ(counting.allocations(), 2);
    EXPECT_EQ(counting.live_bytes(), 0);
    return absl::OkStatus();
  })));
}

// A range fetched without copying in only gets memory; Return still
// copies the (overwritten) host range back.
TEST(ParamStaging, ARangeToBeOverwrittenIsNotCopiedIn) {
  EXPECT_TRUE(AllRanksOk(SpawnRanks(1, [](comm::ProcessGroup& g) {
    std::unique_ptr<Chunk> a = SimChunk(g, "a");
    std::unique_ptr<AsyncCopier> copier = *AsyncCopier::Create(kSim);
    HostAllocator host(Device::Cpu());
    ParamStaging staging(copier.get(), &host);
    CZ_RETURN_IF_ERROR(staging.Fetch(a.get(), 0, 4, /*copy_in=*/false));
    CZ_ASSIGN_OR_RETURN(void* got, staging.Get(a.get()));
    float* f = static_cast<float*>(got);
    for (int k = 0; k < 4; ++k) f[k] = -1.0f - k;
    CZ_RETURN_IF_ERROR(staging.Return(a.get()));
    CZ_RETURN_IF_ERROR(staging.Finish());
    EXPECT_THAT(*a->TensorView(0).ToFloats(),
                ElementsAre(-1, -2, -3, -4, 4, 5, 6, 7));
    // One copy issued in all (the return): the next ticket is the second.
    char byte = 0;
    CZ_ASSIGN_OR_RETURN(AsyncCopier::Ticket next,
                        copier->Copy(&byte, Device::Cpu(), &byte, kSim, 0));
    EXPECT_EQ(next, 2);
    return absl::OkStatus();
  })));
}

TEST(ParamStaging, RefusesRangesOutOfTurn) {
  EXPECT_TRUE(AllRanksOk(SpawnRanks(1, [](comm::ProcessGroup& g) {
    std::unique_ptr<Chunk> a = SimChunk(g, "a");
    std::unique_ptr<AsyncCopier> copier = *AsyncCopier::Create(kSim);
    HostAllocator host(Device::Cpu());
    CountingAllocator counting(&host);
    {
      ParamStaging staging(copier.get(), &counting);
      EXPECT_EQ(staging.Get(a.get()).status().message(),
                "chunk a#0 was not fetched");
      EXPECT_EQ(staging.Return(a.get()).code(),
                absl::StatusCode::kFailedPrecondition);
      CZ_RETURN_IF_ERROR(staging.Fetch(a.get(), 0, 8));
      EXPECT_EQ(staging.Fetch(a.get(), 0, 8).message(),
                "chunk a#0 is already staged");
      // Destroyed with a range fetched and never returned: freed.
    }
    EXPECT_EQ(counting.live_bytes(), 0);
    return absl::OkStatus();
  })));
}

}  // namespace
}  // namespace optim_internal
}  // namespace chunkzero
