#include "tensor/copy_stream.h"

#include <thread>
#include <vector>

#include "base/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

using ::testing::ElementsAre;

// Tasks run in order, on a thread other than the caller's, while the caller
// goes on; Drain waits for all of them.
TEST(CopyStream, RunsTasksInOrderOnItsOwnThread) {
  CopyStream stream;
  Notification release;
  Mutex mu;
  std::vector<int> order;
  std::thread::id ran_on;
  stream.Enqueue([&] {
    release.WaitForNotification();  // Holds the stream until we say so.
    MutexLock lock(&mu);
    order.push_back(1);
    ran_on = std::this_thread::get_id();
  });
  for (int t = 2; t <= 4; ++t) {
    stream.Enqueue([&, t] {
      MutexLock lock(&mu);
      order.push_back(t);
    });
  }
  // The caller was not blocked: nothing has run yet.
  EXPECT_EQ(stream.tasks_run(), 0);
  release.Notify();
  stream.Drain();
  EXPECT_EQ(stream.tasks_run(), 4);
  MutexLock lock(&mu);
  EXPECT_THAT(order, ElementsAre(1, 2, 3, 4));
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

// Destruction runs what is still queued.
TEST(CopyStream, DestructionRunsWhatIsQueued) {
  int ran = 0;
  {
    CopyStream stream;
    for (int t = 0; t < 100; ++t) stream.Enqueue([&] { ++ran; });
  }
  EXPECT_EQ(ran, 100);
}

}  // namespace
}  // namespace chunkzero
