#include "tensor/memory_tracker.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace chunkzero {
namespace {

const Device kCpu = Device::Cpu();
const Device kSim = Device::Simulated(0);

TEST(MemoryTracker, CountsCurrentAndPeakPerCategory) {
  MemoryTracker t;
  t.Add(kCpu, MemoryCategory::kParam, 100);
  t.Add(kCpu, MemoryCategory::kMaster, 400);
  t.Subtract(kCpu, MemoryCategory::kParam, 100);
  t.Add(kCpu, MemoryCategory::kParam, 60);
  EXPECT_EQ(t.Current(kCpu, MemoryCategory::kParam), 60);
  EXPECT_EQ(t.Peak(kCpu, MemoryCategory::kParam), 100);
  EXPECT_EQ(t.Current(kCpu, MemoryCategory::kMaster), 400);
  // The device total peaks at 500, not at 100 + 400 + 60.
  EXPECT_EQ(t.CurrentTotal(kCpu), 460);
  EXPECT_EQ(t.PeakTotal(kCpu), 500);
  EXPECT_EQ(t.CurrentTotal(kSim), 0);
  EXPECT_EQ(t.Peak(kSim, MemoryCategory::kComm), 0);
}

TEST(MemoryTracker, DevicesAreSeparate) {
  MemoryTracker t;
  t.Add(kCpu, MemoryCategory::kOptimState, 8);
  t.Add(kSim, MemoryCategory::kOptimState, 16);
  EXPECT_EQ(t.Current(kCpu, MemoryCategory::kOptimState), 8);
  EXPECT_EQ(t.Current(kSim, MemoryCategory::kOptimState), 16);
  MemoryTracker::Snapshot s = t.Snap();
  ASSERT_EQ(s.total.size(), 2u);
  EXPECT_EQ(s.total[kSim].current, 16);
  EXPECT_EQ(
      s.by_category[kCpu][static_cast<int>(MemoryCategory::kOptimState)].peak,
      8);
}

TEST(MemoryTracker, ResetPeaksStartsANewWindow) {
  MemoryTracker t;
  t.Add(kCpu, MemoryCategory::kComm, 1000);
  t.Subtract(kCpu, MemoryCategory::kComm, 900);
  t.ResetPeaks();
  EXPECT_EQ(t.Peak(kCpu, MemoryCategory::kComm), 100);
  EXPECT_EQ(t.PeakTotal(kCpu), 100);
  t.Add(kCpu, MemoryCategory::kComm, 50);
  EXPECT_EQ(t.Peak(kCpu, MemoryCategory::kComm), 150);
}

TEST(MemoryTracker, ConcurrentUpdatesAreExact) {
  MemoryTracker t;
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&t, i] {
      for (int k = 0; k < 1000; ++k) {
        t.Add(kCpu, MemoryCategory::kParam, i + 1);
        t.Subtract(kCpu, MemoryCategory::kParam, i + 1);
        t.Add(kCpu, MemoryCategory::kParam, 1);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(t.Current(kCpu, MemoryCategory::kParam), 4000);
  // The peak is at least the final value and at most final + 1+2+3+4.
  EXPECT_GE(t.Peak(kCpu, MemoryCategory::kParam), 4000);
  EXPECT_LE(t.Peak(kCpu, MemoryCategory::kParam), 4010);
}

TEST(MemoryTracker, CategoryNames) {
  EXPECT_EQ(MemoryCategoryName(MemoryCategory::kParam), "param");
  EXPECT_EQ(MemoryCategoryName(MemoryCategory::kMaster), "master");
  EXPECT_EQ(MemoryCategoryName(MemoryCategory::kOptimState), "optim_state");
  EXPECT_EQ(MemoryCategoryName(MemoryCategory::kGradAccum), "grad_accum");
  EXPECT_EQ(MemoryCategoryName(MemoryCategory::kComm), "comm");
}

TEST(MemoryTrackerDeathTest, FreeingMoreThanLiveIsABug) {
  MemoryTracker t;
  t.Add(kCpu, MemoryCategory::kParam, 10);
  EXPECT_DEATH(t.Subtract(kCpu, MemoryCategory::kParam, 11),
               "freeing 11 bytes of param on cpu but only 10 are live");
}

}  // namespace
}  // namespace chunkzero
