#include "comm/argument_checks.h"

#include <cstdint>
#include <vector>

#include "comm/testing/mock_process_group.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace comm {
namespace {

using ::chunkzero::comm_testing::MockProcessGroup;
using ::testing::HasSubstr;
using ::testing::NiceMock;
using ::testing::Return;

TEST(ArgumentChecks, UnsupportedDTypeIsInvalidArgument) {
  NiceMock<MockProcessGroup> group(/*rank=*/2, /*size=*/4);
  ON_CALL(group, SupportsDType(DType::kBF16)).WillByDefault(Return(false));
  std::vector<uint16_t> x(4);
  absl::Status s =
      CheckAllReduceArgs(group, ConstBuffer::Of(x, DType::kBF16), {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "rank 2: AllReduce(bf16, count=4, op=sum) [mock]: buffer dtype "
            "bf16 is not supported by this backend");
  EXPECT_TRUE(
      CheckAllReduceArgs(group, ConstBuffer::Of(x, DType::kF16), {}).ok());
}

TEST(ArgumentChecks, UnknownReduceOpIsInvalidArgumentInEveryReduction) {
  NiceMock<MockProcessGroup> group(/*rank=*/1, /*size=*/2);
  std::vector<int64_t> x(4), y(2);
  const ReduceOp bad = static_cast<ReduceOp>(kNumReduceOps);
  AllReduceOptions all_reduce;
  all_reduce.op = bad;
  ReduceOptions reduce;
  reduce.op = bad;
  ReduceScatterOptions scatter;
  scatter.op = bad;
  for (const absl::Status& s :
       {CheckAllReduceArgs(group, ConstBuffer::Of(x), all_reduce),
        CheckReduceArgs(group, ConstBuffer::Of(x), MutableBuffer::Of(x),
                        reduce),
        CheckReduceScatterArgs(group, ConstBuffer::Of(x), MutableBuffer::Of(y),
                               scatter)}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("unknown reduce op value 4"));
  }
  all_reduce.op = ReduceOp::kMin;
  EXPECT_TRUE(CheckAllReduceArgs(group, ConstBuffer::Of(x), all_reduce).ok());
}

TEST(ArgumentChecks, InPlaceFormsAreAccepted) {
  NiceMock<MockProcessGroup> group(/*rank=*/2, /*size=*/4);
  std::vector<float> full(12);
  // AllGather: send is rank 2's slot of recv.
  EXPECT_TRUE(CheckAllGatherArgs(group, {full.data() + 6, 3, DType::kF32},
                                 MutableBuffer::Of(full), {})
                  .ok());
  // ReduceScatter: recv is rank 2's slot of send.
  EXPECT_TRUE(CheckReduceScatterArgs(group, ConstBuffer::Of(full),
                                     {full.data() + 6, 3, DType::kF32}, {})
                  .ok());
  // Wrong slot.
  EXPECT_THAT(CheckReduceScatterArgs(group, ConstBuffer::Of(full),
                                     {full.data() + 3, 3, DType::kF32}, {})
                  .message(),
              HasSubstr("recv == send + rank * count"));
  // Reduce at the root: exactly aliased.
  ReduceOptions at_me;
  at_me.root = 2;
  EXPECT_TRUE(CheckReduceArgs(group, ConstBuffer::Of(full),
                              MutableBuffer::Of(full), at_me)
                  .ok());
  // Reduce off the root: recv is ignored.
  EXPECT_TRUE(CheckReduceArgs(group, ConstBuffer::Of(full), {}, {}).ok());
  // Zero-length buffers with null data are fine.
  EXPECT_TRUE(CheckAllGatherArgs(group, {}, {}, {}).ok());
}

}  // namespace
}  // namespace comm
}  // namespace chunkzero
