#include "comm/rendezvous/job_config.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gloo/rendezvous/hash_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace comm_internal {
namespace {

using ::testing::HasSubstr;

constexpr char kPrefix[] = "test_joined_";

// Runs AgreeOnJobConfig for `configs.size()` ranks, rank r with configs[r]
// (and the world size sizes[r], or the number of ranks), on threads sharing
// one in-memory store; returns each rank's status.
std::vector<absl::Status> Agree(const std::vector<JobConfig>& configs,
                                std::vector<int> sizes = {}) {
  const int n = static_cast<int>(configs.size());
  if (sizes.empty()) sizes.assign(n, n);
  gloo::rendezvous::HashStore store;
  std::vector<absl::Status> statuses(n);
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r) {
    ranks.emplace_back([&, r] {
      const absl::Duration timeout = absl::Seconds(20);
      statuses[r] = AgreeOnJobConfig(store, kPrefix, r, sizes[r], configs[r],
                                     absl::Now() + timeout, timeout, "Test",
                                     "Test: joining");
    });
  }
  for (std::thread& t : ranks) t.join();
  return statuses;
}

TEST(JobConfig, JoinValueIsTheWorldSizeAndEveryKeyInOrder) {
  EXPECT_EQ(JobConfigJoinValue(4, {{"lr", "0.1"}, {"data", "a\nb"}}),
            "data=a\\nb\nlr=0.1\nworld_size=4\n");
  EXPECT_EQ(JobConfigJoinValue(1, {}), "world_size=1\n");
}

TEST(JobConfig, RanksWithEqualConfigsAgree) {
  const JobConfig config = {{"--layers", "2"}, {"--lr", "0.001"}};
  for (const absl::Status& s : Agree({config, config, config})) {
    EXPECT_TRUE(s.ok()) << s;
  }
  for (const absl::Status& s : Agree({{}, {}})) EXPECT_TRUE(s.ok()) << s;
}

// Every rank fails at once (well before the 20 s deadline), naming the key
// and both values.
TEST(JobConfig, ADifferingKeyFailsEveryRankNamingTheKeyAndBothValues) {
  const JobConfig config = {{"--layers", "2"}, {"--lr", "0.001"}};
  JobConfig other = config;
  other["--lr"] = "0.01";
  const absl::Time start = absl::Now();
  const std::vector<absl::Status> statuses = Agree({config, config, other});
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  for (const absl::Status& s : statuses) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  }
  EXPECT_EQ(statuses[0].message(),
            "Test: rank 2 was started with another configuration than rank 0: "
            "--lr is 0.01 on rank 2 but 0.001 on rank 0 (every rank of a job "
            "must be started with the same flags)");
  EXPECT_EQ(statuses[1].message(),
            "Test: rank 2 was started with another configuration than rank 1: "
            "--lr is 0.01 on rank 2 but 0.001 on rank 1 (every rank of a job "
            "must be started with the same flags)");
  EXPECT_EQ(statuses[2].message(),
            "Test: rank 0 was started with another configuration than rank 2: "
            "--lr is 0.001 on rank 0 but 0.01 on rank 2 (every rank of a job "
            "must be started with the same flags)");
}

TEST(JobConfig, AKeyOnlyOneRankHasIsUnsetOnTheOther) {
  const std::vector<absl::Status> statuses =
      Agree({{{"--seed", "1"}}, {{"--seed", "1"}, {"--steps", "9"}}});
  EXPECT_THAT(statuses[0].message(),
              HasSubstr("--steps is 9 on rank 1 but (unset) on rank 0"));
  EXPECT_THAT(statuses[1].message(),
              HasSubstr("--steps is (unset) on rank 0 but 9 on rank 1"));
}

// A world size that differs is named before the settings that may differ
// only because of it.
TEST(JobConfig, AWorldSizeThatDiffersIsNamedFirst) {
  const absl::Status s = CompareJobConfigs(
      "Test", 0, JobConfigJoinValue(2, {{"--chunk_size", "64"}}), 1,
      JobConfigJoinValue(3, {{"--chunk_size", "96"}}));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(),
              HasSubstr("world_size is 3 on rank 1 but 2 on rank 0"));
}

TEST(JobConfig, AStoreHoldingThisRanksKeyIsRefusedAndNotAnnounced) {
  gloo::rendezvous::HashStore store;
  bool announced = false;
  ASSERT_TRUE(AgreeOnJobConfig(store, kPrefix, 0, 1, {}, absl::Now(),
                               absl::Seconds(1), "Test", "Test: joining",
                               &announced)
                  .ok());
  EXPECT_TRUE(announced);
  const absl::Status again =
      AgreeOnJobConfig(store, kPrefix, 0, 1, {}, absl::Now(), absl::Seconds(1),
                       "Test", "Test: joining", &announced);
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(again.message(), HasSubstr("Test: joining: the rendezvous store "
                                         "already holds this rank's key"));
  EXPECT_FALSE(announced);
}

// A rank that never comes is named at the deadline, as "<caller>: rank R of
// N".
TEST(JobConfig, AMissingRankIsNamedAtTheDeadline) {
  gloo::rendezvous::HashStore store;
  const absl::Status s =
      AgreeOnJobConfig(store, kPrefix, 0, 2, {}, absl::Now(),
                       absl::Milliseconds(1), "Test", "Test: joining");
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("Test: rank 0 of 2 timed out after 1ms "
                                     "waiting for rank 1 to join"));
}

}  // namespace
}  // namespace comm_internal
}  // namespace chunkzero
