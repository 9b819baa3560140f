// Chunks on a real GPU (cuda:0): moving between the host and the GPU
// re-points every view, access and release gather and scatter there (the
// collectives staged through pinned host memory, as ranks sharing a GPU
// do), and the grad write and overflow check run on the GPU. The same
// steps on the simulated device are chunk_test's. Skips where no GPU is
// visible.
#include <limits>
#include <memory>
#include <vector>

#include "base/status_macros.h"
#include "chunk/chunk.h"
#include "chunk/chunk_manager.h"
#include "comm/staging_process_group.h"
#include "comm/testing/spawn_ranks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor/cuda/cuda_runtime.h"
#include "tensor/memory/caching_allocator.h"

namespace chunkzero {
namespace {

using ::chunkzero::comm_testing::AllRanksOk;
using ::chunkzero::comm_testing::SpawnRanks;
using ::testing::ElementsAre;

constexpr Device kGpu = Device::Cuda(0);

class ChunkOnGpu : public ::testing::TestWithParam<ChunkLayout> {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no GPU visible (built with CUDA: " << BuiltWithCuda()
                   << ")";
    }
  }
};

// Per rank: the staged group over the in-process one, and a tracker.
struct GpuRank {
  explicit GpuRank(comm::ProcessGroup& inner)
      : staging(&pinned), group(&inner, kGpu, &staging) {}
  PinnedHostAllocator pinned;
  CachingAllocator staging;
  comm::StagingProcessGroup group;
  MemoryTracker tracker;
  StorageOptions options() {
    return StorageOptions{MemoryCategory::kParam, &tracker, nullptr};
  }
};

ChunkOptions Options(ChunkLayout layout, DType dtype, StorageOptions storage) {
  ChunkOptions o;
  o.group = "bf16_param";
  o.index = 0;
  o.dtype = dtype;
  o.capacity = 10;
  o.layout = layout;
  o.storage = storage;
  o.comm_timeout = absl::Seconds(20);
  return o;
}

std::vector<Tensor> AppendAbc(Chunk& chunk) {
  return {
      *chunk.Append("a", *Tensor::FromFloats({1, 2, 3}, {3}, chunk.dtype())),
      *chunk.Append("b",
                    *Tensor::FromFloats({4, 5, 6, 7, 8}, {5}, chunk.dtype())),
      *chunk.Append("c", *Tensor::FromFloats({9, 10}, {2, 1}, chunk.dtype()))};
}

TEST_P(ChunkOnGpu, MoveToTheGpuAndBackKeepsViewsAndValues) {
  const ChunkLayout layout = GetParam();
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(2, [&](comm::ProcessGroup& g) -> absl::Status {
        GpuRank rank(g);
        std::unique_ptr<Chunk> chunk = *Chunk::Create(
            Options(layout, DType::kBF16, rank.options()), &rank.group);
        std::vector<Tensor> v = AppendAbc(*chunk);
        CZ_RETURN_IF_ERROR(chunk->Close());
        CZ_RETURN_IF_ERROR(chunk->Access());
        const int64_t bytes =
            rank.tracker.Current(Device::Cpu(), MemoryCategory::kParam);
        CZ_RETURN_IF_ERROR(chunk->MoveTo(kGpu));
        EXPECT_EQ(chunk->device(), kGpu);
        EXPECT_EQ(v[1].device(), kGpu);
        EXPECT_EQ(v[1].raw_data(),
                  static_cast<char*>(chunk->FullView().raw_data()) + 6);
        EXPECT_THAT(*v[1].ToFloats(), ElementsAre(4, 5, 6, 7, 8));
        EXPECT_EQ(rank.tracker.Current(kGpu, MemoryCategory::kParam), bytes);
        EXPECT_EQ(rank.tracker.Current(Device::Cpu(), MemoryCategory::kParam),
                  0);
        // Release and access again on the GPU: the gather lands there.
        CZ_RETURN_IF_ERROR(chunk->Release());
        CZ_RETURN_IF_ERROR(chunk->Access());
        EXPECT_THAT(*v[2].ToFloats(), ElementsAre(9, 10));
        EXPECT_THAT(*v[0].ToFloats(), ElementsAre(1, 2, 3));
        CZ_RETURN_IF_ERROR(chunk->MoveTo(Device::Cpu()));
        EXPECT_EQ(v[0].device(), Device::Cpu());
        EXPECT_THAT(*v[0].ToFloats(), ElementsAre(1, 2, 3));
        EXPECT_EQ(rank.tracker.Current(kGpu, MemoryCategory::kParam), 0);
        return chunk->Release();
      })));
}

// The backward's grad write (scaled, f32 on the host into the bf16 chunk
// on the GPU) and the overflow check run against the GPU payload.
TEST_P(ChunkOnGpu, GradWriteAndOverflowCheckOnTheGpu) {
  const ChunkLayout layout = GetParam();
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(2, [&](comm::ProcessGroup& g) -> absl::Status {
        GpuRank rank(g);
        std::unique_ptr<Chunk> chunk = *Chunk::Create(
            Options(layout, DType::kBF16, rank.options()), &rank.group);
        std::vector<Tensor> v = AppendAbc(*chunk);
        CZ_RETURN_IF_ERROR(chunk->Close());
        CZ_RETURN_IF_ERROR(chunk->MoveTo(kGpu));
        CZ_RETURN_IF_ERROR(chunk->Access());
        CZ_ASSIGN_OR_RETURN(bool overflow, chunk->HasInfOrNan());
        EXPECT_FALSE(overflow);
        CZ_RETURN_IF_ERROR(chunk->WriteTensorScaled(
            1, *Tensor::FromFloats({2, 4, 6, 8, 10}, {5}), 0.5f));
        EXPECT_THAT(*v[1].ToFloats(), ElementsAre(1, 2, 3, 4, 5));
        CZ_RETURN_IF_ERROR(chunk->WriteTensorScaled(
            2,
            *Tensor::FromFloats({std::numeric_limits<float>::infinity(), 1},
                                {2, 1}),
            1.0f));
        CZ_ASSIGN_OR_RETURN(overflow, chunk->HasInfOrNan());
        EXPECT_TRUE(overflow);
        return chunk->Release();
      })));
}

// Chunks that compute on the GPU and rest on the host (parameter offload)
// rest in pinned memory, and each access brings them to the GPU.
TEST_P(ChunkOnGpu, OffloadedChunksRestInPinnedMemory) {
  const ChunkLayout layout = GetParam();
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(2, [&](comm::ProcessGroup& g) -> absl::Status {
        GpuRank rank(g);
        ChunkManagerOptions options;
        options.layout = layout;
        options.chunk_size = 10;
        options.device = kGpu;
        options.rest_device = Device::Cpu();
        ChunkManager manager(&rank.group, options, &rank.tracker);
        CZ_RETURN_IF_ERROR(
            manager.CreateGroup("p", DType::kBF16, MemoryCategory::kParam));
        CZ_RETURN_IF_ERROR(
            manager
                .AppendTensor("p", "a",
                              *Tensor::FromFloats({1, 2, 3}, {3}, DType::kBF16))
                .status());
        CZ_RETURN_IF_ERROR(manager.CloseGroup("p"));
        Chunk* chunk = manager.chunk("p", 0);
        Tensor rest = chunk->ShardStorageView();
        if (rest.is_materialized()) {
          EXPECT_EQ(rest.device(), Device::Cpu());
          EXPECT_TRUE(*CudaIsPinned(rest.raw_data()));
        }
        CZ_RETURN_IF_ERROR(manager.AccessChunk(chunk));
        EXPECT_EQ(chunk->FullView().device(), kGpu);
        EXPECT_THAT(*chunk->TensorView(0).ToFloats(), ElementsAre(1, 2, 3));
        return manager.ReleaseChunk(chunk);
      })));
}

INSTANTIATE_TEST_SUITE_P(Layouts, ChunkOnGpu,
                         ::testing::Values(ChunkLayout::kReplicated,
                                           ChunkLayout::kOwner,
                                           ChunkLayout::kSharded),
                         [](const auto& info) {
                           return std::string(ChunkLayoutName(info.param));
                         });

}  // namespace
}  // namespace chunkzero
