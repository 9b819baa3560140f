#include "optim/internal/disk_staging.h"

#include <array>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/testing/spawn_ranks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace optim_internal {
namespace {

using ::testing::HasSubstr;

std::string TestDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/disk_staging_test");
  std::filesystem::create_directories(dir);
  return dir;
}

// Two groups of three chunks of 5000 f32 (the last block of each payload
// only partly used) resting on disk, updated in pieces of 1024 elements:
// every element is read, incremented and written exactly once, whatever
// piece or chunk boundary it sits at.
TEST(DiskStaging, PiecesReadUpdateAndWriteEveryElementOnce) {
  EXPECT_TRUE(comm_testing::AllRanksOk(
      comm_testing::SpawnRanks(1, [](comm::ProcessGroup& g) -> absl::Status {
        auto disk = *ChunkDiskTier::Create(TestDir());
        constexpr int64_t kElements = 5000;
        std::vector<std::unique_ptr<Chunk>> chunks;
        std::vector<Tensor> views;
        for (int c = 0; c < 6; ++c) {
          ChunkOptions o;
          o.group = c % 2 == 0 ? "f32_master" : "exp_avg";
          o.index = c;
          o.dtype = DType::kF32;
          o.capacity = kElements;
          o.layout = ChunkLayout::kReplicated;
          auto chunk = *Chunk::Create(o, &g);
          std::vector<float> values(kElements);
          for (int64_t i = 0; i < kElements; ++i) values[i] = 10000.0f * c + i;
          views.push_back(
              *chunk->Append("w", *Tensor::FromFloats(values, {kElements})));
          if (!chunk->Close().ok()) return absl::InternalError("close");
          if (!chunk->SpillRest(disk.get()).ok()) {
            return absl::InternalError("spill");
          }
          chunks.push_back(std::move(chunk));
        }
        MemoryTracker tracker;
        disk->set_memory_tracker(&tracker);
        auto staging_owner =
            std::make_unique<DiskStaging>(disk.get(), &tracker);
        DiskStaging& staging = *staging_owner;
        // (chunk pair, first element, end)
        std::vector<std::array<int64_t, 3>> pieces;
        for (int64_t pair = 0; pair < 3; ++pair) {
          for (int64_t b = 0; b < kElements; b += 1024) {
            pieces.push_back({pair, b, std::min(kElements, b + 1024)});
          }
        }
        auto fetch = [&](size_t u) -> absl::Status {
          if (u >= pieces.size()) return absl::OkStatus();
          const auto [pair, b, e] = pieces[u];
          return staging.Fetch(
              {chunks[2 * pair].get(), chunks[2 * pair + 1].get()}, b * 4,
              (e - b) * 4);
        };
        if (absl::Status s = fetch(0); !s.ok()) return s;
        for (size_t u = 0; u < pieces.size(); ++u) {
          if (absl::Status s = fetch(u + 1); !s.ok()) return s;
          absl::StatusOr<std::vector<char*>> p = staging.Get(u);
          if (!p.ok()) return p.status();
          const auto [pair, b, e] = pieces[u];
          for (char* payload : *p) {
            float* f = reinterpret_cast<float*>(payload);
            for (int64_t i = 0; i < e - b; ++i) f[i] += 0.5f;
          }
          if (absl::Status s = staging.Return(u); !s.ok()) return s;
        }
        if (absl::Status s = staging.Finish(); !s.ok()) return s;
        // Three sets of two one-block buffers, counted until the staging
        // goes; the tier's bounce buffer (the spills wrote 20480-byte
        // regions through it) is counted too.
        EXPECT_EQ(tracker.Current(Device::Cpu(), MemoryCategory::kOther),
                  3 * 2 * 4096 + 20480);
        staging_owner.reset();
        EXPECT_EQ(tracker.Current(Device::Cpu(), MemoryCategory::kOther),
                  20480);
        disk->set_memory_tracker(nullptr);
        EXPECT_EQ(tracker.Current(Device::Cpu(), MemoryCategory::kOther), 0);
        // Read back through the chunks.
        for (int c = 0; c < 6; ++c) {
          std::vector<float> back(kElements);
          if (!chunks[c]->ReadRestPayload(back.data()).ok()) {
            return absl::InternalError("read back");
          }
          for (int64_t i = 0; i < kElements; ++i) {
            if (back[i] != 10000.0f * c + i + 0.5f) {
              return absl::InternalError(
                  absl::StrCat("chunk ", c, " element ", i, " is ", back[i]));
            }
          }
        }
        // A span outside the payload is refused, naming the chunk.
        DiskStaging again(disk.get());
        const absl::Status outside =
            again.Fetch({chunks[0].get()}, 4096, kElements * 4);
        EXPECT_EQ(outside.code(), absl::StatusCode::kInvalidArgument);
        EXPECT_THAT(outside.message(), HasSubstr("of chunk f32_master"));
        return absl::OkStatus();
      })));
}

}  // namespace
}  // namespace optim_internal
}  // namespace chunkzero
