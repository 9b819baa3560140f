#include "io/nvme/busy_clock.h"

#include "gtest/gtest.h"

namespace chunkzero {
namespace {

absl::Time At(int ms) { return absl::UnixEpoch() + absl::Milliseconds(ms); }

TEST(BusyClock, CountsOnlyWhilePiecesAreInFlight) {
  BusyClock busy;
  EXPECT_EQ(busy.Seconds(At(5)), 0);
  busy.Started(2, At(10));
  EXPECT_EQ(busy.in_flight(), 2);
  EXPECT_DOUBLE_EQ(busy.Seconds(At(15)), 0.005);  // Still in flight.
  busy.Finished(At(20));
  busy.Started(1, At(25));  // Overlapping: one interval, 10 to 40.
  busy.Finished(At(30));
  busy.Finished(At(40));
  EXPECT_EQ(busy.in_flight(), 0);
  EXPECT_DOUBLE_EQ(busy.Seconds(At(100)), 0.030);
  // Idle from 40 to 60 does not count.
  busy.Started(1, At(60));
  busy.Finished(At(65));
  EXPECT_DOUBLE_EQ(busy.Seconds(At(100)), 0.035);
}

TEST(BusyClock, IgnoresEmptyStartsAndUnmatchedFinishes) {
  BusyClock busy;
  busy.Finished(At(1));
  busy.Started(0, At(2));
  busy.Started(-3, At(2));
  EXPECT_EQ(busy.in_flight(), 0);
  EXPECT_EQ(busy.Seconds(At(10)), 0);
  // A finish timed before its interval began (another thread's clock)
  // adds nothing rather than a negative span.
  busy.Started(1, At(20));
  busy.Finished(At(19));
  EXPECT_EQ(busy.in_flight(), 0);
  EXPECT_EQ(busy.Seconds(At(30)), 0);
}

}  // namespace
}  // namespace chunkzero
