#include "comm/recording_process_group.h"

#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "comm/testing/mock_process_group.h"
#include "comm/testing/spawn_ranks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace comm {
namespace {

using ::chunkzero::comm_testing::AllRanksOk;
using ::chunkzero::comm_testing::MockProcessGroup;
using ::chunkzero::comm_testing::SpawnRanks;
using ::testing::ElementsAre;
using ::testing::NiceMock;

TEST(BusBytes, FactorsAndPayloadFollowNcclTests) {
  struct Case {
    CollectiveKind kind;
    int n;
    double factor;
  };
  const std::vector<Case> cases = {
      {CollectiveKind::kAllReduce, 1, 0.0},
      {CollectiveKind::kAllReduce, 2, 1.0},
      {CollectiveKind::kAllReduce, 8, 1.75},
      {CollectiveKind::kAllGather, 4, 0.75},
      {CollectiveKind::kReduceScatter, 8, 0.875},
      {CollectiveKind::kBroadcast, 8, 1.0},
      {CollectiveKind::kReduce, 3, 1.0},
      {CollectiveKind::kBarrier, 4, 0.0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << c.kind << " N=" << c.n);
    EXPECT_EQ(BusBytesFactor(c.kind, c.n), c.factor);
  }
  // AllGather / ReduceScatter payload is the FULL size; count is per rank.
  EXPECT_EQ(PayloadBytes({CollectiveKind::kAllGather, DType::kF16, 10}, 4),
            80u);
  EXPECT_EQ(PayloadBytes({CollectiveKind::kReduceScatter, DType::kF32, 10}, 4),
            160u);
  EXPECT_EQ(PayloadBytes({CollectiveKind::kAllReduce, DType::kBF16, 10}, 4),
            20u);
  EXPECT_EQ(PayloadBytes({CollectiveKind::kBarrier, DType::kF32, 0}, 4), 0u);
}

TEST(RecordingProcessGroup, RecordsCallsAndCountsExactBytes) {
  constexpr int kN = 4;
  std::vector<RecordingSnapshot> snapshots(kN);
  EXPECT_TRUE(AllRanksOk(SpawnRanks(kN, [&](ProcessGroup& g) -> absl::Status {
    RecordingProcessGroup rec(g);
    std::vector<float> a(1000, 1.0f), b(5), c(8), c_out(8);
    std::vector<uint16_t> h_send(10), h_all(40), bf_all(24), bf_out(6);
    if (absl::Status s = AllReduce(rec, MutableBuffer::Of(a)); !s.ok())
      return s;
    if (absl::Status s = AllGather(rec, ConstBuffer::Of(h_send, DType::kF16),
                                   MutableBuffer::Of(h_all, DType::kF16));
        !s.ok())
      return s;
    if (absl::Status s =
            ReduceScatter(rec, ConstBuffer::Of(bf_all, DType::kBF16),
                          MutableBuffer::Of(bf_out, DType::kBF16));
        !s.ok())
      return s;
    BroadcastOptions bcast;
    bcast.root = 3;
    if (absl::Status s = Broadcast(rec, MutableBuffer::Of(b), bcast); !s.ok())
      return s;
    ReduceOptions reduce;
    reduce.op = ReduceOp::kMax;
    if (absl::Status s =
            Reduce(rec, ConstBuffer::Of(c), MutableBuffer::Of(c_out), reduce);
        !s.ok())
      return s;
    if (absl::Status s = AllReduce(rec, MutableBuffer::Of(a)); !s.ok())
      return s;
    if (absl::Status s = Barrier(rec); !s.ok()) return s;
    snapshots[g.rank()] = rec.SnapshotAndReset();
    if (rec.Snapshot().Total().calls != 0) {
      return absl::InternalError("not reset");
    }
    return absl::OkStatus();
  })));
  for (int r = 0; r < kN; ++r) {
    SCOPED_TRACE(r);
    const RecordingSnapshot& s = snapshots[r];
    EXPECT_THAT(
        s.calls,
        ElementsAre(
            CollectiveCall{CollectiveKind::kAllReduce, DType::kF32, 1000},
            CollectiveCall{CollectiveKind::kAllGather, DType::kF16, 10},
            CollectiveCall{CollectiveKind::kReduceScatter, DType::kBF16, 6},
            CollectiveCall{CollectiveKind::kBroadcast, DType::kF32, 5, 3},
            CollectiveCall{CollectiveKind::kReduce, DType::kF32, 8, 0,
                           ReduceOp::kMax},
            CollectiveCall{CollectiveKind::kAllReduce, DType::kF32, 1000},
            CollectiveCall{CollectiveKind::kBarrier}));
    EXPECT_EQ(s.calls_not_logged, 0);
    const CollectiveStats& ar = s[CollectiveKind::kAllReduce];
    EXPECT_EQ(ar.calls, 2);
    EXPECT_EQ(ar.payload_bytes, 8000u);
    EXPECT_EQ(ar.bus_bytes, 12000.0);  // 8000 * 2 * 3 / 4
    const CollectiveStats& ag = s[CollectiveKind::kAllGather];
    EXPECT_EQ(ag.calls, 1);
    EXPECT_EQ(ag.payload_bytes, 80u);  // 4 ranks * 10 * 2 bytes
    EXPECT_EQ(ag.bus_bytes, 60.0);
    const CollectiveStats& rs = s[CollectiveKind::kReduceScatter];
    EXPECT_EQ(rs.payload_bytes, 48u);  // 4 * 6 * 2
    EXPECT_EQ(rs.bus_bytes, 36.0);
    EXPECT_EQ(s[CollectiveKind::kBroadcast].payload_bytes, 20u);
    EXPECT_EQ(s[CollectiveKind::kBroadcast].bus_bytes, 20.0);
    EXPECT_EQ(s[CollectiveKind::kReduce].payload_bytes, 32u);
    EXPECT_EQ(s[CollectiveKind::kReduce].bus_bytes, 32.0);
    EXPECT_EQ(s[CollectiveKind::kBarrier].calls, 1);
    EXPECT_EQ(s[CollectiveKind::kBarrier].payload_bytes, 0u);
    const CollectiveStats total = s.Total();
    EXPECT_EQ(total.calls, 7);
    EXPECT_EQ(total.payload_bytes, 8000u + 80 + 48 + 20 + 32);
    EXPECT_EQ(total.bus_bytes, 12000.0 + 60 + 36 + 20 + 32);
  }
}

// Restore puts back what a snapshot had and drops what came since.
TEST(RecordingProcessGroup, RestoreDropsWhatCameSinceTheSnapshot) {
  EXPECT_TRUE(AllRanksOk(SpawnRanks(2, [&](ProcessGroup& g) -> absl::Status {
    RecordingProcessGroup rec(g);
    std::vector<float> a(100, 1.0f);
    if (absl::Status s = AllReduce(rec, MutableBuffer::Of(a)); !s.ok()) {
      return s;
    }
    const RecordingSnapshot kept = rec.SnapshotAndReset();
    if (absl::Status s = AllReduce(rec, MutableBuffer::Of(a)); !s.ok()) {
      return s;
    }
    if (absl::Status s = Barrier(rec); !s.ok()) return s;
    rec.Restore(kept);
    const RecordingSnapshot now = rec.Snapshot();
    if (now.calls != kept.calls || now.Total().payload_bytes != 400u ||
        now[CollectiveKind::kAllReduce].calls != 1 ||
        now[CollectiveKind::kBarrier].calls != 0 ||
        now.blocked != kept.blocked) {
      return absl::InternalError("not restored");
    }
    return absl::OkStatus();
  })));
}

// comm_wait: a rank whose peer arrives 100 ms late spends about that long
// blocked (in the call or in Wait); Reset clears it.
TEST(RecordingProcessGroup, MeasuresTimeBlockedInCollectives) {
  std::vector<absl::Duration> blocked(2);
  std::vector<absl::Duration> after_reset(2);
  EXPECT_TRUE(AllRanksOk(SpawnRanks(2, [&](ProcessGroup& g) -> absl::Status {
    RecordingProcessGroup rec(g);
    if (g.rank() == 1) absl::SleepFor(absl::Milliseconds(100));
    std::vector<float> x = {1.0f};
    std::unique_ptr<Work> work = rec.AllReduce(MutableBuffer::Of(x), {});
    absl::Status status = work->Wait();
    blocked[g.rank()] = rec.SnapshotAndReset().blocked;
    after_reset[g.rank()] = rec.Snapshot().blocked;
    return status;
  })));
  EXPECT_GE(blocked[0], absl::Milliseconds(90));
  EXPECT_LT(blocked[1], blocked[0]);
  EXPECT_EQ(after_reset[0], absl::ZeroDuration());
  EXPECT_EQ(after_reset[1], absl::ZeroDuration());
}

// WaitOnStream goes to the inner backend's Work (which here waits on the
// host) and is timed like Wait.
TEST(RecordingProcessGroup, ForwardsAndTimesWaitOnStream) {
  std::vector<absl::Duration> blocked(2);
  std::vector<RecordingSnapshot> snapshots(2);
  EXPECT_TRUE(AllRanksOk(SpawnRanks(2, [&](ProcessGroup& g) -> absl::Status {
    RecordingProcessGroup rec(g);
    std::vector<float> x = {1.0f + g.rank()};
    if (g.rank() == 1) absl::SleepFor(absl::Milliseconds(100));
    std::unique_ptr<Work> work = rec.AllReduce(MutableBuffer::Of(x), {});
    CZ_RETURN_IF_ERROR(work->WaitOnStream(nullptr));
    if (x[0] != 3.0f) return absl::InternalError("not reduced");
    blocked[g.rank()] = rec.Snapshot().blocked;
    // Two host waits on a second collective; the reset clears the counts.
    std::unique_ptr<Work> again = rec.AllReduce(MutableBuffer::Of(x), {});
    CZ_RETURN_IF_ERROR(again->Wait());
    CZ_RETURN_IF_ERROR(again->Wait(absl::InfiniteFuture()));
    snapshots[g.rank()] = rec.SnapshotAndReset();
    if (rec.Snapshot().host_waits != 0 || rec.Snapshot().stream_waits != 0) {
      return absl::InternalError("waits survived the reset");
    }
    return absl::OkStatus();
  })));
  EXPECT_GE(blocked[0], absl::Milliseconds(90));
  for (const RecordingSnapshot& s : snapshots) {
    EXPECT_EQ(s.stream_waits, 1);
    EXPECT_EQ(s.host_waits, 2);
  }
}

TEST(RecordingProcessGroup, AbortIsForwarded) {
  MockProcessGroup inner(0, 2);
  RecordingProcessGroup recorded(inner);
  EXPECT_CALL(inner, DoAbort(absl::CancelledError("why")));
  recorded.Abort(absl::CancelledError("why"));
}

TEST(RecordingProcessGroup, LogIsBoundedButCountersKeepCounting) {
  NiceMock<MockProcessGroup> inner(/*rank=*/0, /*size=*/2);
  RecordingProcessGroup rec(inner, /*max_logged_calls=*/2);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(Barrier(rec).ok());
  RecordingSnapshot s = rec.Snapshot();
  EXPECT_EQ(s.calls.size(), 2u);
  EXPECT_EQ(s.calls_not_logged, 1);
  EXPECT_EQ(s[CollectiveKind::kBarrier].calls, 3);
  rec.Reset();
  EXPECT_TRUE(rec.Snapshot().calls.empty());
  EXPECT_EQ(rec.Snapshot()[CollectiveKind::kBarrier].calls, 0);
}

}  // namespace
}  // namespace comm
}  // namespace chunkzero
