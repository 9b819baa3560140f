#include "tensor/memory/memory_tracker.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

using ::testing::ElementsAre;

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

// Memory moving from one device to another counts once in the peak of all.
TEST(MemoryTracker, PeakAllIsThePeakOfTheSum) {
  MemoryTracker t;
  t.Add(kCpu, MemoryCategory::kParam, 100);
  t.Add(kSim, MemoryCategory::kParam, 100);  // A move: copy, then free.
  t.Subtract(kCpu, MemoryCategory::kParam, 100);
  t.Add(kCpu, MemoryCategory::kMaster, 30);
  EXPECT_EQ(t.CurrentAll(), 130);
  EXPECT_EQ(t.PeakAll(), 200);
  EXPECT_EQ(t.PeakTotal(kCpu) + t.PeakTotal(kSim), 200);
  t.Subtract(kSim, MemoryCategory::kParam, 100);
  t.Add(kCpu, MemoryCategory::kParam, 100);
  EXPECT_EQ(t.PeakAll(), 200);
  EXPECT_EQ(t.PeakTotal(kCpu) + t.PeakTotal(kSim), 230);
  t.ResetPeaks();
  EXPECT_EQ(t.PeakAll(), 130);
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

TEST(MemoryTracker, TryAddStaysWithinTheDeviceLimit) {
  MemoryTracker t;
  EXPECT_EQ(t.Limit(kSim), std::nullopt);
  t.SetLimit(kSim, 16 << 20);
  EXPECT_EQ(t.Limit(kSim), 16 << 20);
  ASSERT_TRUE(t.TryAdd(kSim, MemoryCategory::kParam, 8 << 20).ok());
  ASSERT_TRUE(t.TryAdd(kSim, MemoryCategory::kActivation, 6 << 20).ok());
  // Exactly up to the limit fits; one byte more does not.
  ASSERT_TRUE(t.CheckRoom(kSim, MemoryCategory::kGradAccum, 2 << 20).ok());
  const absl::Status refused =
      t.TryAdd(kSim, MemoryCategory::kParam, (2 << 20) + 1);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.message(),
            "sim:0: cannot hold 2.00 MiB more of param: 14.00 MiB of its "
            "16.00 MiB device memory limit are held (param 8.00 MiB, "
            "activation 6.00 MiB)");
  EXPECT_EQ(t.CheckRoom(kSim, MemoryCategory::kParam, (2 << 20) + 1), refused);
  // A refusal counts nothing, in the current figures or the peaks.
  EXPECT_EQ(t.CurrentTotal(kSim), 14 << 20);
  EXPECT_EQ(t.PeakTotal(kSim), 14 << 20);
  EXPECT_EQ(t.Peak(kSim, MemoryCategory::kParam), 8 << 20);
  ASSERT_TRUE(t.TryAdd(kSim, MemoryCategory::kGradAccum, 2 << 20).ok());
  EXPECT_EQ(t.CurrentTotal(kSim), 16 << 20);
  // Other devices have no limit.
  ASSERT_TRUE(t.TryAdd(kCpu, MemoryCategory::kParam, int64_t{1} << 40).ok());
}

TEST(MemoryTracker, AHostLimitIsNamedAsOne) {
  MemoryTracker t;
  t.SetLimit(kCpu, 1000);
  t.Add(kCpu, MemoryCategory::kOther, 900);
  EXPECT_EQ(t.TryAdd(kCpu, MemoryCategory::kParam, 200).message(),
            "cpu: cannot hold 200 B more of param: 900 B of its 1000 B "
            "host memory limit are held (other 900 B)");
}

TEST(MemoryTracker, ALimitBelowWhatIsHeldRefusesUntilMemoryIsReleased) {
  MemoryTracker t;
  t.Add(kSim, MemoryCategory::kMaster, 1000);
  t.SetLimit(kSim, 600);
  EXPECT_EQ(t.TryAdd(kSim, MemoryCategory::kMaster, 1).message(),
            "sim:0: cannot hold 1 B more of master: 1000 B of its 600 B "
            "device memory limit are held (master 1000 B)");
  t.Subtract(kSim, MemoryCategory::kMaster, 500);
  EXPECT_TRUE(t.TryAdd(kSim, MemoryCategory::kMaster, 100).ok());
  EXPECT_FALSE(t.TryAdd(kSim, MemoryCategory::kMaster, 1).ok());
  // Add counts whatever the limit: it records memory already held.
  t.Add(kSim, MemoryCategory::kMaster, 50);
  EXPECT_EQ(t.CurrentTotal(kSim), 650);
  t.ClearLimit(kSim);
  EXPECT_EQ(t.Limit(kSim), std::nullopt);
  EXPECT_TRUE(t.TryAdd(kSim, MemoryCategory::kMaster, 1 << 30).ok());
}

TEST(MemoryTracker, LimitArithmeticNeverOverflows) {
  MemoryTracker t;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  t.SetLimit(kSim, kMax);
  ASSERT_TRUE(t.TryAdd(kSim, MemoryCategory::kParam, kMax - 10).ok());
  EXPECT_EQ(t.TryAdd(kSim, MemoryCategory::kParam, kMax).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(t.TryAdd(kSim, MemoryCategory::kParam, 10).ok());
  EXPECT_EQ(t.TryAdd(kSim, MemoryCategory::kParam, 1).code(),
            absl::StatusCode::kResourceExhausted);
  // A negative limit is a limit of 0; negative bytes are refused.
  t.SetLimit(kCpu, -5);
  EXPECT_EQ(t.Limit(kCpu), 0);
  EXPECT_TRUE(t.TryAdd(kCpu, MemoryCategory::kParam, 0).ok());
  EXPECT_EQ(t.TryAdd(kCpu, MemoryCategory::kParam, 1).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(t.TryAdd(kCpu, MemoryCategory::kParam, -1).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MemoryTracker, ConcurrentTryAddsNeverPassTheLimit) {
  MemoryTracker t;
  t.SetLimit(kSim, 2500);
  std::atomic<int> accepted{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      for (int k = 0; k < 1000; ++k) {
        if (t.TryAdd(kSim, MemoryCategory::kParam, 1).ok()) ++accepted;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(accepted.load(), 2500);
  EXPECT_EQ(t.CurrentTotal(kSim), 2500);
  EXPECT_EQ(t.PeakTotal(kSim), 2500);
}

// A request past the limit first asks the device's reclaimer for exactly
// the shortfall; what it frees makes room. Its own requests on the device
// are not reclaimed for again, and without enough freed the request fails.
TEST(MemoryTracker, AReclaimerMakesRoomForWhatMustBeAllocated) {
  MemoryTracker t;
  const Device sim = Device::Simulated(0);
  t.SetLimit(sim, 100);
  t.Add(sim, MemoryCategory::kParam, 80);  // Movable: resting chunks.
  std::vector<int64_t> asked;
  t.SetReclaimer(sim, [&](int64_t bytes) -> int64_t {
    asked.push_back(bytes);
    // Re-entering asks nothing more of this reclaimer.
    EXPECT_FALSE(t.TryAdd(sim, MemoryCategory::kOther, 1000).ok());
    const int64_t freed =
        std::min<int64_t>({bytes, 30, t.Current(sim, MemoryCategory::kParam)});
    t.Subtract(sim, MemoryCategory::kParam, freed);
    t.Add(Device::Cpu(), MemoryCategory::kParam, freed);
    return freed;
  });
  EXPECT_TRUE(t.TryAdd(sim, MemoryCategory::kActivation, 40).ok());
  EXPECT_THAT(asked, ElementsAre(20));
  EXPECT_EQ(t.CurrentTotal(sim), 100);
  EXPECT_EQ(t.Current(Device::Cpu(), MemoryCategory::kParam), 20);
  EXPECT_TRUE(t.MakeRoom(sim, MemoryCategory::kActivation, 10).ok());
  EXPECT_THAT(asked, ElementsAre(20, 10));
  EXPECT_EQ(t.CurrentTotal(sim), 90);  // MakeRoom counts nothing.
  // 30 more cannot be freed from 50 of param: the request fails, and the
  // peak never passed the limit.
  EXPECT_EQ(t.TryAdd(sim, MemoryCategory::kActivation, 100).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(asked, ElementsAre(20, 10, 90));
  EXPECT_EQ(t.PeakTotal(sim), 100);
  // An absurd request asks for all but the 40 B of room, without
  // overflowing.
  EXPECT_FALSE(t.TryAdd(sim, MemoryCategory::kActivation,
                        std::numeric_limits<int64_t>::max())
                   .ok());
  EXPECT_EQ(asked.back(), std::numeric_limits<int64_t>::max() - 40);
  t.ClearReclaimer(sim);
  const size_t calls = asked.size();
  EXPECT_FALSE(t.TryAdd(sim, MemoryCategory::kActivation, 90).ok());
  EXPECT_EQ(asked.size(), calls);
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
