// SpawnRanks: run one function per rank on its own thread over a fresh
// InProcessWorld, the way every package tests its collective code.
//
//   std::vector<absl::Status> s = SpawnRanks(4, [](ProcessGroup& g) {
//     return comm::AllReduce(g, MutableBuffer::Of(x));   // x per rank
//   });
//   EXPECT_TRUE(AllRanksOk(s));
//
// Blocking: returns once every rank's function has returned; a function that
// never returns hangs the test (collectives themselves are bounded by their
// timeouts, so prefer short ones in failure tests). The world is destroyed
// (pending collectives cancelled) before SpawnRanks returns.
// Thread-safety: `fn` runs concurrently on `n` threads; it gets its own rank's
// group and must synchronise anything else it shares.
#ifndef CHUNKZERO_COMM_TESTING_SPAWN_RANKS_H_
#define CHUNKZERO_COMM_TESTING_SPAWN_RANKS_H_

#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "comm/inprocess/in_process_group.h"
#include "comm/process_group.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace comm_testing {

using RankFn = std::function<absl::Status(comm::ProcessGroup& group)>;

// Runs fn(**world.group(r)) on n threads of a fresh comm::InProcessWorld(n);
// returns the statuses indexed by rank. n < 1 gives one InvalidArgument.
std::vector<absl::Status> SpawnRanks(int n, const RankFn& fn);

// As above over an existing world (e.g. to inspect abort_status() after).
std::vector<absl::Status> SpawnRanks(comm::InProcessWorld& world,
                                     const RankFn& fn);

// Success if every status is OK; otherwise lists each failing rank's status:
//   EXPECT_TRUE(AllRanksOk(SpawnRanks(2, fn)));
::testing::AssertionResult AllRanksOk(
    const std::vector<absl::Status>& statuses);

}  // namespace comm_testing
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_TESTING_SPAWN_RANKS_H_
