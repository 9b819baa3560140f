#include "comm/internal/deadline.h"

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace comm_internal {
namespace {

TEST(MillisecondsLeft, RoundsUpAndGivesAPassedDeadlineOneMillisecond) {
  const absl::Time now = absl::Now();
  EXPECT_GE(MillisecondsLeft(now + absl::Seconds(5)).count(), 4990);
  EXPECT_LE(MillisecondsLeft(now + absl::Seconds(5)).count(), 5000);
  // A fraction of a millisecond left is a whole one.
  EXPECT_EQ(MillisecondsLeft(absl::Now() + absl::Microseconds(300)).count(), 1);
  EXPECT_EQ(MillisecondsLeft(now - absl::Seconds(1)).count(), 1);
  EXPECT_EQ(MillisecondsLeft(absl::InfinitePast()).count(), 1);
}

TEST(RetryUntil, StopsAtTheFirstSuccess) {
  int tries = 0;
  const absl::Time start = absl::Now();
  EXPECT_TRUE(RetryUntil(start + absl::Seconds(30), absl::Milliseconds(10),
                         [&] { return ++tries == 3; }));
  EXPECT_EQ(tries, 3);
  // Two sleeps of 10 ms between the three tries.
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(20));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST(RetryUntil, GivesUpAtTheDeadlineWithoutSleepingPastIt) {
  int tries = 0;
  const absl::Time start = absl::Now();
  // The sleep is cut to the 100 ms left, not the 10 s asked for.
  EXPECT_FALSE(
      RetryUntil(start + absl::Milliseconds(100), absl::Seconds(10), [&] {
        ++tries;
        return false;
      }));
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(100));
  EXPECT_LT(took, absl::Seconds(5));
  // One try at the start, one at the deadline.
  EXPECT_EQ(tries, 2);
}

TEST(RetryUntil, TriesOnceWhenTheDeadlineHasPassed) {
  int tries = 0;
  EXPECT_FALSE(
      RetryUntil(absl::Now() - absl::Seconds(1), absl::Milliseconds(10), [&] {
        ++tries;
        return false;
      }));
  EXPECT_EQ(tries, 1);
  tries = 0;
  EXPECT_TRUE(RetryUntil(absl::InfinitePast(), absl::Milliseconds(10), [&] {
    ++tries;
    return true;
  }));
  EXPECT_EQ(tries, 1);
}

}  // namespace
}  // namespace comm_internal
}  // namespace chunkzero
