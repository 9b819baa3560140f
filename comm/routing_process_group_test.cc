#include "comm/routing_process_group.h"

#include <vector>

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
using ::testing::StrictMock;

// "Device memory" for the tests: this vector's elements.
class RoutingTest : public ::testing::Test {
 protected:
  RoutingTest()
      : device_memory_(64),
        group_(&device_group_, &host_group_, [this](const void* p) {
          const auto* f = static_cast<const float*>(p);
          return f >= device_memory_.data() &&
                 f < device_memory_.data() + device_memory_.size();
        }) {}

  MutableBuffer Device(size_t offset, size_t count) {
    return {device_memory_.data() + offset, count, DType::kF32};
  }

  std::vector<float> device_memory_;
  std::vector<float> host_memory_ = std::vector<float>(64);
  StrictMock<MockProcessGroup> device_group_{/*rank=*/1, /*size=*/2};
  StrictMock<MockProcessGroup> host_group_{/*rank=*/1, /*size=*/2};
  RoutingProcessGroup group_;
};

TEST_F(RoutingTest, EachCollectiveGoesWhereItsBuffersAre) {
  const MutableBuffer grads = Device(0, 8), shard = Device(8, 4);
  const MutableBuffer flags = MutableBuffer::Of(host_memory_);
  EXPECT_CALL(device_group_,
              DoAllReduce(BufferIs(grads.data, 8, DType::kF32), _))
      .WillOnce(ReturnWork(absl::OkStatus()));
  EXPECT_CALL(host_group_,
              DoAllReduce(BufferIs(flags.data, 64, DType::kF32), _))
      .WillOnce(ReturnWork(absl::OkStatus()));
  EXPECT_CALL(device_group_, DoReduceScatter(_, _, _))
      .WillOnce(ReturnWork(absl::OkStatus()));
  EXPECT_CALL(device_group_, DoAllGather(_, _, _))
      .WillOnce(ReturnWork(absl::OkStatus()));
  EXPECT_CALL(host_group_, DoAllGather(_, _, _))
      .WillOnce(ReturnWork(absl::OkStatus()));
  EXPECT_CALL(device_group_, DoBroadcast(_, _))
      .WillOnce(ReturnWork(absl::OkStatus()));
  // A non-root Reduce passes no recv: the send decides.
  EXPECT_CALL(device_group_, DoReduce(_, _, _))
      .WillOnce(ReturnWork(absl::OkStatus()));
  EXPECT_CALL(host_group_, DoBarrier(_)).WillOnce(ReturnWork(absl::OkStatus()));
  EXPECT_TRUE(AllReduce(group_, grads).ok());
  EXPECT_TRUE(AllReduce(group_, flags).ok());
  EXPECT_TRUE(
      ReduceScatter(group_, ConstBuffer{grads.data, 8, DType::kF32}, shard)
          .ok());
  EXPECT_TRUE(
      AllGather(group_, ConstBuffer{shard.data, 4, DType::kF32}, grads).ok());
  EXPECT_TRUE(AllGather(group_,
                        ConstBuffer{host_memory_.data(), 32, DType::kF32},
                        flags)
                  .ok());
  EXPECT_TRUE(Broadcast(group_, grads).ok());
  EXPECT_TRUE(Reduce(group_, ConstBuffer{grads.data, 8, DType::kF32}, {}).ok());
  EXPECT_TRUE(Barrier(group_).ok());
}

// An empty buffer has no say, wherever its pointer points.
TEST_F(RoutingTest, EmptyBuffersHaveNoSay) {
  EXPECT_CALL(host_group_, DoAllGather(_, _, _))
      .WillOnce(ReturnWork(absl::OkStatus()));
  EXPECT_TRUE(AllGather(group_,
                        ConstBuffer{host_memory_.data(), 0, DType::kF32},
                        Device(0, 0))
                  .ok());
}

TEST_F(RoutingTest, BuffersOnBothSidesAreRefusedBeforeEitherGroup) {
  const absl::Status status = AllGather(
      group_, ConstBuffer{host_memory_.data(), 4, DType::kF32}, Device(0, 8));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "rank 1: AllGather with one buffer in GPU memory and one in host "
            "memory (mock+mock runs each collective on one side)");
}

TEST_F(RoutingTest, AbortReachesBothGroups) {
  const absl::Status cause = absl::CancelledError("rank 1 gave up");
  ::testing::InSequence in_order;
  EXPECT_CALL(device_group_, DoAbort(cause));
  EXPECT_CALL(host_group_, DoAbort(cause));
  group_.Abort(cause);
}

TEST_F(RoutingTest, IsTheInnerGroupsRankAndSize) {
  EXPECT_EQ(group_.rank(), 1);
  EXPECT_EQ(group_.size(), 2);
  EXPECT_EQ(group_.backend_name(), "mock+mock");
  EXPECT_CALL(device_group_, SupportsDType(DType::kBF16))
      .WillOnce(::testing::Return(true));
  EXPECT_CALL(host_group_, SupportsDType(DType::kBF16))
      .WillOnce(::testing::Return(false));
  EXPECT_FALSE(group_.SupportsDType(DType::kBF16));
}

// Without a predicate, where CUDA says: host memory goes to the host group
// (everything does, on a machine without a GPU).
TEST(RoutingProcessGroup, ByDefaultHostMemoryGoesToTheHostGroup) {
  StrictMock<MockProcessGroup> device, host;
  RoutingProcessGroup group(&device, &host);
  std::vector<float> v(4);
  EXPECT_CALL(host, DoAllReduce(_, _)).WillOnce(ReturnWork(absl::OkStatus()));
  EXPECT_TRUE(AllReduce(group, MutableBuffer::Of(v)).ok());
}

}  // namespace
}  // namespace comm
}  // namespace chunkzero
