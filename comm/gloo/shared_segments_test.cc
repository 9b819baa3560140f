#include "comm/gloo/shared_segments.h"

#include <sys/resource.h>

#include <cerrno>
#include <csignal>
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
    ASSERT_EQ(mine.Reserve(bytes), absl::OkStatus());
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
  ASSERT_EQ(first.Reserve(9 * kMiB), absl::OkStatus());
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
  EXPECT_EQ(s.Reserve(1), absl::OkStatus());
  EXPECT_EQ(s.reserved(), 2 * kMiB);
  EXPECT_EQ(s.Reserve(2 * kMiB), absl::OkStatus());
  EXPECT_EQ(s.reserved(), 2 * kMiB);
  EXPECT_EQ(s.Reserve(2 * kMiB + 1), absl::OkStatus());
  EXPECT_EQ(s.reserved(), 4 * kMiB);
  // The next step would pass the cap: the cap itself.
  EXPECT_EQ(s.Reserve(4 * kMiB + 1), absl::OkStatus());
  EXPECT_EQ(s.reserved(), 5 * kMiB);
  EXPECT_EQ(s.Reserve(5 * kMiB + 1),
            absl::ResourceExhaustedError(
                "shared memory: rank 0 needs 5242881 bytes (5.00 MiB) of "
                "shared memory, more than its cap of 5242880 bytes (5.00 MiB, "
                "GlooOptions::max_shared_memory_bytes)"));
  EXPECT_EQ(s.reserved(), 5 * kMiB);
  EXPECT_EQ(s.Reserve(kMiB), absl::OkStatus());
  EXPECT_EQ(s.reserved(), 5 * kMiB);
}

// What SetSegmentFaultForTesting makes fail below.
SegmentCall fault_call = SegmentCall::kGrow;
int fault_errno = 0;
int Fail(int, SegmentCall call, int, size_t) {
  return call == fault_call ? fault_errno : 0;
}

// Reserve says which memory is missing, for which segment and how many
// bytes, as ResourceExhausted; the segment keeps its size and stays usable,
// and a later Reserve, with the memory back, grows it.
TEST(SharedSegments, ReserveSaysWhichMemoryIsMissing) {
  struct Case {
    SegmentCall call;
    int error;
    const char* message;
  };
  const Case cases[] = {
      {SegmentCall::kGrow, ENOSPC,
       "shared memory: rank 0 cannot grow its segment to 4194304 bytes "
       "(4.00 MiB) in /dev/shm (full, or smaller than that): No space left "
       "on device"},
      {SegmentCall::kMapMine, ENOMEM,
       "shared memory: rank 0 cannot map its segment of 4194304 bytes "
       "(4.00 MiB) into its memory: Cannot allocate memory"},
      {SegmentCall::kMapPeer, ENOMEM,
       "shared memory: rank 0 cannot map rank 1's segment of 4194304 bytes "
       "(4.00 MiB) into its memory: Cannot allocate memory"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    auto segments = ConnectAll({64 * kMiB, 64 * kMiB});
    ASSERT_TRUE(segments[0].ok()) << segments[0].status();
    SharedSegments& s = **segments[0];
    ASSERT_EQ(s.Reserve(kMiB), absl::OkStatus());
    std::memset(s.mine(), 7, kMiB);
    fault_call = c.call;
    fault_errno = c.error;
    SetSegmentFaultForTesting(&Fail);
    EXPECT_EQ(s.Reserve(3 * kMiB), absl::ResourceExhaustedError(c.message));
    SetSegmentFaultForTesting(nullptr);
    if (c.call == SegmentCall::kMapPeer) {
      EXPECT_EQ(s.reserved(), 4 * kMiB);  // Grown before the peer's map.
    } else {
      EXPECT_EQ(s.reserved(), 2 * kMiB);
    }
    EXPECT_EQ(s.mine()[kMiB - 1], 7);
    EXPECT_EQ(s.Reserve(3 * kMiB), absl::OkStatus());
    EXPECT_EQ(s.reserved(), 4 * kMiB);
    EXPECT_EQ(s.mine()[kMiB - 1], 7);
  }
}

// The same from the kernel: posix_fallocate past RLIMIT_FSIZE fails (EFBIG)
// as it does past the size of /dev/shm (ENOSPC), without taking memory.
TEST(SharedSegments, ReserveReportsTheKernelsRefusal) {
  auto segments = ConnectAll({64 * kMiB, 64 * kMiB});
  ASSERT_TRUE(segments[0].ok()) << segments[0].status();
  SharedSegments& s = **segments[0];
  rlimit old;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit small = old;
  small.rlim_cur = 3 * kMiB;
  // The kernel signals SIGXFSZ besides failing the call.
  void (*old_handler)(int) = std::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  const absl::Status status = s.Reserve(3 * kMiB);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old), 0);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(status,
            absl::ResourceExhaustedError(
                "shared memory: rank 0 cannot grow its segment to 4194304 "
                "bytes (4.00 MiB) in /dev/shm (full, or smaller than that): "
                "File too large"));
  EXPECT_EQ(s.reserved(), 0u);
  EXPECT_EQ(s.Reserve(3 * kMiB), absl::OkStatus());
}

// Reserve maps the peers' segments too, before this rank says it is ready:
// reading them while the data moves needs no new mapping, so it cannot fail
// for want of memory half-way through a collective.
TEST(SharedSegments, ReserveMapsThePeersSegments) {
  auto segments = ConnectAll({64 * kMiB, 64 * kMiB, 64 * kMiB});
  for (auto& s : segments) ASSERT_TRUE(s.ok()) << s.status();
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ((*segments[r])->Reserve(3 * kMiB), absl::OkStatus());
    std::memset((*segments[r])->mine(), r + 1, 3 * kMiB);
  }
  fault_call = SegmentCall::kMapPeer;
  fault_errno = ENOMEM;
  SetSegmentFaultForTesting(&Fail);
  for (int r = 0; r < 3; ++r) {
    for (int peer = 0; peer < 3; ++peer) {
      if (peer == r) continue;
      absl::StatusOr<const uint8_t*> theirs =
          (*segments[r])->Peer(peer, 3 * kMiB);
      ASSERT_TRUE(theirs.ok()) << theirs.status();
      EXPECT_EQ((*theirs)[3 * kMiB - 1], peer + 1);
    }
  }
  // Past what Reserve mapped, Peer maps, and says why it cannot.
  EXPECT_EQ((*segments[0])->Peer(2, 5 * kMiB).status(),
            absl::ResourceExhaustedError(
                "shared memory: rank 0 cannot map rank 2's segment of 5242880 "
                "bytes (5.00 MiB) into its memory: Cannot allocate memory"));
  SetSegmentFaultForTesting(nullptr);
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
