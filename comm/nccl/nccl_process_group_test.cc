// NcclProcessGroup's logic against FakeNcclApi: rendezvous, stream
// ordering, completion, the watchdog, timeouts, asynchronous errors and
// abort. (nccl_process_group_gpu_test.cc runs it on real NCCL.)
#include "comm/nccl/nccl_process_group.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "base/thread.h"
#include "comm/nccl/testing/fake_nccl_api.h"
#include "gloo/rendezvous/hash_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace comm {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// A world-size-1 group over a fake, and the fake.
struct Fixture {
  gloo::rendezvous::HashStore store;
  FakeNcclApi fake_api;
  FakeNcclApi* fake = &fake_api;
  std::unique_ptr<NcclProcessGroup> group;

  explicit Fixture(NcclOptions options = {}) {
    absl::StatusOr<std::unique_ptr<NcclProcessGroup>> created =
        NcclProcessGroup::CreateWithApi(0, 1, ForwardTo(fake), store, options);
    EXPECT_TRUE(created.ok()) << created.status();
    if (created.ok()) group = *std::move(created);
    fake->TakeLog();
  }
};

TEST(NcclProcessGroup, EveryCollectiveRunsOnTheCommStreamAfterCompute) {
  Fixture f;
  ASSERT_NE(f.group, nullptr);
  EXPECT_EQ(f.group->backend_name(), "nccl");
  std::vector<float> x = {1, 2, 3, 4};
  ASSERT_TRUE(AllReduce(*f.group, MutableBuffer::Of(x)).ok());
  EXPECT_EQ(x, (std::vector<float>{1, 2, 3, 4}));
  std::vector<int64_t> mine = {7, 8}, all(2);
  ASSERT_TRUE(
      AllGather(*f.group, ConstBuffer::Of(mine), MutableBuffer::Of(all)).ok());
  EXPECT_EQ(all, mine);
  std::vector<double> send = {0.5, 1.5}, recv(2);
  ASSERT_TRUE(
      ReduceScatter(*f.group, ConstBuffer::Of(send), MutableBuffer::Of(recv))
          .ok());
  EXPECT_EQ(recv, send);
  std::vector<uint8_t> bytes = {9};
  ASSERT_TRUE(Broadcast(*f.group, MutableBuffer::Of(bytes)).ok());
  std::vector<int32_t> r_send = {3}, r_recv = {0};
  ASSERT_TRUE(
      Reduce(*f.group, ConstBuffer::Of(r_send), MutableBuffer::Of(r_recv))
          .ok());
  EXPECT_EQ(r_recv[0], 3);
  ASSERT_TRUE(Barrier(*f.group).ok());
  // Each waits for the compute stream (null: legacy default) first.
  EXPECT_THAT(f.fake->TakeLog(),
              ElementsAre("wait_stream 0", "enqueue AllReduce f32 count=4",
                          "wait_stream 0", "enqueue AllGather i64 count=2",
                          "wait_stream 0", "enqueue ReduceScatter f64 count=2",
                          "wait_stream 0", "enqueue Broadcast u8 count=1",
                          "wait_stream 0", "enqueue Reduce i32 count=1",
                          "wait_stream 0", "enqueue Barrier i32 count=1"));
  EXPECT_EQ(f.fake->live_events(), 0);  // Every event went back.
}

TEST(NcclProcessGroup, SupportsEveryDType) {
  Fixture f;
  for (int d = 0; d < kNumDTypes; ++d) {
    EXPECT_TRUE(f.group->SupportsDType(static_cast<DType>(d))) << d;
  }
}

TEST(NcclProcessGroup, RendezvousGivesEveryRankRankZerosId) {
  gloo::rendezvous::HashStore store;
  constexpr int kSize = 3;
  std::vector<std::unique_ptr<FakeNcclApi>> fakes;
  for (int r = 0; r < kSize; ++r) {
    fakes.push_back(std::make_unique<FakeNcclApi>(std::string(128, 'a' + r)));
  }
  std::vector<absl::Status> statuses(kSize);
  std::vector<std::unique_ptr<NcclProcessGroup>> groups(kSize);
  std::vector<std::thread> threads;
  for (int r = 0; r < kSize; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<NcclProcessGroup>> g =
          NcclProcessGroup::CreateWithApi(r, kSize, ForwardTo(fakes[r].get()),
                                          store);
      statuses[r] = g.status();
      if (g.ok()) groups[r] = *std::move(g);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kSize; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    EXPECT_EQ(fakes[r]->seen_unique_id(), std::string(128, 'a')) << r;
    EXPECT_EQ(groups[r]->rank(), r);
    EXPECT_EQ(groups[r]->size(), kSize);
  }
  EXPECT_THAT(fakes[0]->TakeLog(), Contains("get_unique_id"));
  EXPECT_THAT(fakes[1]->TakeLog(), Not(Contains("get_unique_id")));
}

// With a job config, ranks started alike meet; one started otherwise fails
// every rank at once, naming the key and both values, before NCCL's
// bootstrap.
TEST(NcclProcessGroup, RanksStartedWithOtherFlagsFailNamingTheFlag) {
  constexpr int kSize = 3;
  for (const bool differ : {false, true}) {
    SCOPED_TRACE(differ ? "rank 2 differs" : "all alike");
    gloo::rendezvous::HashStore store;
    std::vector<absl::Status> statuses(kSize);
    std::vector<std::unique_ptr<FakeNcclApi>> fakes;
    for (int r = 0; r < kSize; ++r) {
      fakes.push_back(std::make_unique<FakeNcclApi>());
    }
    std::vector<std::thread> threads;
    const absl::Time start = absl::Now();
    for (int r = 0; r < kSize; ++r) {
      threads.emplace_back([&, r] {
        NcclOptions options;
        options.timeout = absl::Seconds(30);
        options.job_config = {{"--layers", "2"}, {"--seed", "1"}};
        if (differ && r == 2) options.job_config["--seed"] = "7";
        statuses[r] = NcclProcessGroup::CreateWithApi(
                          r, kSize, ForwardTo(fakes[r].get()), store, options)
                          .status();
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_LT(absl::Now() - start, absl::Seconds(10));
    if (!differ) {
      for (const absl::Status& s : statuses) EXPECT_TRUE(s.ok()) << s;
      continue;
    }
    for (const absl::Status& s : statuses) {
      EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    }
    EXPECT_EQ(statuses[0].message(),
              "NcclProcessGroup::Create: rank 2 was started with another "
              "configuration than rank 0: --seed is 7 on rank 2 but 1 on "
              "rank 0 (every rank of a job must be started with the same "
              "flags)");
    EXPECT_THAT(statuses[2].message(),
                HasSubstr("--seed is 1 on rank 0 but 7 on rank 2"));
    EXPECT_THAT(fakes[1]->TakeLog(), Not(Contains(HasSubstr("init_rank"))));
  }
}

TEST(NcclProcessGroup, MissingRankIsNamedAtTheDeadline) {
  gloo::rendezvous::HashStore store;
  NcclOptions options;
  options.timeout = absl::Milliseconds(200);
  absl::StatusOr<std::unique_ptr<NcclProcessGroup>> g =
      NcclProcessGroup::CreateWithApi(0, 3, std::make_unique<FakeNcclApi>(),
                                      store, options);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(g.status().message(),
              HasSubstr("rank 0 of 3 timed out after 200ms waiting for "
                        "ranks 1, 2 to join the rendezvous"));
}

TEST(NcclProcessGroup, AStoreFromAnEarlierJobIsRefused) {
  gloo::rendezvous::HashStore store;
  {
    absl::StatusOr<std::unique_ptr<NcclProcessGroup>> first =
        NcclProcessGroup::CreateWithApi(0, 1, std::make_unique<FakeNcclApi>(),
                                        store);
    ASSERT_TRUE(first.ok()) << first.status();
  }
  absl::StatusOr<std::unique_ptr<NcclProcessGroup>> second =
      NcclProcessGroup::CreateWithApi(0, 1, std::make_unique<FakeNcclApi>(),
                                      store);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr("fresh store"));
}

TEST(NcclProcessGroup, RejectsBadCreateArguments) {
  gloo::rendezvous::HashStore store;
  EXPECT_EQ(NcclProcessGroup::CreateWithApi(
                2, 2, std::make_unique<FakeNcclApi>(), store)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  NcclOptions zero;
  zero.timeout = absl::ZeroDuration();
  EXPECT_EQ(NcclProcessGroup::CreateWithApi(
                0, 1, std::make_unique<FakeNcclApi>(), store, zero)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NcclProcessGroup::Create(0, 1, -1, store).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NcclProcessGroup, InitFailureIsReportedNamingTheRank) {
  gloo::rendezvous::HashStore store;
  auto api = std::make_unique<FakeNcclApi>();
  api->FailInit(absl::UnavailableError("no GPU 7"));
  absl::StatusOr<std::unique_ptr<NcclProcessGroup>> g =
      NcclProcessGroup::CreateWithApi(0, 1, std::move(api), store);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(g.status().message(),
            "NcclProcessGroup::Create: rank 0 of 1: no GPU 7");
}

// The communicator is non-blocking: Create polls it until NCCL says it is
// ready, and only then makes its stream.
TEST(NcclProcessGroup, CreateWaitsUntilTheCommunicatorIsReady) {
  gloo::rendezvous::HashStore store;
  FakeNcclApi fake;
  fake.SetInProgressPolls(/*after_init=*/3, /*after_enqueue=*/0);
  absl::StatusOr<std::unique_ptr<NcclProcessGroup>> g =
      NcclProcessGroup::CreateWithApi(0, 1, ForwardTo(&fake), store);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(fake.ready_polls(), 4);
  EXPECT_THAT(fake.TakeLog(), ElementsAre("get_unique_id", "init_rank 0 of 1",
                                          "create_stream", "malloc 4"));
}

// A peer that joined the rendezvous but never completes NCCL's bootstrap
// cannot hold Create past its timeout: the communicator is aborted.
TEST(NcclProcessGroup, InitThatNeverCompletesIsAbortedAtTheDeadline) {
  gloo::rendezvous::HashStore store;
  FakeNcclApi fake;
  fake.SetInProgressPolls(/*after_init=*/-1, /*after_enqueue=*/0);
  NcclOptions options;
  options.timeout = absl::Milliseconds(100);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<NcclProcessGroup>> g =
      NcclProcessGroup::CreateWithApi(0, 1, ForwardTo(&fake), store, options);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(g.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(g.status().message(),
              HasSubstr("NcclProcessGroup::Create: rank 0 of 1: the NCCL "
                        "communicator was not ready within the timeout of "
                        "100ms"));
  EXPECT_THAT(fake.TakeLog(),
              ElementsAre("get_unique_id", "init_rank 0 of 1", "abort"));
}

TEST(NcclProcessGroup, InitFailingAfterItStartedIsAbortedAndReported) {
  gloo::rendezvous::HashStore store;
  FakeNcclApi fake;
  fake.SetInProgressPolls(/*after_init=*/-1, /*after_enqueue=*/0);
  fake.FailReady(absl::UnavailableError("NCCL: remote process exited"));
  absl::StatusOr<std::unique_ptr<NcclProcessGroup>> g =
      NcclProcessGroup::CreateWithApi(0, 1, ForwardTo(&fake), store);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(g.status().message(),
            "NcclProcessGroup::Create: rank 0 of 1: NCCL communicator init "
            "failed: NCCL: remote process exited");
  EXPECT_THAT(fake.TakeLog(), Contains("abort"));
}

// An enqueue still in progress is polled to the end before the event goes
// on the stream; one that never ends aborts the group at the collective's
// timeout.
TEST(NcclProcessGroup, AnEnqueueInProgressIsWaitedForWithinTheTimeout) {
  Fixture f;
  f.fake->SetInProgressPolls(/*after_init=*/0, /*after_enqueue=*/2);
  const int polls_before = f.fake->ready_polls();
  std::vector<float> x = {5};
  ASSERT_TRUE(AllReduce(*f.group, MutableBuffer::Of(x)).ok());
  EXPECT_EQ(f.fake->ready_polls() - polls_before, 3);
  EXPECT_EQ(x[0], 5);

  f.fake->SetInProgressPolls(/*after_init=*/0, /*after_enqueue=*/-1);
  AllReduceOptions options;
  options.timeout = absl::Milliseconds(50);
  const absl::Status status =
      AllReduce(*f.group, MutableBuffer::Of(x), options);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(status.message(),
            "rank 0: AllReduce #1 AllReduce(f32, count=1, op=sum) [nccl]: "
            "still being enqueued after its timeout of 50ms; the NCCL "
            "communicator was aborted");
  EXPECT_EQ(f.group->abort_status(), status);
  EXPECT_THAT(f.fake->TakeLog(), Contains("abort"));
}

TEST(NcclProcessGroup, WithoutCudaCreateIsUnimplemented) {
  if (MakeCudaNcclApi(0)->CreateStream().status().code() !=
      absl::StatusCode::kUnimplemented) {
    GTEST_SKIP() << "built with CUDA";
  }
  gloo::rendezvous::HashStore store;
  absl::StatusOr<std::unique_ptr<NcclProcessGroup>> g =
      NcclProcessGroup::Create(0, 1, 0, store);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(g.status().message(), HasSubstr("--config=cuda"));
}

TEST(NcclProcessGroup, WorkCompletesWhenItsStreamDoes) {
  Fixture f;
  f.fake->HoldCompletion();
  std::vector<float> x = {1};
  std::unique_ptr<Work> w = f.group->AllReduce(MutableBuffer::Of(x), {});
  EXPECT_FALSE(w->IsCompleted());
  const absl::Status early = w->Wait(absl::Now() + absl::Milliseconds(20));
  EXPECT_EQ(early.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(w->IsCompleted());  // Still running: not cancelled.
  f.fake->CompleteAll();
  EXPECT_TRUE(w->Wait().ok());
  EXPECT_TRUE(f.group->abort_status().ok());
}

// A compute stream waits for a pending collective on the GPU, not the host;
// for one that has completed there is nothing to wait for.
TEST(NcclProcessGroup, AStreamWaitsForAPendingCollectiveOnTheGpu) {
  Fixture f;
  f.fake->HoldCompletion();
  std::vector<float> x = {1};
  std::unique_ptr<Work> w = f.group->AllReduce(MutableBuffer::Of(x), {});
  f.fake->TakeLog();
  const CudaStream compute = reinterpret_cast<CudaStream>(uintptr_t{7});
  EXPECT_TRUE(w->WaitOnStream(compute).ok());
  EXPECT_FALSE(w->IsCompleted());  // The host did not wait.
  EXPECT_THAT(f.fake->TakeLog(), ElementsAre("stream_wait_event 7"));
  f.fake->CompleteAll();
  ASSERT_TRUE(w->Wait().ok());
  EXPECT_TRUE(w->WaitOnStream(compute).ok());
  EXPECT_THAT(f.fake->TakeLog(), ElementsAre());
}

TEST(NcclProcessGroup, WaitOnStreamOfAFailedCollectiveReturnsItsError) {
  Fixture f;
  f.fake->HoldCompletion();
  std::vector<float> x = {1};
  AllReduceOptions quick;
  quick.timeout = absl::Milliseconds(1);
  std::unique_ptr<Work> w = f.group->AllReduce(MutableBuffer::Of(x), quick);
  ASSERT_EQ(w->Wait().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(w->WaitOnStream(nullptr).code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(NcclProcessGroup, TimeoutAbortsAndFailsEveryPendingWork) {
  Fixture f;
  f.fake->HoldCompletion();
  std::vector<float> x = {1}, y = {2};
  AllReduceOptions options;
  options.timeout = absl::Milliseconds(30);
  std::unique_ptr<Work> first =
      f.group->AllReduce(MutableBuffer::Of(x), options);
  std::unique_ptr<Work> second =
      f.group->AllReduce(MutableBuffer::Of(y), options);
  const absl::Status status = first->Wait();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(status.message(),
            "rank 0: AllReduce #0 AllReduce(f32, count=1, op=sum) [nccl]: not "
            "complete within its timeout of 30ms; the NCCL communicator was "
            "aborted");
  const absl::Status later = second->Wait();
  EXPECT_EQ(later.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(later.message(),
              HasSubstr("rank 0: AllReduce #1 AllReduce(f32, count=1, "
                        "op=sum) [nccl]: aborted with the group"));
  EXPECT_THAT(f.fake->TakeLog(), Contains("abort"));
  EXPECT_EQ(f.group->abort_status(), status);
  // The group is done: later calls fail at once, quoting the cause.
  const absl::Status after = AllReduce(*f.group, MutableBuffer::Of(x));
  EXPECT_EQ(after.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(after.message(), HasSubstr("aborted by an earlier failure"));
  EXPECT_THAT(after.message(), HasSubstr("not complete within"));
  EXPECT_THAT(f.fake->TakeLog(),
              Not(Contains("enqueue AllReduce f32 count=1")));
}

TEST(NcclProcessGroup, WatchdogAbortsWithoutAnyoneWaiting) {
  NcclOptions options;
  options.watchdog_interval = absl::Milliseconds(5);
  Fixture f(options);
  f.fake->HoldCompletion();
  std::vector<float> x = {1};
  AllReduceOptions op_options;
  op_options.timeout = absl::Milliseconds(20);
  std::unique_ptr<Work> w =
      f.group->AllReduce(MutableBuffer::Of(x), op_options);
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (f.group->abort_status().ok() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(f.group->abort_status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(w->Wait().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(NcclProcessGroup, AsynchronousNcclErrorFailsThePendingWork) {
  Fixture f;
  f.fake->HoldCompletion();
  std::vector<float> x = {1};
  std::unique_ptr<Work> w = f.group->AllReduce(MutableBuffer::Of(x), {});
  f.fake->FailAsync(absl::UnavailableError("remote process exited"));
  const absl::Status status = w->Wait();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(status.message(),
            "rank 0: AllReduce #0 AllReduce(f32, count=1, op=sum) [nccl]: "
            "NCCL reported an asynchronous error: remote process exited");
  EXPECT_THAT(f.fake->TakeLog(), Contains("abort"));
}

TEST(NcclProcessGroup, FailedEnqueueAbortsTheGroup) {
  Fixture f;
  f.fake->FailEnqueue(absl::InternalError("ncclAllGather: unhandled cuda"));
  std::vector<float> send = {1}, recv = {0};
  const absl::Status status =
      AllGather(*f.group, ConstBuffer::Of(send), MutableBuffer::Of(recv));
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(status.message(),
            "rank 0: AllGather #0 AllGather(f32, count=1) [nccl]: "
            "ncclAllGather: unhandled cuda");
  EXPECT_EQ(Barrier(*f.group).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(NcclProcessGroup, FailedEventAbortsTheGroup) {
  Fixture f;
  f.fake->HoldCompletion();
  std::vector<float> x = {1};
  std::unique_ptr<Work> w = f.group->AllReduce(MutableBuffer::Of(x), {});
  f.fake->FailEvents(absl::InternalError("an illegal memory access"));
  const absl::Status status = w->Wait();
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("an illegal memory access"));
  EXPECT_FALSE(f.group->abort_status().ok());
}

TEST(NcclProcessGroup, ArgumentErrorsNeverReachNccl) {
  Fixture f;
  std::vector<float> send = {1, 2}, recv(3);
  const absl::Status status =
      AllGather(*f.group, ConstBuffer::Of(send), MutableBuffer::Of(recv));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("rank 0: AllGather"));
  EXPECT_THAT(f.fake->TakeLog(), ElementsAre());
  EXPECT_TRUE(f.group->abort_status().ok());  // Not issued: no harm done.
}

TEST(NcclProcessGroup, DestroyingWithWorkPendingAbortsAndCancelsIt) {
  Fixture f;
  f.fake->HoldCompletion();
  std::vector<float> x = {1};
  std::unique_ptr<Work> w = f.group->AllReduce(MutableBuffer::Of(x), {});
  f.fake->TakeLog();
  f.group.reset();
  const absl::Status status = w->Wait();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(status.message(),
              HasSubstr("rank 0: AllReduce #0 AllReduce(f32, count=1, op=sum) "
                        "[nccl]: aborted with the group: rank 0: the NCCL "
                        "group was destroyed"));
  EXPECT_THAT(f.fake->TakeLog(),
              ElementsAre("abort", "free", "destroy_stream"));
}

// Never ncclCommDestroy, which waits for every peer and would hang behind a
// dead one: the communicator is aborted, once.
TEST(NcclProcessGroup, DestructionAbortsTheCommunicatorOnce) {
  Fixture f;
  f.group.reset();
  EXPECT_THAT(f.fake->TakeLog(),
              ElementsAre("abort", "free", "destroy_stream"));
  Fixture g;
  g.fake->HoldCompletion();
  std::vector<float> x = {1};
  AllReduceOptions quick;
  quick.timeout = absl::Milliseconds(1);
  EXPECT_EQ(AllReduce(*g.group, MutableBuffer::Of(x), quick).code(),
            absl::StatusCode::kDeadlineExceeded);
  g.group.reset();  // Aborted already: not again.
  EXPECT_THAT(g.fake->TakeLog(),
              ElementsAre("wait_stream 0", "enqueue AllReduce f32 count=1",
                          "abort", "free", "destroy_stream"));
}

TEST(NcclProcessGroup, AbortFailsThePendingWorkWithTheCauseAndAbortsOnce) {
  Fixture f;
  f.fake->HoldCompletion();
  std::vector<float> x = {1};
  std::unique_ptr<Work> w = f.group->AllReduce(MutableBuffer::Of(x), {});
  f.fake->TakeLog();
  f.group->Abort(absl::ResourceExhaustedError("rank 0: out of memory"));
  ASSERT_TRUE(w->IsCompleted());
  EXPECT_EQ(w->Wait(), absl::ResourceExhaustedError("rank 0: out of memory"));
  EXPECT_EQ(f.group->abort_status(),
            absl::ResourceExhaustedError("rank 0: out of memory"));
  f.group->Abort(absl::CancelledError("again"));  // The first cause stays.
  const absl::Status later = AllReduce(*f.group, MutableBuffer::Of(x));
  EXPECT_FALSE(later.ok());
  EXPECT_THAT(later.message(), HasSubstr("out of memory"));
  f.group.reset();
  EXPECT_THAT(f.fake->TakeLog(),
              ElementsAre("abort", "free", "destroy_stream"));
}

TEST(NcclProcessGroup, AWatchdogThatCannotStartFailsCreate) {
  gloo::rendezvous::HashStore store;
  FakeNcclApi fake;
  FailThreadStartsForTesting(0, 1);
  absl::StatusOr<std::unique_ptr<NcclProcessGroup>> created =
      NcclProcessGroup::CreateWithApi(0, 1, ForwardTo(&fake), store, {});
  FailThreadStartsForTesting(0, 0);
  ASSERT_FALSE(created.ok());
  EXPECT_EQ(created.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(created.status().message(),
              HasSubstr("cannot start the NCCL watchdog of rank 0: Resource "
                        "temporarily unavailable"));
  EXPECT_THAT(fake.TakeLog(), Contains("abort"));
}

// Every input is produced on the compute stream: each collective's stream
// waits for it there (stream 0, the legacy default stream) before NCCL.
TEST(NcclProcessGroup, CollectivesWaitForTheComputeStream) {
  Fixture f;
  ASSERT_TRUE(Barrier(*f.group).ok());
  EXPECT_THAT(f.fake->TakeLog(),
              ElementsAre("wait_stream 0", "enqueue Barrier i32 count=1"));
}

TEST(NcclProcessGroup, ManyThreadsIssuingAndWaiting) {
  Fixture f;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&f] {
      std::vector<float> x(8, 1.0f);
      for (int i = 0; i < 50; ++i) {
        EXPECT_TRUE(AllReduce(*f.group, MutableBuffer::Of(x)).ok());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(f.fake->live_events(), 0);
}

}  // namespace
}  // namespace comm
}  // namespace chunkzero
