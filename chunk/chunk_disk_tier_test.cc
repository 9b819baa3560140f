#include "chunk/chunk_disk_tier.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "chunk/chunk.h"
#include "comm/testing/spawn_ranks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor/memory/memory_tracker.h"

namespace chunkzero {
namespace {

namespace fs = std::filesystem;
using ::chunkzero::comm_testing::SpawnRanks;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp",
                                       "/chunk_disk_tier_test/", name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(ChunkDiskTier, RegionsGrowTheFileAndRoundTripAnySize) {
  const std::string dir = TestDir("regions");
  absl::StatusOr<std::unique_ptr<ChunkDiskTier>> disk =
      ChunkDiskTier::Create(dir, IoEngineKind::kThreads);
  ASSERT_TRUE(disk.ok()) << disk.status();
  const DiskRegion a = *(*disk)->Reserve(10);
  const DiskRegion b = *(*disk)->Reserve(5000);
  EXPECT_EQ(a.offset, 0);
  EXPECT_EQ(a.bytes, 4096);
  EXPECT_EQ(b.offset, 4096);
  EXPECT_EQ(b.bytes, 8192);
  EXPECT_EQ((*disk)->file().size(), 12288);
  std::vector<char> out(5000), in(5000);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<char>(i * 7);
  ASSERT_TRUE((*disk)->Write(b, out.data(), out.size(), "b").ok());
  ASSERT_TRUE((*disk)->Write(a, "0123456789", 10, "a").ok());
  ASSERT_TRUE((*disk)->Read(b, in.data(), in.size(), "b").ok());
  EXPECT_EQ(in, out);
  char ten[10];
  ASSERT_TRUE((*disk)->Read(a, ten, 10, "a").ok());
  EXPECT_EQ(std::string(ten, 10), "0123456789");
  // Whole regions move: 8192 + 4096 each way.
  EXPECT_EQ((*disk)->stats().bytes_written, 12288);
  EXPECT_EQ((*disk)->stats().bytes_read, 12288);
  // Write and Read wait for the disk from submission to completion: its
  // busy time is the engine's, and none of it is hidden.
  const DiskTierStats stats = (*disk)->stats();
  EXPECT_GT(stats.seconds_busy, 0);
  EXPECT_EQ(stats.seconds_busy, (*disk)->engine().busy_seconds());
  EXPECT_LE(stats.seconds_busy, stats.seconds_waited);
  EXPECT_THAT((*disk)->Write(a, out.data(), 5000, "a").message(),
              HasSubstr("a: 5000 bytes for a region of 4096"));
  AlignedBuffer small = *AlignedBuffer::Create(4096);
  const std::string what = "b";
  EXPECT_EQ((*disk)->StartRead(b, 0, b.bytes, small, &what).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(fs::is_empty(dir));
}

// A region larger than the bounce buffer moves a section at a time: the
// host copy stays at 32 MiB for a 40 MiB payload.
TEST(ChunkDiskTier, ALargeRegionGoesThroughABoundedBounceBuffer) {
  const std::string dir = TestDir("large");
  auto disk = *ChunkDiskTier::Create(dir, IoEngineKind::kThreads);
  const size_t bytes = (size_t{40} << 20) + 100;
  const DiskRegion region = *disk->Reserve(static_cast<int64_t>(bytes));
  std::vector<char> out(bytes), in(bytes);
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<char>(i * 13 + 1);
  ASSERT_TRUE(disk->Write(region, out.data(), bytes, "large").ok());
  ASSERT_TRUE(disk->Read(region, in.data(), bytes, "large").ok());
  EXPECT_TRUE(in == out);
  EXPECT_EQ(disk->bounce_bytes(), static_cast<size_t>(kBounceBytes));
  EXPECT_EQ(disk->stats().bytes_written, region.bytes);
}

ChunkOptions Options(ChunkLayout layout, MemoryTracker* tracker) {
  ChunkOptions o;
  o.group = "f32_master";
  o.index = 1;
  o.dtype = DType::kF32;
  o.capacity = 10;
  o.layout = layout;
  o.owner = 1;
  o.comm_timeout = absl::Seconds(20);
  o.storage = StorageOptions{MemoryCategory::kOptimState, tracker, nullptr};
  return o;
}

// Every layout on 2 ranks: a spilled chunk holds no memory, comes back for
// an access with its values, takes writes made while accessed back to
// disk, and returns to memory for good with UnspillRest.
TEST(ChunkDiskTier, AChunkRestsOnDiskBetweenAccesses) {
  for (ChunkLayout layout :
       {ChunkLayout::kReplicated, ChunkLayout::kOwner, ChunkLayout::kSharded}) {
    SCOPED_TRACE(testing::Message() << layout);
    const std::string dir = TestDir("rest");
    EXPECT_TRUE(comm_testing::AllRanksOk(
        SpawnRanks(2, [&](comm::ProcessGroup& g) -> absl::Status {
          MemoryTracker tracker;
          auto disk = *ChunkDiskTier::Create(dir);
          auto chunk = *Chunk::Create(Options(layout, &tracker), &g);
          Tensor a = *chunk->Append("a", *Tensor::FromFloats({1, 2, 3}, {3}));
          Tensor b = *chunk->Append(
              "b", *Tensor::FromFloats({4, 5, 6, 7, 8, 9, 10}, {7}));
          if (!chunk->Close().ok()) return absl::InternalError("close");
          const int64_t at_rest =
              tracker.Current(Device::Cpu(), MemoryCategory::kOptimState);
          EXPECT_EQ(chunk->rest_payload_bytes(), at_rest);
          absl::Status spilled = chunk->SpillRest(disk.get());
          if (!spilled.ok()) return spilled;
          EXPECT_TRUE(chunk->rests_on_disk());
          EXPECT_EQ(chunk->payload_on_disk(), at_rest > 0);
          EXPECT_EQ(tracker.Current(Device::Cpu(), MemoryCategory::kOptimState),
                    0);
          EXPECT_EQ(disk->stats().bytes_written, at_rest > 0 ? 4096 : 0);
          EXPECT_THAT(chunk->MoveRestTo(Device::Simulated(0)).message(),
                      HasSubstr("it rests on disk (a scratch file in " + dir));

          absl::Status accessed = chunk->Access();
          if (!accessed.ok()) return accessed;
          EXPECT_FALSE(chunk->payload_on_disk());
          EXPECT_THAT(*b.ToFloats(), ElementsAre(4, 5, 6, 7, 8, 9, 10));
          // A write while accessed goes to disk with the release.
          EXPECT_TRUE(chunk
                          ->CopyTensorToChunkSlice(
                              0, *Tensor::FromFloats({-1, -2, -3}, {3}))
                          .ok());
          absl::Status released = chunk->Release();
          if (!released.ok()) return released;
          EXPECT_EQ(chunk->payload_on_disk(), at_rest > 0);
          EXPECT_EQ(tracker.Current(Device::Cpu(), MemoryCategory::kOptimState),
                    0);
          if (!chunk->Access().ok()) return absl::InternalError("access 2");
          EXPECT_THAT(*a.ToFloats(), ElementsAre(-1, -2, -3));
          if (!chunk->Release().ok()) return absl::InternalError("release 2");

          absl::Status unspilled = chunk->UnspillRest();
          if (!unspilled.ok()) return unspilled;
          EXPECT_FALSE(chunk->rests_on_disk());
          EXPECT_EQ(tracker.Current(Device::Cpu(), MemoryCategory::kOptimState),
                    at_rest);
          if (chunk->is_holder()) {
            EXPECT_THAT(*a.ToFloats(), ElementsAre(-1, -2, -3));
          }
          return absl::OkStatus();
        })));
  }
}

}  // namespace
}  // namespace chunkzero
