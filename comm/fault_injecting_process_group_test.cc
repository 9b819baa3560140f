#include "comm/fault_injecting_process_group.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/inprocess/in_process_group.h"
#include "comm/testing/mock_process_group.h"
#include "comm/testing/spawn_ranks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace comm {
namespace {

using ::chunkzero::comm_testing::AllRanksOk;
using ::chunkzero::comm_testing::SpawnRanks;
using ::testing::HasSubstr;

constexpr absl::Duration kTimeout = absl::Milliseconds(200);
// Generous upper bound for "failed within its timeout" under TSAN on 2 cores.
constexpr absl::Duration kSlack = absl::Seconds(2);

struct Outcome {
  absl::Status status;
  absl::Duration elapsed;
};

// Runs one AllReduce (timeout kTimeout) on every rank of a world of `n`,
// rank `faulty` going through a FaultInjectingProcessGroup with `plan`.
std::vector<Outcome> RunAllReduce(InProcessWorld& world, int faulty,
                                  const FaultPlan& plan,
                                  int preceding_barriers = 0) {
  std::vector<Outcome> out(world.size());
  const std::vector<absl::Status> statuses =
      SpawnRanks(world, [&](ProcessGroup& inner) {
        FaultInjectingProcessGroup wrapped(inner, plan);
        ProcessGroup& g = inner.rank() == faulty
                              ? static_cast<ProcessGroup&>(wrapped)
                              : inner;
        for (int i = 0; i < preceding_barriers; ++i) {
          if (absl::Status s = Barrier(g); !s.ok()) return s;
        }
        std::vector<float> x(64, 1.0f);
        AllReduceOptions opts;
        opts.timeout = kTimeout;
        const absl::Time start = absl::Now();
        out[g.rank()].status = AllReduce(g, MutableBuffer::Of(x), opts);
        out[g.rank()].elapsed = absl::Now() - start;
        return absl::OkStatus();
      });
  EXPECT_TRUE(AllRanksOk(statuses));
  return out;
}

TEST(FaultInjectingProcessGroup, FailedCallMakesPeersTimeOutNamingTheRank) {
  struct Case {
    std::string name;
    FaultPlan plan;
    int preceding_barriers;
  };
  const std::vector<Case> cases = {
      {"FailCall", FaultPlan().FailCall(1, absl::UnavailableError("NIC down")),
       1},
      {"FailKind",
       FaultPlan().FailKind(CollectiveKind::kAllReduce,
                            absl::UnavailableError("NIC down")),
       0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    InProcessWorld world(3);
    const std::vector<Outcome> out =
        RunAllReduce(world, /*faulty=*/2, c.plan, c.preceding_barriers);
    EXPECT_EQ(out[2].status.code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(out[2].status.message(),
                HasSubstr("injected fault: rank 2: call #" +
                          std::to_string(c.preceding_barriers) +
                          " AllReduce(f32, count=64, op=sum): NIC down"));
    EXPECT_LT(out[2].elapsed, absl::Milliseconds(100));  // immediate
    for (int r : {0, 1}) {
      SCOPED_TRACE(absl::StrCat("rank ", r));
      EXPECT_EQ(out[r].status.code(), absl::StatusCode::kDeadlineExceeded)
          << out[r].status;
      EXPECT_THAT(out[r].status.message(), HasSubstr("waiting for rank 2"));
      EXPECT_LT(out[r].elapsed, kTimeout + kSlack);
    }
    // The first to time out waited the full timeout (the other may have been
    // woken by the abort it caused).
    EXPECT_GE(std::max(out[0].elapsed, out[1].elapsed),
              kTimeout - absl::Milliseconds(5));
    EXPECT_EQ(world.abort_status().code(), absl::StatusCode::kDeadlineExceeded);
  }
}

TEST(FaultInjectingProcessGroup, LongStallTimesOutPeersAndTheStallerFailsFast) {
  InProcessWorld world(2);
  const std::vector<Outcome> out = RunAllReduce(
      world, /*faulty=*/1, FaultPlan().StallCall(0, absl::Milliseconds(500)));
  EXPECT_EQ(out[0].status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(out[0].status.message(), HasSubstr("waiting for rank 1"));
  EXPECT_LT(out[0].elapsed, kTimeout + kSlack);
  // Rank 1 reaches the (aborted) world after its stall and fails at once.
  EXPECT_EQ(out[1].status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(out[1].status.message(),
              HasSubstr("aborted by an earlier failure: collective #0"));
  EXPECT_GE(out[1].elapsed, absl::Milliseconds(495));
}

TEST(FaultInjectingProcessGroup, ShortStallWithinTimeoutSucceeds) {
  InProcessWorld world(2);
  FaultPlan plan;
  plan.StallKind(CollectiveKind::kAllReduce, absl::Milliseconds(20));
  std::vector<absl::Status> statuses =
      SpawnRanks(world, [&](ProcessGroup& inner) {
        FaultInjectingProcessGroup g(inner, plan);
        std::vector<float> x(4, 1.0f);
        absl::Status s = AllReduce(g, MutableBuffer::Of(x));  // 5 min timeout
        if (s.ok() && x[0] != 2.0f) return absl::InternalError("bad sum");
        if (g.calls() != 1) return absl::InternalError("bad call count");
        return s;
      });
  EXPECT_TRUE(AllRanksOk(statuses));
  EXPECT_TRUE(world.abort_status().ok());
}

TEST(FaultInjectingProcessGroup, AbortIsForwarded) {
  comm_testing::MockProcessGroup inner(0, 2);
  FaultInjectingProcessGroup faulty(inner, FaultPlan());
  EXPECT_CALL(inner, DoAbort(absl::CancelledError("why")));
  faulty.Abort(absl::CancelledError("why"));
}

}  // namespace
}  // namespace comm
}  // namespace chunkzero
