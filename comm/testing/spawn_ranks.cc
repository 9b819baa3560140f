#include "comm/testing/spawn_ranks.h"

#include <thread>

#include "absl/strings/str_cat.h"

namespace chunkzero {
namespace comm_testing {

std::vector<absl::Status> SpawnRanks(comm::InProcessWorld& world,
                                     const RankFn& fn) {
  const int n = world.size();
  std::vector<absl::Status> statuses(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&world, &fn, &statuses, r] {
      absl::StatusOr<comm::ProcessGroup*> group = world.group(r);
      statuses[r] = group.ok() ? fn(**group) : group.status();
    });
  }
  for (std::thread& t : threads) t.join();
  return statuses;
}

std::vector<absl::Status> SpawnRanks(int n, const RankFn& fn) {
  if (n < 1) {
    return {absl::InvalidArgumentError(
        absl::StrCat("SpawnRanks: ", n, " ranks; want at least one"))};
  }
  comm::InProcessWorld world(n);
  return SpawnRanks(world, fn);
}

::testing::AssertionResult AllRanksOk(
    const std::vector<absl::Status>& statuses) {
  bool ok = true;
  ::testing::AssertionResult failure = ::testing::AssertionFailure();
  for (size_t r = 0; r < statuses.size(); ++r) {
    if (statuses[r].ok()) continue;
    ok = false;
    failure << "\n  rank " << r << ": " << statuses[r];
  }
  if (ok) return ::testing::AssertionSuccess();
  return failure;
}

}  // namespace comm_testing
}  // namespace chunkzero
