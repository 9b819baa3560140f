// An example of testing a component's collective call sequence with
// MockProcessGroup, without running any ranks.
#include "comm/testing/mock_process_group.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace comm_testing {
namespace {

using ::testing::_;
using ::testing::Field;
using ::testing::InSequence;
using ::testing::NiceMock;
using ::testing::StrictMock;

// The code under test: a ZeRO-style step that reduce-scatters gradients
// into this rank's shard and all-gathers the updated parameters.
absl::Status ShardedStep(comm::ProcessGroup& g, std::vector<float>& grads,
                         std::vector<float>& params) {
  const size_t shard = grads.size() / g.size();
  comm::MutableBuffer my_grads{grads.data() + g.rank() * shard, shard,
                               DType::kF32};
  comm::ReduceScatterOptions rs;
  rs.op = comm::ReduceOp::kAvg;
  if (absl::Status s =
          comm::ReduceScatter(g, comm::ConstBuffer::Of(grads), my_grads, rs);
      !s.ok())
    return s;
  comm::ConstBuffer my_params{params.data() + g.rank() * shard, shard,
                              DType::kF32};
  return comm::AllGather(g, my_params, comm::MutableBuffer::Of(params));
}

TEST(MockProcessGroup, ChecksTheCallSequence) {
  StrictMock<MockProcessGroup> g(/*rank=*/1, /*size=*/4);
  std::vector<float> grads(16), params(16);
  {
    InSequence in_order;
    EXPECT_CALL(g, DoReduceScatter(BufferIs(grads.data(), 16, DType::kF32),
                                   BufferIs(grads.data() + 4, 4, DType::kF32),
                                   Field(&comm::ReduceScatterOptions::op,
                                         comm::ReduceOp::kAvg)));
    EXPECT_CALL(g, DoAllGather(BufferIs(params.data() + 4, 4, DType::kF32),
                               BufferIs(params.data(), 16, DType::kF32), _));
  }
  EXPECT_TRUE(ShardedStep(g, grads, params).ok());
}

TEST(MockProcessGroup, InjectsErrors) {
  NiceMock<MockProcessGroup> g(/*rank=*/0, /*size=*/2);
  EXPECT_CALL(g, DoReduceScatter(_, _, _))
      .WillOnce(ReturnWork(absl::UnavailableError("link down")));
  EXPECT_CALL(g, DoAllGather(_, _, _)).Times(0);
  std::vector<float> grads(4), params(4);
  EXPECT_EQ(ShardedStep(g, grads, params).code(),
            absl::StatusCode::kUnavailable);
}

// Each public wait reaches its own mocked hook, so a test can tell a host
// wait from a stream wait.
TEST(MockWork, SeparatesHostAndStreamWaits) {
  StrictMock<MockWork> work;
  {
    InSequence in_order;
    EXPECT_CALL(work, DoWaitOnStream(kComputeStream))
        .WillOnce(::testing::Return(absl::AbortedError("aborted")));
    EXPECT_CALL(work, DoWait(absl::InfiniteFuture()))
        .WillOnce(::testing::Return(absl::OkStatus()));
  }
  EXPECT_EQ(work.WaitOnStream(kComputeStream).code(),
            absl::StatusCode::kAborted);
  EXPECT_TRUE(work.Wait().ok());
}

TEST(MockWork, DefaultsToCompletedAndOk) {
  NiceMock<MockWork> work;
  EXPECT_TRUE(work.IsCompleted());
  EXPECT_TRUE(work.Wait().ok());
  EXPECT_TRUE(work.WaitOnStream(kComputeStream).ok());
}

}  // namespace
}  // namespace comm_testing
}  // namespace chunkzero
