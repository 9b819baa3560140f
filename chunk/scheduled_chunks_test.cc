#include "chunk/scheduled_chunks.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "comm/testing/spawn_ranks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

using ::chunkzero::comm_testing::AllRanksOk;
using ::chunkzero::comm_testing::SpawnRanks;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Optional;

// Runs `body` with `n` one-element chunks of a one-rank group.
template <typename Body>
void WithChunks(int n, Body body) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(1, [&](comm::ProcessGroup& g) -> absl::Status {
        std::vector<std::unique_ptr<Chunk>> owned;
        std::vector<Chunk*> c;
        for (int i = 0; i < n; ++i) {
          ChunkOptions options;
          options.capacity = 1;
          owned.push_back(*Chunk::Create(options, &g));
          c.push_back(owned.back().get());
        }
        body(c);
        return absl::OkStatus();
      })));
}

bool Any(const Chunk&) { return true; }

TEST(ScheduledChunks, AddsEachChunkOnceAndForgets) {
  WithChunks(3, [](const std::vector<Chunk*>& c) {
    ScheduledChunks chunks(ScheduledChunks::Ties::kAddedFirst);
    EXPECT_TRUE(chunks.Add(c[1]));
    EXPECT_TRUE(chunks.Add(c[0]));
    EXPECT_FALSE(chunks.Add(c[1]));
    EXPECT_THAT(chunks.chunks(), ElementsAre(c[1], c[0]));
    EXPECT_TRUE(chunks.contains(c[0]));
    EXPECT_FALSE(chunks.contains(c[2]));
    chunks.SetSchedule({c[0], c[1], c[0]});
    chunks.Forget(c[1]);
    EXPECT_THAT(chunks.chunks(), ElementsAre(c[0]));
    EXPECT_EQ(chunks.schedule().size(), 2);  // c[1]'s use is gone too.
    EXPECT_EQ(chunks.schedule().Distance(c[1]), UseSchedule::kNever);
  });
}

TEST(ScheduledChunks, FarthestNextUseFirstAndNeverTheOneBeginning) {
  WithChunks(4, [](const std::vector<Chunk*>& c) {
    ScheduledChunks chunks(ScheduledChunks::Ties::kAddedFirst);
    for (Chunk* chunk : c) chunks.Add(chunk);
    chunks.SetSchedule({c[0], c[1], c[2], c[3], c[3], c[2], c[1], c[0]});
    chunks.Began(c[0]);
    chunks.Began(c[1]);
    // From here: c[2] in 1, c[3] in 2, c[1] in 5, c[0] in 6 uses.
    EXPECT_THAT(chunks.FarthestFirst(Any), ElementsAre(c[0], c[3], c[2]));
    EXPECT_THAT(chunks.FarthestFirst(
                    [&](const Chunk& chunk) { return &chunk != c[3]; }),
                ElementsAre(c[0], c[2]));
    // Forgetting the chunk beginning lets no dangling pointer stay.
    chunks.Forget(c[1]);
    EXPECT_THAT(chunks.FarthestFirst(Any), ElementsAre(c[3], c[2], c[0]));
  });
}

// Uses that are not the step's (a forward-only pass) move the clock; put
// back, the next uses are planned as if they had not happened.
TEST(ScheduledChunks, TheClockPutBackPlansAsBefore) {
  WithChunks(3, [](const std::vector<Chunk*>& c) {
    ScheduledChunks chunks(ScheduledChunks::Ties::kAddedFirst);
    for (Chunk* chunk : c) chunks.Add(chunk);
    chunks.SetSchedule({c[0], c[1], c[2], c[2], c[1], c[0]});
    chunks.Began(c[0]);
    const ScheduledChunks::Clock saved = chunks.clock();
    EXPECT_EQ(saved.clock, 0);
    EXPECT_EQ(saved.beginning, c[0]);
    const std::vector<Chunk*> before = chunks.FarthestFirst(Any);
    chunks.Began(c[1]);
    chunks.Began(c[2]);
    EXPECT_NE(chunks.FarthestFirst(Any), before);
    chunks.set_clock(saved);
    EXPECT_EQ(chunks.FarthestFirst(Any), before);
    EXPECT_EQ(chunks.schedule().Distance(c[1]), 1);
  });
}

TEST(ScheduledChunks, TiesGoInTheOrderAskedFor) {
  WithChunks(3, [](const std::vector<Chunk*>& c) {
    // No schedule: every next use is equally far ("never").
    ScheduledChunks first(ScheduledChunks::Ties::kAddedFirst);
    ScheduledChunks last(ScheduledChunks::Ties::kAddedLast);
    for (Chunk* chunk : c) {
      first.Add(chunk);
      last.Add(chunk);
    }
    EXPECT_THAT(first.FarthestFirst(Any), ElementsAre(c[0], c[1], c[2]));
    EXPECT_THAT(last.FarthestFirst(Any), ElementsAre(c[2], c[1], c[0]));
    // Unscheduled chunks are farther than any scheduled one.
    last.SetSchedule({c[1]});
    EXPECT_THAT(last.FarthestFirst(Any), ElementsAre(c[2], c[0], c[1]));
  });
}

TEST(ScheduledChunks, RoomComesOnlyFromChunksUsedLater) {
  WithChunks(4, [](const std::vector<Chunk*>& c) {
    ScheduledChunks chunks(ScheduledChunks::Ties::kAddedFirst);
    for (Chunk* chunk : c) chunks.Add(chunk);
    chunks.SetSchedule({c[0], c[1], c[2], c[3]});
    // Bytes: c[k] holds 10 * (k + 1).
    auto bytes = [&](const Chunk& chunk) -> int64_t {
      for (int k = 0; k < 4; ++k) {
        if (&chunk == c[k]) return 10 * (k + 1);
      }
      return 0;
    };
    const std::vector<Chunk*> order = chunks.FarthestFirst(Any);
    ASSERT_THAT(order, ElementsAre(c[3], c[2], c[1], c[0]));
    // Enough room already: nothing goes.
    EXPECT_THAT(chunks.RoomFor(c[0], 5, 5, order, bytes), Optional(IsEmpty()));
    // The fewest from the front: c[3] (40) brings 5 to 45.
    EXPECT_THAT(chunks.RoomFor(c[0], 45, 5, order, bytes),
                Optional(ElementsAre(c[3])));
    EXPECT_THAT(chunks.RoomFor(c[0], 46, 5, order, bytes),
                Optional(ElementsAre(c[3], c[2])));
    // For c[1]'s use only c[3] and c[2] are later: 5 + 40 + 30 = 75.
    EXPECT_THAT(chunks.RoomFor(c[1], 75, 5, order, bytes),
                Optional(ElementsAre(c[3], c[2])));
    EXPECT_EQ(chunks.RoomFor(c[1], 76, 5, order, bytes), std::nullopt);
    // Nothing is used later than the last chunk of the step.
    EXPECT_EQ(chunks.RoomFor(c[3], 6, 5, order, bytes), std::nullopt);
  });
}

}  // namespace
}  // namespace chunkzero
