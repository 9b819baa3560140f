#include "comm/testing/mock_process_group.h"

namespace chunkzero {
namespace comm_testing {

using ::testing::_;
using ::testing::Return;

MockProcessGroup::MockProcessGroup(int rank, int size)
    : rank_(rank), size_(size) {
  ON_CALL(*this, SupportsDType(_)).WillByDefault(Return(true));
  ON_CALL(*this, Broadcast(_, _)).WillByDefault(ReturnWork(absl::OkStatus()));
  ON_CALL(*this, Reduce(_, _, _)).WillByDefault(ReturnWork(absl::OkStatus()));
  ON_CALL(*this, AllReduce(_, _)).WillByDefault(ReturnWork(absl::OkStatus()));
  ON_CALL(*this, AllGather(_, _, _))
      .WillByDefault(ReturnWork(absl::OkStatus()));
  ON_CALL(*this, ReduceScatter(_, _, _))
      .WillByDefault(ReturnWork(absl::OkStatus()));
  ON_CALL(*this, Barrier(_)).WillByDefault(ReturnWork(absl::OkStatus()));
}

}  // namespace comm_testing
}  // namespace chunkzero
