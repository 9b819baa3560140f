#include "comm/in_flight_tracker.h"

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/fault_injecting_process_group.h"
#include "comm/inprocess/in_process_group.h"
#include "comm/testing/mock_process_group.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace comm {
namespace {

using ::testing::HasSubstr;

TEST(InFlightTracker, CountsUntilCompletedAndForwardsEverything) {
  InProcessWorld world(1);
  ProcessGroup& group = **world.group(0);
  InFlightTracker tracked(group);
  EXPECT_EQ(tracked.rank(), 0);
  EXPECT_EQ(tracked.size(), 1);
  EXPECT_EQ(tracked.backend_name(), "inprocess");
  std::vector<float> x = {1, 2, 3};
  std::unique_ptr<Work> work = tracked.AllReduce(MutableBuffer::Of(x), {});
  ASSERT_TRUE(work->Wait().ok());
  EXPECT_EQ(tracked.in_flight(), 0);
  // Nothing in flight: nothing is aborted, the group stays usable.
  EXPECT_EQ(tracked.AbortIfInFlight(absl::CancelledError("unused")), 0);
  EXPECT_TRUE(AllReduce(tracked, MutableBuffer::Of(x)).ok());
  EXPECT_EQ(world.abort_status(), absl::OkStatus());
}

TEST(InFlightTracker, AbortIsForwarded) {
  comm_testing::MockProcessGroup inner(0, 2);
  InFlightTracker tracked(inner);
  EXPECT_CALL(inner, DoAbort(absl::CancelledError("why")));
  tracked.Abort(absl::CancelledError("why"));
}

// The teardown the tracker is for: rank 0 gives up with an all-gather into
// its buffer in flight while rank 1 is late to it (a stall before it issues
// the call). Once AbortIfInFlight returns, nothing may write rank 0's
// buffer: it is about to be freed.
TEST(InFlightTracker, AfterAbortALatePeerNeverTouchesTheBuffer) {
  InProcessWorld world(2);
  constexpr int kCount = 1024;
  auto buffer = std::make_unique<std::vector<float>>(2 * kCount, 0.0f);
  absl::Status late_status;
  absl::Notification rank0_gave_up;
  std::thread rank1([&] {
    FaultInjectingProcessGroup slow(
        **world.group(1), FaultPlan().StallCall(0, absl::Milliseconds(300)));
    std::vector<float> send(kCount, 7.0f), recv(2 * kCount);
    late_status =
        AllGather(slow, ConstBuffer::Of(send), MutableBuffer::Of(recv));
  });
  InFlightTracker tracked(**world.group(0));
  std::vector<float> send(kCount, 3.0f);
  std::unique_ptr<Work> gather = tracked.AllGather(
      ConstBuffer::Of(send), MutableBuffer::Of(*buffer), AllGatherOptions());
  EXPECT_EQ(tracked.in_flight(), 1);
  EXPECT_EQ(tracked.AbortIfInFlight(
                absl::ResourceExhaustedError("rank 0: out of memory")),
            1);
  EXPECT_EQ(tracked.in_flight(), 0);
  ASSERT_TRUE(gather->IsCompleted());
  const absl::Status status = gather->Wait();
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr("out of memory"));
  // "Free" the buffer: mark it, and see that nobody writes it later.
  std::memset(buffer->data(), 0xab, buffer->size() * sizeof(float));
  rank1.join();
  std::vector<unsigned char> marked(buffer->size() * sizeof(float), 0xab);
  EXPECT_EQ(std::memcmp(buffer->data(), marked.data(), marked.size()), 0)
      << "the late peer wrote into the buffer after the abort";
  EXPECT_FALSE(late_status.ok());
  EXPECT_THAT(std::string(late_status.message()),
              HasSubstr("rank 0: out of memory"));
  // Later collectives fail at once.
  std::vector<float> x = {1};
  const absl::Status later = AllReduce(tracked, MutableBuffer::Of(x));
  EXPECT_FALSE(later.ok());
}

}  // namespace
}  // namespace comm
}  // namespace chunkzero
