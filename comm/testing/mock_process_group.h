// MockProcessGroup: a GoogleMock ProcessGroup for unit tests that check which
// collectives a component issues, without running any ranks.
//
//   ::testing::NiceMock<MockProcessGroup> group(/*rank=*/1, /*size=*/4);
//   EXPECT_CALL(group, DoAllReduce(BufferIs(grads.data(), 8, DType::kF32), _))
//       .WillOnce(ReturnWork(absl::UnavailableError("link down")));
//
// Expectations name the Do* functions that ProcessGroup's public collectives
// call. The mock checks no arguments (ProcessGroup::ArgumentChecks::
// kDelegated): every call reaches its Do* function as made, and the
// expectations decide. Defaults (ON_CALL): every collective returns an
// already-completed OK Work without touching its buffers; SupportsDType
// returns true. rank(), size() and backend_name() ("mock") are fixed at
// construction.
// Thread-safety: as GoogleMock (expectations set before use).
#ifndef CHUNKZERO_COMM_TESTING_MOCK_PROCESS_GROUP_H_
#define CHUNKZERO_COMM_TESTING_MOCK_PROCESS_GROUP_H_

#include <memory>

#include "absl/status/status.h"
#include "comm/process_group.h"
#include "gmock/gmock.h"
#include "tensor/cuda/cuda_handles.h"

namespace chunkzero {
namespace comm_testing {

class MockProcessGroup : public comm::ProcessGroup {
 public:
  explicit MockProcessGroup(int rank = 0, int size = 1);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::string_view backend_name() const override { return "mock"; }

  MOCK_METHOD(bool, SupportsDType, (DType dtype), (const, override));
  MOCK_METHOD(std::unique_ptr<comm::Work>, DoBroadcast,
              (comm::MutableBuffer buffer,
               const comm::BroadcastOptions& options),
              (override));
  MOCK_METHOD(std::unique_ptr<comm::Work>, DoReduce,
              (comm::ConstBuffer send, comm::MutableBuffer recv,
               const comm::ReduceOptions& options),
              (override));
  MOCK_METHOD(std::unique_ptr<comm::Work>, DoAllReduce,
              (comm::MutableBuffer buffer,
               const comm::AllReduceOptions& options),
              (override));
  MOCK_METHOD(std::unique_ptr<comm::Work>, DoAllGather,
              (comm::ConstBuffer send, comm::MutableBuffer recv,
               const comm::AllGatherOptions& options),
              (override));
  MOCK_METHOD(std::unique_ptr<comm::Work>, DoReduceScatter,
              (comm::ConstBuffer send, comm::MutableBuffer recv,
               const comm::ReduceScatterOptions& options),
              (override));
  MOCK_METHOD(std::unique_ptr<comm::Work>, DoBarrier,
              (const comm::BarrierOptions& options), (override));
  MOCK_METHOD(void, DoAbort, (const absl::Status& cause), (override));

 private:
  const int rank_;
  const int size_;
};

// A GoogleMock Work, for tests of how a component waits for a collective
// (on the host, or by ordering a CUDA stream after it):
//
//   auto work = std::make_unique<::testing::StrictMock<MockWork>>();
//   EXPECT_CALL(*work, DoWaitOnStream(kComputeStream));
//
// Defaults (ON_CALL): completed, and both waits return OK.
class MockWork : public comm::Work {
 public:
  MockWork();

  MOCK_METHOD(bool, IsCompleted, (), (override));
  MOCK_METHOD(absl::Status, DoWait, (absl::Time deadline), (override));
  MOCK_METHOD(absl::Status, DoWaitOnStream, (CudaStream stream), (override));
};

// Action: return an already-completed comm::Work with `status`.
//   .WillOnce(ReturnWork(absl::OkStatus()))
inline auto ReturnWork(absl::Status status) {
  return [status](auto&&...) { return comm::MakeCompletedWork(status); };
}

// Matches a comm::ConstBuffer or comm::MutableBuffer with this data pointer,
// count and dtype.
MATCHER_P3(BufferIs, data, count, dtype,
           ::testing::PrintToString(data) + ", count " +
               ::testing::PrintToString(count) + ", " +
               ::testing::PrintToString(dtype)) {
  return arg.data == static_cast<const void*>(data) &&
         arg.count == static_cast<size_t>(count) && arg.dtype == dtype;
}

}  // namespace comm_testing
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_TESTING_MOCK_PROCESS_GROUP_H_
