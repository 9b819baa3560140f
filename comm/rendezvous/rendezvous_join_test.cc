#include "comm/rendezvous/rendezvous_join.h"

#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/rendezvous/hash_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace comm_internal {
namespace {

using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

constexpr char kPrefix[] = "test_joined_";

std::string FreshDirectory(absl::string_view name) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name,
                                       "_", absl::ToUnixNanos(absl::Now()));
  std::filesystem::create_directories(dir);
  return dir;
}

// Three ranks in a FileStore directory (keys are file names there), each
// with its own store object as a process would have (a FileStore is not
// shared between threads): each sees the others' values, in rank order.
TEST(RendezvousJoin, EveryRankSeesEveryOtherRanksValue) {
  const std::string directory = FreshDirectory("join");
  constexpr int kSize = 3;
  std::vector<std::vector<std::pair<int, std::string>>> seen(kSize);
  std::vector<absl::Status> statuses(kSize);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kSize; ++r) {
    ranks.emplace_back([&, r] {
      gloo::rendezvous::FileStore store(directory);
      statuses[r] = AnnounceJoin(store, kPrefix, r, absl::StrCat("v", r), "me");
      if (!statuses[r].ok()) return;
      statuses[r] = AwaitJoins(
          store, kPrefix, r, kSize, absl::Now() + absl::Seconds(20),
          absl::Seconds(20), "me", [&, r](int peer, const std::string& value) {
            seen[r].emplace_back(peer, value);
            return absl::OkStatus();
          });
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < kSize; ++r) EXPECT_TRUE(statuses[r].ok()) << statuses[r];
  EXPECT_THAT(seen[0], UnorderedElementsAre(Pair(1, "v1"), Pair(2, "v2")));
  EXPECT_THAT(seen[1], UnorderedElementsAre(Pair(0, "v0"), Pair(2, "v2")));
  EXPECT_EQ(seen[2],
            (std::vector<std::pair<int, std::string>>{{0, "v0"}, {1, "v1"}}));
  EXPECT_EQ(JoinKey(kPrefix, 7), "test_joined_7");
}

TEST(RendezvousJoin, MissingRanksAreNamedAtTheDeadline) {
  gloo::rendezvous::HashStore store;
  ASSERT_TRUE(AnnounceJoin(store, kPrefix, 1, "x", "me").ok());
  const absl::Time start = absl::Now();
  const absl::Status status =
      AwaitJoins(store, kPrefix, 1, 4, absl::Now() + absl::Milliseconds(100),
                 absl::Milliseconds(100), "Group::Create: rank 1 of 4");
  // Only the first missing rank is waited for; the others are probed.
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(status.message(),
            "Group::Create: rank 1 of 4 timed out after 100ms waiting for "
            "ranks 0, 2, 3 to join the rendezvous");
  ASSERT_TRUE(AnnounceJoin(store, kPrefix, 0, "x", "me").ok());
  ASSERT_TRUE(AnnounceJoin(store, kPrefix, 2, "x", "me").ok());
  EXPECT_EQ(
      AwaitJoins(store, kPrefix, 1, 4, absl::Now(), absl::Seconds(1), "who")
          .message(),
      "who timed out after 1s waiting for rank 3 to join the "
      "rendezvous");
}

TEST(RendezvousJoin, ACheckThatFailsEndsTheWaitAtOnce) {
  gloo::rendezvous::HashStore store;
  ASSERT_TRUE(AnnounceJoin(store, kPrefix, 0, "lr=0.1", "me").ok());
  const absl::Status status = AwaitJoins(
      store, kPrefix, 1, 3, absl::Now() + absl::Seconds(60), absl::Seconds(60),
      "me", [](int peer, const std::string& value) {
        return absl::FailedPreconditionError(
            absl::StrCat("rank ", peer, " says ", value));
      });
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(), "rank 0 says lr=0.1");
}

// A store that already holds this rank's key is an earlier job's, in both
// of Gloo's stores (which say so differently).
TEST(RendezvousJoin, AStoreFromAnEarlierJobIsRefused) {
  gloo::rendezvous::HashStore hash;
  gloo::rendezvous::FileStore file(FreshDirectory("stale"));
  for (gloo::rendezvous::Store* store :
       std::vector<gloo::rendezvous::Store*>{&hash, &file}) {
    ASSERT_TRUE(AnnounceJoin(*store, kPrefix, 0, "old", "where").ok());
    const absl::Status again = AnnounceJoin(*store, kPrefix, 0, "new", "where");
    EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition) << again;
    EXPECT_THAT(again.message(),
                HasSubstr("where: the rendezvous store already holds this "
                          "rank's key, so it holds an earlier job's "
                          "rendezvous"));
    EXPECT_THAT(again.message(), HasSubstr("give each job a fresh store"));
  }
}

TEST(RendezvousJoin, AnUnusableStoreIsUnavailable) {
  const std::string dir = FreshDirectory("gone");
  gloo::rendezvous::FileStore gone(dir);
  std::filesystem::remove_all(dir);  // Removed under the job.
  const absl::Status status = AnnounceJoin(gone, kPrefix, 0, "x", "where");
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr("where: rendezvous store: "));
}

TEST(RendezvousJoin, AGiveUpFailsTheWaitersAtOnce) {
  gloo::rendezvous::HashStore store;
  ASSERT_TRUE(AnnounceJoin(store, "p_", 0, "v", "rank 0").ok());
  std::thread giver([&] {
    absl::SleepFor(absl::Milliseconds(200));
    AnnounceGiveUp(store, "p_", 2,
                   absl::ResourceExhaustedError("cannot start a thread"));
  });
  const absl::Time start = absl::Now();
  const absl::Status status =
      AwaitJoins(store, "p_", 0, 3, absl::Now() + absl::Seconds(60),
                 absl::Seconds(60), "rank 0 of 3");
  giver.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(),
            "rank 0 of 3: rank 2 gave up before the rendezvous completed: "
            "RESOURCE_EXHAUSTED: cannot start a thread");
  // A second give-up keeps the first; the key is the same for everyone.
  AnnounceGiveUp(store, "p_", 1, absl::UnknownError("later"));
  EXPECT_EQ(WaitForKeys(store, {"p_1"}, "p_", absl::Now() + absl::Seconds(5),
                        "rank 0")
                .message(),
            "rank 0: rank 2 gave up before the rendezvous completed: "
            "RESOURCE_EXHAUSTED: cannot start a thread");
}

TEST(RendezvousJoin, WaitForKeysReturnsOnceTheKeysAreThere) {
  gloo::rendezvous::HashStore store;
  store.set("k", {'x'});
  EXPECT_TRUE(
      WaitForKeys(store, {"k"}, "p_", absl::Now() + absl::Seconds(5), "rank 0")
          .ok());
  EXPECT_EQ(WaitForKeys(store, {"missing"}, "p_",
                        absl::Now() + absl::Milliseconds(120), "rank 0")
                .code(),
            absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace comm_internal
}  // namespace chunkzero
