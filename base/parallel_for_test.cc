#include "base/parallel_for.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

// Restores the default thread count when a test ends.
class ThreadsOverride {
 public:
  explicit ThreadsOverride(int n) { SetParallelThreadsForTesting(n); }
  ~ThreadsOverride() { SetParallelThreadsForTesting(0); }
};

// Runs ParallelFor(n, grain) and checks that each index is visited once and
// that every range is at least `grain` long unless it is the whole range.
void CheckCoverage(size_t n, size_t grain) {
  SCOPED_TRACE(absl::StrCat("n=", n, " grain=", grain));
  std::unique_ptr<std::atomic<int>[]> visits(new std::atomic<int>[n + 1]);
  for (size_t i = 0; i <= n; ++i) visits[i] = 0;
  std::atomic<int> short_ranges{0};
  std::atomic<int> calls{0};
  ParallelFor(n, grain, [&](size_t begin, size_t end) {
    ++calls;
    if (end - begin < std::max<size_t>(grain, 1) && !(begin == 0 && end == n)) {
      ++short_ranges;
    }
    for (size_t i = begin; i < end && i <= n; ++i) ++visits[i];
  });
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += visits[i] != 1;
  EXPECT_EQ(wrong, 0u) << "indices not visited exactly once";
  EXPECT_EQ(visits[n], 0) << "visited past the end";
  EXPECT_EQ(short_ranges, 0);
  if (n == 0) {
    EXPECT_EQ(calls, 0);
  }
}

TEST(ParallelFor, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 8}) {
    SCOPED_TRACE(absl::StrCat("threads=", threads));
    ThreadsOverride override_threads(threads);
    for (size_t n : {0, 1, 2, 3, 7, 64, 100, 1000, 4097, 100003}) {
      for (size_t grain : {0, 1, 2, 3, 16, 1000, 100000, 1000000}) {
        CheckCoverage(n, grain);
      }
    }
  }
}

TEST(ParallelFor, UsesSeveralThreadsWhenAllowed) {
  ThreadsOverride override_threads(4);
  EXPECT_EQ(GetParallelThreads(), 4);
  std::atomic<int> calls{0};
  ParallelFor(1000, 1, [&](size_t, size_t) { ++calls; });
  EXPECT_GT(calls, 1);  // Split into pieces even if one thread ran them all.
}

// ParallelFor(1000) runs as one call of the whole range on this thread.
void ExpectRunsInlineAsOneRange() {
  const std::thread::id caller = std::this_thread::get_id();
  int calls = 0;
  ParallelFor(1000, 1, [&](size_t begin, size_t end) {
    ++calls;
    EXPECT_EQ(begin, 0u);
    EXPECT_EQ(end, 1000u);
    EXPECT_EQ(std::this_thread::get_id(), caller);
  });
  EXPECT_EQ(calls, 1);
}

TEST(ParallelFor, SingleThreadRunsInlineAsOneRange) {
  ThreadsOverride override_threads(1);
  ExpectRunsInlineAsOneRange();
}

// A thread's cap applies to its own calls only, nests, and is undone when
// the scope ends.
TEST(ParallelFor, ScopedThreadsCapsThisThreadOnly) {
  ThreadsOverride override_threads(4);
  {
    ScopedParallelThreads outer(2);
    EXPECT_EQ(GetParallelThreads(), 2);
    {
      ScopedParallelThreads inner(1);
      EXPECT_EQ(GetParallelThreads(), 1);
      ExpectRunsInlineAsOneRange();
      // Another thread keeps the process-wide count.
      int other = 0;
      std::thread([&] { other = GetParallelThreads(); }).join();
      EXPECT_EQ(other, 4);
    }
    EXPECT_EQ(GetParallelThreads(), 2);
    // A cap above the process-wide count does not raise it.
    ScopedParallelThreads wide(16);
    EXPECT_EQ(GetParallelThreads(), 4);
  }
  EXPECT_EQ(GetParallelThreads(), 4);
  // Zero or a negative cap counts as 1.
  ScopedParallelThreads zero(0);
  EXPECT_EQ(GetParallelThreads(), 1);
}

TEST(ParallelFor, ThreadsShareSplitsTheCountAmongCallers) {
  {
    ThreadsOverride override_threads(16);
    EXPECT_EQ(ParallelThreadsShare(1), 16);
    EXPECT_EQ(ParallelThreadsShare(4), 4);
    EXPECT_EQ(ParallelThreadsShare(3), 5);
    EXPECT_EQ(ParallelThreadsShare(0), 16);
    // The share is of this thread's count, cap included.
    ScopedParallelThreads cap(8);
    EXPECT_EQ(ParallelThreadsShare(2), 4);
  }
  ThreadsOverride override_threads(2);
  EXPECT_EQ(ParallelThreadsShare(2), 1);
  EXPECT_EQ(ParallelThreadsShare(8), 1);
}

TEST(ParallelFor, ConcurrentCallersFromEightThreads) {
  ThreadsOverride override_threads(4);
  constexpr int kCallers = 8;
  constexpr size_t kN = 20000;
  std::vector<std::vector<int>> visits(kCallers, std::vector<int>(kN, 0));
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int round = 0; round < 20; ++round) {
        // Each caller writes only its own vector; ranges are disjoint.
        ParallelFor(kN, 100 + c, [&](size_t begin, size_t end) {
          for (size_t i = begin; i < end; ++i) ++visits[c][i];
        });
      }
    });
  }
  for (std::thread& t : callers) t.join();
  for (int c = 0; c < kCallers; ++c) {
    EXPECT_EQ(std::count(visits[c].begin(), visits[c].end(), 20),
              static_cast<long>(kN))
        << "caller " << c;
  }
}

TEST(ParallelFor, NestedCallsComplete) {
  ThreadsOverride override_threads(3);
  constexpr size_t kOuter = 64;
  constexpr size_t kInner = 1000;
  std::vector<std::atomic<int>> visits(kOuter * kInner);
  for (auto& v : visits) v = 0;
  ParallelFor(kOuter, 1, [&](size_t begin, size_t end) {
    for (size_t o = begin; o < end; ++o) {
      ParallelFor(kInner, 10, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) ++visits[o * kInner + i];
        // A third level, so that pool threads also nest.
        ParallelFor(4, 1, [](size_t, size_t) {});
      });
    }
  });
  for (size_t i = 0; i < visits.size(); ++i) {
    ASSERT_EQ(visits[i], 1) << "index " << i;
  }
}

TEST(ParallelFor, BusyPoolDoesNotBlockOtherCallers) {
  // Every pool thread is stuck inside one call until a second call, made
  // while the pool is busy, has finished on its caller's thread alone.
  ThreadsOverride override_threads(3);
  std::atomic<bool> second_done{false};
  std::atomic<int> blocked{0};
  std::thread first([&] {
    ParallelFor(3, 1, [&](size_t, size_t) {
      ++blocked;
      while (!second_done.load()) std::this_thread::yield();
    });
  });
  while (blocked.load() < 1) std::this_thread::yield();
  std::atomic<int> visited{0};
  ParallelFor(100, 1, [&](size_t begin, size_t end) {
    visited += static_cast<int>(end - begin);
  });
  EXPECT_EQ(visited, 100);
  second_done = true;
  first.join();
}

}  // namespace
}  // namespace chunkzero
