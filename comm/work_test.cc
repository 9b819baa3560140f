#include "comm/work.h"

#include <memory>
#include <thread>

#include "absl/time/clock.h"
#include "base/mutex.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace comm {
namespace {

TEST(Work, CompletedWorkReturnsItsStatus) {
  std::unique_ptr<Work> w = MakeCompletedWork(absl::UnavailableError("down"));
  EXPECT_TRUE(w->IsCompleted());
  EXPECT_EQ(w->Wait(), absl::UnavailableError("down"));
  EXPECT_EQ(w->Wait(absl::InfinitePast()), absl::UnavailableError("down"));
}

TEST(Work, WaitWithDeadlineDoesNotCancel) {
  WorkCompletion completion("AllReduce #3 on rank 1");
  std::unique_ptr<Work> w = completion.MakeWork();
  EXPECT_FALSE(w->IsCompleted());
  absl::Status s = w->Wait(absl::Now() + absl::Milliseconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s.message(),
            "Work::Wait deadline passed before AllReduce #3 on rank 1 "
            "completed; the operation is still running");
  EXPECT_FALSE(w->IsCompleted());
  completion.Complete(absl::OkStatus());
  EXPECT_TRUE(w->IsCompleted());
  EXPECT_TRUE(w->Wait(absl::InfinitePast()).ok());
}

TEST(Work, WaitWakesWhenCompletedFromAnotherThread) {
  WorkCompletion completion("op");
  std::unique_ptr<Work> w = completion.MakeWork();
  Notification waiting;
  std::thread t([&] {
    waiting.WaitForNotification();
    completion.Complete(absl::DataLossError("x"));
  });
  waiting.Notify();
  EXPECT_EQ(w->Wait().code(), absl::StatusCode::kDataLoss);
  t.join();
}

TEST(Work, HandleAndCompletionHaveIndependentLifetimes) {
  std::unique_ptr<Work> w;
  {
    WorkCompletion completion("op");
    w = completion.MakeWork();
    completion.Complete(absl::OkStatus());
  }
  EXPECT_TRUE(w->Wait().ok());
  WorkCompletion completion("op");
  completion.MakeWork().reset();  // Dropping the handle does not cancel.
  completion.Complete(absl::OkStatus());
}

// Backends that cannot order a stream after their work wait on the host.
TEST(Work, WaitOnStreamDefaultsToWaitingOnTheHost) {
  std::unique_ptr<Work> failed =
      MakeCompletedWork(absl::UnavailableError("peer gone"));
  EXPECT_EQ(failed->WaitOnStream(nullptr).code(),
            absl::StatusCode::kUnavailable);
  WorkCompletion completion("AllReduce #0 on rank 0");
  std::unique_ptr<Work> pending = completion.MakeWork();
  std::thread finisher([&] { completion.Complete(absl::OkStatus()); });
  EXPECT_TRUE(pending->WaitOnStream(nullptr).ok());
  EXPECT_TRUE(pending->IsCompleted());
  finisher.join();
}

}  // namespace
}  // namespace comm
}  // namespace chunkzero
