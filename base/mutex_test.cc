#include "base/mutex.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace chunkzero {
namespace {

TEST(Mutex, SerialisesIncrements) {
  Mutex mu;
  int64_t counter = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        MutexLock lock(&mu);
        ++counter;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(counter, 40000);
}

TEST(CondVar, WaitWithDeadlineTimesOut) {
  Mutex mu;
  CondVar cv;
  MutexLock lock(&mu);
  const absl::Time start = absl::Now();
  EXPECT_TRUE(cv.WaitWithDeadline(&mu, start + absl::Milliseconds(20)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(20));
}

TEST(Notification, WakesWaitersAndReportsDeadlines) {
  Notification n;
  EXPECT_FALSE(n.HasBeenNotified());
  EXPECT_FALSE(
      n.WaitForNotificationWithDeadline(absl::Now() + absl::Milliseconds(5)));
  std::thread waiter([&] { n.WaitForNotification(); });
  n.Notify();
  waiter.join();
  EXPECT_TRUE(n.HasBeenNotified());
  EXPECT_TRUE(n.WaitForNotificationWithDeadline(absl::InfinitePast()));
}

}  // namespace
}  // namespace chunkzero
