// CheckEveryDTypeCollective: one rank's part of a conformance check that a
// backend moves and reduces u8, i32, i64 and f64 exactly, with every reduce
// op, in every collective. Each backend's test runs it on every rank of a
// world:
//
//   EXPECT_TRUE(AllRanksOk(SpawnRanks(3, CheckEveryDTypeCollective)));
//
// The expected values are computed here from the contract in comm/types.h
// (rank order, integer sums wrapping, kAvg truncating toward zero), not by
// the kernels under test. Returns an error naming the collective, dtype, op
// and first wrong element.
#ifndef CHUNKZERO_COMM_TESTING_EVERY_DTYPE_CHECK_H_
#define CHUNKZERO_COMM_TESTING_EVERY_DTYPE_CHECK_H_

#include "absl/status/status.h"
#include "comm/process_group.h"

namespace chunkzero {
namespace comm_testing {

[[nodiscard]] absl::Status CheckEveryDTypeCollective(comm::ProcessGroup& group);

}  // namespace comm_testing
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_TESTING_EVERY_DTYPE_CHECK_H_
