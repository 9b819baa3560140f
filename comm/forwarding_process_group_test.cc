#include "comm/forwarding_process_group.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "comm/testing/mock_process_group.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace comm {
namespace {

using ::chunkzero::comm_testing::BufferIs;
using ::chunkzero::comm_testing::MockProcessGroup;
using ::chunkzero::comm_testing::ReturnWork;
using ::testing::_;
using ::testing::AllOf;
using ::testing::Field;
using ::testing::Return;
using ::testing::StrictMock;

TEST(ForwardingProcessGroup, IsTheInnerGroupsRankSizeNameAndDTypes) {
  StrictMock<MockProcessGroup> inner(/*rank=*/2, /*size=*/3);
  ForwardingProcessGroup group(inner);
  EXPECT_EQ(group.rank(), 2);
  EXPECT_EQ(group.size(), 3);
  EXPECT_EQ(group.backend_name(), "mock");
  EXPECT_CALL(inner, SupportsDType(DType::kBF16)).WillOnce(Return(false));
  EXPECT_CALL(inner, SupportsDType(DType::kI64)).WillOnce(Return(true));
  EXPECT_FALSE(group.SupportsDType(DType::kBF16));
  EXPECT_TRUE(group.SupportsDType(DType::kI64));
}

// Every collective reaches the inner group with its buffers and options, and
// the inner group's Work (here: its status) comes back.
TEST(ForwardingProcessGroup, ForwardsEveryCollectiveWithItsArguments) {
  StrictMock<MockProcessGroup> inner(/*rank=*/1, /*size=*/2);
  ForwardingProcessGroup group(inner);
  std::vector<float> a(8), b(4);
  std::vector<int64_t> c(3), d(6);
  const absl::Duration timeout = absl::Seconds(7);

  BroadcastOptions broadcast;
  broadcast.root = 1;
  broadcast.timeout = timeout;
  broadcast.tag = "bcast";
  EXPECT_CALL(inner,
              DoBroadcast(BufferIs(a.data(), 8, DType::kF32),
                          AllOf(Field(&BroadcastOptions::root, 1),
                                Field(&BroadcastOptions::timeout, timeout),
                                Field(&BroadcastOptions::tag, "bcast"))))
      .WillOnce(ReturnWork(absl::UnavailableError("broadcast")));
  EXPECT_EQ(group.Broadcast(MutableBuffer::Of(a), broadcast)->Wait(),
            absl::UnavailableError("broadcast"));

  ReduceOptions reduce;
  reduce.root = 1;
  reduce.op = ReduceOp::kMax;
  reduce.timeout = timeout;
  reduce.tag = "reduce";
  EXPECT_CALL(inner, DoReduce(BufferIs(a.data(), 4, DType::kF32),
                              BufferIs(b.data(), 4, DType::kF32),
                              AllOf(Field(&ReduceOptions::root, 1),
                                    Field(&ReduceOptions::op, ReduceOp::kMax),
                                    Field(&ReduceOptions::timeout, timeout),
                                    Field(&ReduceOptions::tag, "reduce"))))
      .WillOnce(ReturnWork(absl::UnavailableError("reduce")));
  EXPECT_EQ(group
                .Reduce(ConstBuffer{a.data(), 4, DType::kF32},
                        MutableBuffer::Of(b), reduce)
                ->Wait(),
            absl::UnavailableError("reduce"));

  AllReduceOptions all_reduce;
  all_reduce.op = ReduceOp::kAvg;
  all_reduce.timeout = timeout;
  all_reduce.tag = "all_reduce";
  EXPECT_CALL(inner,
              DoAllReduce(BufferIs(c.data(), 3, DType::kI64),
                          AllOf(Field(&AllReduceOptions::op, ReduceOp::kAvg),
                                Field(&AllReduceOptions::timeout, timeout),
                                Field(&AllReduceOptions::tag, "all_reduce"))))
      .WillOnce(ReturnWork(absl::UnavailableError("all_reduce")));
  EXPECT_EQ(group.AllReduce(MutableBuffer::Of(c), all_reduce)->Wait(),
            absl::UnavailableError("all_reduce"));

  AllGatherOptions all_gather;
  all_gather.timeout = timeout;
  all_gather.tag = "all_gather";
  EXPECT_CALL(inner,
              DoAllGather(BufferIs(c.data(), 3, DType::kI64),
                          BufferIs(d.data(), 6, DType::kI64),
                          AllOf(Field(&AllGatherOptions::timeout, timeout),
                                Field(&AllGatherOptions::tag, "all_gather"))))
      .WillOnce(ReturnWork(absl::UnavailableError("all_gather")));
  EXPECT_EQ(
      group.AllGather(ConstBuffer::Of(c), MutableBuffer::Of(d), all_gather)
          ->Wait(),
      absl::UnavailableError("all_gather"));

  ReduceScatterOptions reduce_scatter;
  reduce_scatter.op = ReduceOp::kMin;
  reduce_scatter.timeout = timeout;
  reduce_scatter.tag = "reduce_scatter";
  EXPECT_CALL(inner,
              DoReduceScatter(
                  BufferIs(d.data(), 6, DType::kI64),
                  BufferIs(c.data(), 3, DType::kI64),
                  AllOf(Field(&ReduceScatterOptions::op, ReduceOp::kMin),
                        Field(&ReduceScatterOptions::timeout, timeout),
                        Field(&ReduceScatterOptions::tag, "reduce_scatter"))))
      .WillOnce(ReturnWork(absl::UnavailableError("reduce_scatter")));
  EXPECT_EQ(group
                .ReduceScatter(ConstBuffer::Of(d), MutableBuffer::Of(c),
                               reduce_scatter)
                ->Wait(),
            absl::UnavailableError("reduce_scatter"));

  BarrierOptions barrier;
  barrier.timeout = timeout;
  barrier.tag = "barrier";
  EXPECT_CALL(inner, DoBarrier(AllOf(Field(&BarrierOptions::timeout, timeout),
                                     Field(&BarrierOptions::tag, "barrier"))))
      .WillOnce(ReturnWork(absl::UnavailableError("barrier")));
  EXPECT_EQ(group.Barrier(barrier)->Wait(), absl::UnavailableError("barrier"));
}

TEST(ForwardingProcessGroup, ForwardsAbortWithItsCause) {
  StrictMock<MockProcessGroup> inner(/*rank=*/0, /*size=*/2);
  ForwardingProcessGroup group(inner);
  EXPECT_CALL(inner, DoAbort(absl::CancelledError("rank 1 gave up")));
  group.Abort(absl::CancelledError("rank 1 gave up"));
}

// The checks are the inner group's: a call the checks would refuse reaches
// the inner group as made (here a mock, which checks nothing).
TEST(ForwardingProcessGroup, LeavesTheArgumentChecksToTheInnerGroup) {
  StrictMock<MockProcessGroup> inner(/*rank=*/0, /*size=*/2);
  ForwardingProcessGroup group(inner);
  std::vector<float> x(4);
  BroadcastOptions bad_root;
  bad_root.root = 5;
  EXPECT_CALL(inner, DoBroadcast(BufferIs(x.data(), 4, DType::kF32),
                                 Field(&BroadcastOptions::root, 5)))
      .WillOnce(ReturnWork(absl::OkStatus()));
  EXPECT_TRUE(group.Broadcast(MutableBuffer::Of(x), bad_root)->Wait().ok());
}

// A decorator that checks at its own entry (as StagingProcessGroup does)
// never passes an invalid call on, and names itself in the message.
class CheckingDecorator final : public ForwardingProcessGroup {
 public:
  explicit CheckingDecorator(ProcessGroup& inner)
      : ForwardingProcessGroup(inner, ArgumentChecks::kAtEntry) {}
  absl::string_view backend_name() const override { return "checking"; }
};

TEST(ForwardingProcessGroup, ADecoratorMayCheckAtItsOwnEntry) {
  StrictMock<MockProcessGroup> inner(/*rank=*/1, /*size=*/2);
  CheckingDecorator group(inner);
  EXPECT_CALL(inner, SupportsDType(_)).WillRepeatedly(Return(true));
  std::vector<float> send(4), recv(8);
  const absl::Status status =
      group
          .AllGather(ConstBuffer::Of(send),
                     MutableBuffer{recv.data(), 7, DType::kF32},
                     AllGatherOptions())
          ->Wait();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "rank 1: AllGather(f32, count=4) [checking]: recv.count is 7, "
            "expected size() * send.count = 2 * 4");
  EXPECT_CALL(inner, DoAllGather(BufferIs(send.data(), 4, DType::kF32),
                                 BufferIs(recv.data(), 8, DType::kF32), _))
      .WillOnce(ReturnWork(absl::OkStatus()));
  EXPECT_TRUE(group
                  .AllGather(ConstBuffer::Of(send), MutableBuffer::Of(recv),
                             AllGatherOptions())
                  ->Wait()
                  .ok());
}

}  // namespace
}  // namespace comm
}  // namespace chunkzero
