// A rank that fails with a collective on its chunks in flight, and a peer
// that reaches that collective only later: the failing rank's ChunkManager
// is destroyed first, and nothing may write the memory it freed.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/mutex.h"
#include "base/status_macros.h"
#include "chunk/chunk_manager.h"
#include "comm/fault_injecting_process_group.h"
#include "comm/testing/spawn_ranks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor/memory/allocator.h"

namespace chunkzero {
namespace {

using ::testing::HasSubstr;

constexpr unsigned char kFreed = 0xab;

// Host memory that is never given back while the test runs: a freed block
// is filled with kFreed and kept, so that a write after the free shows.
class QuarantineAllocator final : public Allocator {
 public:
  ~QuarantineAllocator() override {
    for (const Block& b : freed_) std::free(b.ptr);
  }
  Device device() const override { return Device::Cpu(); }
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    void* p = std::aligned_alloc(
        kAllocationAlignment,
        (std::max<size_t>(bytes, 1) + kAllocationAlignment - 1) /
            kAllocationAlignment * kAllocationAlignment);
    if (p == nullptr) return absl::ResourceExhaustedError("test allocator");
    return p;
  }
  void Deallocate(void* ptr, size_t bytes) override {
    std::memset(ptr, kFreed, bytes);
    MutexLock lock(&mu_);
    freed_.push_back({ptr, bytes});
  }
  // Bytes of freed blocks that no longer read kFreed.
  size_t WrittenAfterFree() {
    MutexLock lock(&mu_);
    size_t written = 0;
    for (const Block& b : freed_) {
      const auto* p = static_cast<const unsigned char*>(b.ptr);
      for (size_t i = 0; i < b.bytes; ++i) written += p[i] != kFreed;
    }
    return written;
  }
  size_t freed_blocks() {
    MutexLock lock(&mu_);
    return freed_.size();
  }

 private:
  struct Block {
    void* ptr;
    size_t bytes;
  };
  Mutex mu_;
  std::vector<Block> freed_ ABSL_GUARDED_BY(mu_);
};

TEST(ChunkManagerTeardown, APeerLateToAGatherNeverWritesFreedChunks) {
  constexpr int64_t kElements = 4096;
  // Sharded: the all-gather writes rank 0's full buffer. (Under the owner
  // layout the late peer would read the owner's freed buffer, which only
  // AddressSanitizer sees.)
  {
    const ChunkLayout layout = ChunkLayout::kSharded;
    QuarantineAllocator quarantine;
    AllocatorRegistry registry;
    registry.Register(&quarantine);
    absl::Status late;
    const std::vector<absl::Status> statuses = comm_testing::SpawnRanks(
        2, [&](comm::ProcessGroup& inner) -> absl::Status {
          // Rank 1 reaches its first collective 300 ms late.
          comm::FaultInjectingProcessGroup slow(
              inner, comm::FaultPlan().StallCall(0, absl::Milliseconds(300)));
          comm::ProcessGroup& group =
              inner.rank() == 1 ? static_cast<comm::ProcessGroup&>(slow)
                                : inner;
          ChunkManagerOptions options;
          options.layout = layout;
          options.chunk_size = kElements;
          options.comm_timeout = absl::Seconds(20);
          auto chunks = std::make_unique<ChunkManager>(
              &group, options, nullptr,
              inner.rank() == 0 ? &registry : nullptr);
          CZ_RETURN_IF_ERROR(
              chunks->CreateGroup("p", DType::kF32, MemoryCategory::kParam));
          CZ_ASSIGN_OR_RETURN(Tensor values,
                              Tensor::Zeros({kElements}, DType::kF32));
          CZ_RETURN_IF_ERROR(chunks->AppendTensor("p", "w", values).status());
          CZ_RETURN_IF_ERROR(chunks->CloseGroup("p"));
          if (inner.rank() == 1) {
            late = chunks->AccessChunk(chunks->chunk("p", 0));
            return absl::OkStatus();
          }
          // Rank 0 starts materialising the chunk (a prefetch), then fails
          // and tears down with the collective in flight.
          CZ_ASSIGN_OR_RETURN(std::unique_ptr<comm::Work> prefetch,
                              chunks->StartAccessChunk(chunks->chunk("p", 0)));
          chunks.reset();
          EXPECT_TRUE(prefetch->IsCompleted())
              << "a collective on freed chunks is still running";
          const absl::Status aborted = prefetch->Wait();
          // Cancelled in the rendezvous, or refused before it started if
          // the worker had not reached it yet.
          EXPECT_TRUE(absl::IsCancelled(aborted) ||
                      absl::IsFailedPrecondition(aborted))
              << aborted;
          EXPECT_THAT(std::string(aborted.message()),
                      HasSubstr("rank 0 destroyed its chunks with collectives "
                                "on them in flight"));
          return absl::OkStatus();
        });
    EXPECT_TRUE(comm_testing::AllRanksOk(statuses));
    EXPECT_GT(quarantine.freed_blocks(), 0u);
    EXPECT_EQ(quarantine.WrittenAfterFree(), 0u)
        << "the late peer's collective wrote into rank 0's freed chunk";
    EXPECT_FALSE(late.ok()) << "rank 1 gathered from a rank that had gone";
  }
}

TEST(ChunkManagerTeardown, NothingInFlightLeavesTheGroupUsable) {
  const std::vector<absl::Status> statuses = comm_testing::SpawnRanks(
      2, [&](comm::ProcessGroup& group) -> absl::Status {
        {
          ChunkManagerOptions options;
          options.chunk_size = 64;
          ChunkManager chunks(&group, options);
          CZ_RETURN_IF_ERROR(
              chunks.CreateGroup("p", DType::kF32, MemoryCategory::kParam));
          CZ_ASSIGN_OR_RETURN(Tensor values, Tensor::Zeros({64}, DType::kF32));
          CZ_RETURN_IF_ERROR(chunks.AppendTensor("p", "w", values).status());
          CZ_RETURN_IF_ERROR(chunks.CloseGroup("p"));
          CZ_RETURN_IF_ERROR(chunks.AccessChunk(chunks.chunk("p", 0)));
        }
        std::vector<float> x = {1};
        CZ_RETURN_IF_ERROR(comm::AllReduce(group, comm::MutableBuffer::Of(x)));
        if (x[0] != 2) return absl::InternalError(absl::StrCat("sum ", x[0]));
        return absl::OkStatus();
      });
  EXPECT_TRUE(comm_testing::AllRanksOk(statuses));
}

}  // namespace
}  // namespace chunkzero
