#include "comm/gloo/shared_segments.h"

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace comm {
namespace gloo_internal {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// Connects `max_bytes.size()` ranks (threads) over one store; rank r gets
// max_bytes[r].
std::vector<absl::StatusOr<std::unique_ptr<SharedSegments>>> ConnectAll(
    const std::vector<size_t>& max_bytes,
    absl::Duration timeout = absl::Seconds(20)) {
  gloo::rendezvous::HashStore store;
  const int n = static_cast<int>(max_bytes.size());
  std::vector<absl::StatusOr<std::unique_ptr<SharedSegments>>> out(n);
  std::vector<std::thread> threads;
  const absl::Time deadline = absl::Now() + timeout;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      out[r] = SharedSegments::Connect(r, n, store, max_bytes[r], deadline);
    });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

TEST(SharedSegments, EachRankReadsWhatItsPeersWrote) {
  auto segments = ConnectAll({64 * kMiB, 64 * kMiB, 64 * kMiB});
  for (auto& s : segments) {
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_NE(*s, nullptr);
  }
  // Rank r writes r + 1 into its first 3 MiB, across the first growth step.
  const size_t bytes = 3 * kMiB;
  for (int r = 0; r < 3; ++r) {
    SharedSegments& mine = **segments[r];
    ASSERT_TRUE(mine.Reserve(bytes));
    std::memset(mine.mine(), r + 1, bytes);
  }
  for (int r = 0; r < 3; ++r) {
    for (int peer = 0; peer < 3; ++peer) {
      if (peer == r) continue;
      absl::StatusOr<const uint8_t*> theirs = (*segments[r])->Peer(peer, bytes);
      ASSERT_TRUE(theirs.ok()) << theirs.status();
      EXPECT_EQ((*theirs)[0], peer + 1);
      EXPECT_EQ((*theirs)[bytes - 1], peer + 1);
    }
  }
  // A peer that grows later is mapped again, its old data still there.
  SharedSegments& first = **segments[0];
  ASSERT_TRUE(first.Reserve(9 * kMiB));
  first.mine()[9 * kMiB - 1] = 42;
  absl::StatusOr<const uint8_t*> grown = (*segments[1])->Peer(0, 9 * kMiB);
  ASSERT_TRUE(grown.ok()) << grown.status();
  EXPECT_EQ((*grown)[0], 1);
  EXPECT_EQ((*grown)[9 * kMiB - 1], 42);
}

// Segments grow in 2 MiB steps, never past the cap, and never shrink.
TEST(SharedSegments, ReserveGrowsInStepsUpToTheCap) {
  auto segments = ConnectAll({5 * kMiB, 5 * kMiB});
  ASSERT_TRUE(segments[0].ok()) << segments[0].status();
  SharedSegments& s = **segments[0];
  EXPECT_EQ(s.reserved(), 0u);
  EXPECT_TRUE(s.Reserve(1));
  EXPECT_EQ(s.reserved(), 2 * kMiB);
  EXPECT_TRUE(s.Reserve(2 * kMiB));
  EXPECT_EQ(s.reserved(), 2 * kMiB);
  EXPECT_TRUE(s.Reserve(2 * kMiB + 1));
  EXPECT_EQ(s.reserved(), 4 * kMiB);
  // The next step would pass the cap: the cap itself.
  EXPECT_TRUE(s.Reserve(4 * kMiB + 1));
  EXPECT_EQ(s.reserved(), 5 * kMiB);
  EXPECT_FALSE(s.Reserve(5 * kMiB + 1));
  EXPECT_EQ(s.reserved(), 5 * kMiB);
  EXPECT_TRUE(s.Reserve(kMiB));
  EXPECT_EQ(s.reserved(), 5 * kMiB);
}

// A rank without shared memory (cap 0) makes every rank go without.
TEST(SharedSegments, OneRankWithoutMakesAllWithout) {
  auto segments = ConnectAll({kMiB, 0, kMiB});
  for (auto& s : segments) {
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(*s, nullptr);
  }
}

// A rank that never comes is named when the deadline passes.
TEST(SharedSegments, AMissingRankIsNamedAtTheDeadline) {
  gloo::rendezvous::HashStore store;
  absl::StatusOr<std::unique_ptr<SharedSegments>> s = SharedSegments::Connect(
      0, 2, store, kMiB, absl::Now() + absl::Milliseconds(200));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDeadlineExceeded)
      << s.status();
  EXPECT_NE(s.status().message().find("rank 1 did not publish"),
            absl::string_view::npos)
      << s.status();
}

}  // namespace
}  // namespace gloo_internal
}  // namespace comm
}  // namespace chunkzero
