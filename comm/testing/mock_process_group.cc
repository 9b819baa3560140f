#include "comm/testing/mock_process_group.h"

namespace chunkzero {
namespace comm_testing {

using ::testing::_;
using ::testing::Return;

MockProcessGroup::MockProcessGroup(int rank, int size)
    : ProcessGroup(ArgumentChecks::kDelegated), rank_(rank), size_(size) {
  ON_CALL(*this, SupportsDType(_)).WillByDefault(Return(true));
  ON_CALL(*this, DoBroadcast(_, _)).WillByDefault(ReturnWork(absl::OkStatus()));
  ON_CALL(*this, DoReduce(_, _, _)).WillByDefault(ReturnWork(absl::OkStatus()));
  ON_CALL(*this, DoAllReduce(_, _)).WillByDefault(ReturnWork(absl::OkStatus()));
  ON_CALL(*this, DoAllGather(_, _, _))
      .WillByDefault(ReturnWork(absl::OkStatus()));
  ON_CALL(*this, DoReduceScatter(_, _, _))
      .WillByDefault(ReturnWork(absl::OkStatus()));
  ON_CALL(*this, DoBarrier(_)).WillByDefault(ReturnWork(absl::OkStatus()));
}

MockWork::MockWork() {
  ON_CALL(*this, IsCompleted()).WillByDefault(Return(true));
  ON_CALL(*this, DoWait(_)).WillByDefault(Return(absl::OkStatus()));
  ON_CALL(*this, DoWaitOnStream(_)).WillByDefault(Return(absl::OkStatus()));
}

}  // namespace comm_testing
}  // namespace chunkzero
