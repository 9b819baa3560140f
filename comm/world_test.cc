#include "comm/world.h"

#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "comm/agree.h"
#include "comm/types.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace comm {
namespace {

using ::testing::HasSubstr;

// Every local rank all-reduces (rank + 1) on its own thread; returns each
// rank's result.
std::vector<float> SumOnEveryRank(World& world) {
  const std::vector<int>& ranks = world.local_ranks();
  std::vector<float> got(ranks.size(), -1);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i) {
    threads.emplace_back([&, i] {
      absl::StatusOr<ProcessGroup*> group = world.group(ranks[i]);
      if (!group.ok()) return;
      std::vector<float> x = {static_cast<float>(ranks[i] + 1)};
      AllReduceOptions options;
      options.timeout = absl::Seconds(30);
      if (AllReduce(**group, MutableBuffer::Of(x), options).ok()) {
        got[i] = x[0];
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return got;
}

TEST(MakeWorld, RanksAsThreadsInProcess) {
  WorldSpec spec;
  spec.world_size = 3;
  absl::StatusOr<std::unique_ptr<World>> world = MakeWorld(spec);
  ASSERT_TRUE(world.ok()) << world.status();
  EXPECT_EQ((*world)->local_ranks(), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ((*world)->transport(), "in-process");
  EXPECT_EQ(SumOnEveryRank(**world), (std::vector<float>{6, 6, 6}));
}

TEST(MakeWorld, RanksAsThreadsOverGloo) {
  WorldSpec spec;
  spec.world_size = 2;
  spec.backend = WorldBackend::kGloo;
  spec.timeout = absl::Seconds(30);
  absl::StatusOr<std::unique_ptr<World>> world = MakeWorld(spec);
  ASSERT_TRUE(world.ok()) << world.status();
  EXPECT_THAT((*world)->transport(), HasSubstr("gloo"));
  EXPECT_EQ(SumOnEveryRank(**world), (std::vector<float>{3, 3}));
}

// One rank per process, meeting in a directory: two "processes" here are
// two threads, each making the world of its own rank.
std::string FreshDirectory(const std::string& name) {
  std::string dir = absl::StrCat(::testing::TempDir(), "/", name, "XXXXXX");
  EXPECT_NE(mkdtemp(dir.data()), nullptr);
  return dir;
}

// Two "processes" (threads) each make the world of its own rank of 2 over
// Gloo at `dir`, `adjust` changing rank r's spec; `use` runs on each world
// made. Returns what each MakeWorld returned.
std::vector<absl::Status> MakeWorldsOfOneRank(
    const std::string& dir, const std::function<void(int, WorldSpec&)>& adjust,
    const std::function<void(int, World&)>& use) {
  std::vector<absl::Status> made(2);
  std::vector<std::thread> processes;
  for (int r = 0; r < 2; ++r) {
    processes.emplace_back([&, r] {
      WorldSpec spec;
      spec.world_size = 2;
      spec.backend = WorldBackend::kGloo;
      spec.rank = r;
      spec.rendezvous = dir;
      spec.timeout = absl::Seconds(30);
      adjust(r, spec);
      absl::StatusOr<std::unique_ptr<World>> world = MakeWorld(spec);
      made[r] = world.status();
      if (world.ok()) use(r, **world);
    });
  }
  for (std::thread& t : processes) t.join();
  return made;
}

TEST(MakeWorld, OneRankPerProcessThroughADirectory) {
  std::vector<float> sums(2, -1);
  const std::vector<absl::Status> made = MakeWorldsOfOneRank(
      FreshDirectory("world"), [](int, WorldSpec&) {},
      [&](int r, World& world) {
        EXPECT_EQ(world.local_ranks(), std::vector<int>{r});
        sums[r] = SumOnEveryRank(world)[0];
      });
  EXPECT_TRUE(made[0].ok()) << made[0];
  EXPECT_TRUE(made[1].ok()) << made[1];
  EXPECT_EQ(sums, (std::vector<float>{3, 3}));
}

TEST(MakeWorld, RanksWithDifferentJobConfigsAreRefusedNamingTheKey) {
  const std::vector<absl::Status> made = MakeWorldsOfOneRank(
      FreshDirectory("config"),
      [](int r, WorldSpec& spec) {
        spec.rendezvous_label = "--meet=here";
        spec.job_config = {{"lr", r == 0 ? "0.1" : "0.2"}};
      },
      [](int, World&) {});
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(made[r].ok()) << r;
    EXPECT_THAT(std::string(made[r].message()),
                HasSubstr(absl::StrCat("rank ", r, ": ")));
    EXPECT_THAT(std::string(made[r].message()), HasSubstr("lr"));
    EXPECT_THAT(std::string(made[r].message()), HasSubstr("[--meet=here]"));
  }
}

// Ranks whose GPU cannot be selected (there is none here, or CUDA is not
// compiled in) fail at once, the cause first, without waiting for the
// others at the rendezvous.
TEST(MakeWorld, ARankThatCannotJoinFailsTheWorldAtOnce) {
  WorldSpec spec;
  spec.world_size = 2;
  spec.backend = WorldBackend::kGloo;
  spec.devices = {Device::Cuda(7), Device::Cuda(7)};
  spec.timeout = absl::Seconds(60);
  const absl::Time start = absl::Now();
  const absl::Status made = MakeWorld(spec).status();
  EXPECT_FALSE(made.ok());
  EXPECT_THAT(std::string(made.message()), HasSubstr("rank "));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30)) << made;
}

TEST(MakeWorld, LeaveAndAbort) {
  WorldSpec spec;
  spec.world_size = 2;
  absl::StatusOr<std::unique_ptr<World>> world = MakeWorld(spec);
  ASSERT_TRUE(world.ok()) << world.status();
  EXPECT_EQ((*world)->group(2).status().code(),
            absl::StatusCode::kInvalidArgument);
  (*world)->Abort(absl::DataLossError("rank 1 lost its data"));
  absl::StatusOr<ProcessGroup*> group = (*world)->group(0);
  ASSERT_TRUE(group.ok());
  std::vector<float> x = {1};
  const absl::Status aborted = AllReduce(**group, MutableBuffer::Of(x));
  EXPECT_FALSE(aborted.ok());
  EXPECT_THAT(std::string(aborted.message()), HasSubstr("rank 1 lost"));
  (*world)->Leave(0);
  EXPECT_EQ((*world)->group(0).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(MakeWorld, RefusesSpecsThatCannotRun) {
  struct Case {
    const char* what;
    WorldSpec spec;
    const char* says;
  };
  std::vector<Case> cases;
  {
    WorldSpec s;
    s.world_size = 0;
    cases.push_back({"no ranks", s, "a world of 0 ranks"});
  }
  {
    WorldSpec s;
    s.world_size = 2;
    s.rank = 2;
    s.backend = WorldBackend::kGloo;
    s.rendezvous = "/tmp";
    cases.push_back({"rank outside", s, "rank 2 is outside a world of 2"});
  }
  {
    WorldSpec s;
    s.world_size = 2;
    s.rank = 1;
    s.backend = WorldBackend::kGloo;
    cases.push_back({"no rendezvous", s, "it needs a rendezvous"});
  }
  {
    WorldSpec s;
    s.world_size = 2;
    s.rank = 1;
    s.rendezvous = "/tmp";
    cases.push_back({"in-process process", s, "use Gloo"});
  }
  {
    WorldSpec s;
    s.world_size = 2;
    s.rendezvous = "/tmp";
    cases.push_back({"threads with a rendezvous", s, "meet in memory"});
  }
  {
    WorldSpec s;
    s.world_size = 2;
    s.backend = WorldBackend::kNccl;
    cases.push_back({"nccl on the host", s, "need their GPUs"});
  }
  {
    WorldSpec s;
    s.world_size = 2;
    s.devices = {Device::Cuda(0)};
    cases.push_back({"too few devices", s, "one per rank"});
  }
  {
    WorldSpec s;
    s.timeout = absl::ZeroDuration();
    cases.push_back({"no time", s, "timeout of 0"});
  }
  for (const Case& c : cases) {
    const absl::Status made = MakeWorld(c.spec).status();
    EXPECT_EQ(made.code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_THAT(std::string(made.message()), HasSubstr(c.says)) << c.what;
  }
}

// The cause is the first failure that is not a consequence of another;
// a later cause or consequence does not replace it.
TEST(FailureCause, KeepsTheFirstCauseOverConsequences) {
  FailureCause failures;
  EXPECT_TRUE(failures.cause().ok());
  const absl::Status echo =
      failures.Record(2, absl::UnavailableError("connection reset by peer"));
  EXPECT_EQ(echo.message(), "rank 2: connection reset by peer");
  EXPECT_TRUE(IsEchoedFailure(echo));  // A consequence stays one.
  const absl::Status cause =
      failures.Record(1, absl::ResourceExhaustedError("out of memory"));
  EXPECT_EQ(cause, absl::ResourceExhaustedError("rank 1: out of memory"));
  EXPECT_FALSE(IsEchoedFailure(cause));
  EXPECT_EQ(failures.Record(0, absl::CancelledError("aborted")), cause);
  EXPECT_EQ(failures.Record(3, absl::DataLossError("a second cause")), cause);
  EXPECT_EQ(failures.cause(), cause);
}

// Ranks record at once (run under tsan): exactly one of the causes wins,
// never a consequence.
TEST(FailureCause, RanksRecordConcurrently) {
  FailureCause failures;
  std::vector<std::thread> ranks;
  for (int r = 0; r < 8; ++r) {
    ranks.emplace_back([&, r] {
      // What a rank gets back is a failure, whoever recorded first.
      EXPECT_FALSE(failures
                       .Record(r, r % 2 == 0 ? absl::CancelledError("echo")
                                             : absl::InternalError("cause"))
                       .ok());
    });
  }
  for (std::thread& t : ranks) t.join();
  EXPECT_EQ(failures.cause().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(failures.cause().message()), HasSubstr(": cause"));
}

}  // namespace
}  // namespace comm
}  // namespace chunkzero
