// StagingProcessGroup over the in-process backend, with buffers on the
// simulated device sim:0 (host memory reached through CopyBytes, as a GPU's
// is through cudaMemcpy): results equal the direct collectives bit for
// bit, staging memory is reused, and errors name what failed.
#include "comm/staging_process_group.h"

#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/status_macros.h"
#include "base/thread.h"
#include "comm/fault_injecting_process_group.h"
#include "comm/testing/spawn_ranks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor/cuda/cuda_runtime.h"
#include "tensor/memory/caching_allocator.h"

namespace chunkzero {
namespace comm {
namespace {

using comm_testing::AllRanksOk;
using comm_testing::SpawnRanks;
using ::testing::HasSubstr;

constexpr Device kDevice = Device::Simulated(0);

// Per-rank values whose float sums depend on the order of addition.
std::vector<float> Values(int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = (rank + 1) * 0.1f + static_cast<float>(i) * 1e-3f;
  }
  return v;
}

// Every collective through the staging group gives the direct group's
// bytes, in place and not.
TEST(StagingProcessGroup, EqualsTheInnerBackendBitForBit) {
  constexpr int kRanks = 3;
  constexpr size_t kN = 1000;
  EXPECT_TRUE(AllRanksOk(SpawnRanks(kRanks, [](ProcessGroup& inner) {
    HostAllocator host(Device::Cpu());
    CachingAllocator staging(&host);
    StagingProcessGroup group(&inner, kDevice, &staging);
    const int r = inner.rank();
    // AllReduce: staged vs direct.
    std::vector<float> staged = Values(r, kN), direct = Values(r, kN);
    CZ_RETURN_IF_ERROR(AllReduce(group, MutableBuffer::Of(staged)));
    CZ_RETURN_IF_ERROR(AllReduce(inner, MutableBuffer::Of(direct)));
    if (staged != direct) return absl::InternalError("AllReduce differs");
    // Broadcast from rank 1.
    std::vector<float> b = Values(r, kN);
    BroadcastOptions from1;
    from1.root = 1;
    CZ_RETURN_IF_ERROR(Broadcast(group, MutableBuffer::Of(b), from1));
    if (b != Values(1, kN)) return absl::InternalError("Broadcast differs");
    // Reduce to rank 2, not in place.
    std::vector<float> send = Values(r, kN), recv(kN, 0), want(kN, 0);
    ReduceOptions to2;
    to2.root = 2;
    CZ_RETURN_IF_ERROR(Reduce(group, ConstBuffer::Of(send),
                              r == 2 ? MutableBuffer::Of(recv)
                                     : MutableBuffer{nullptr, 0, DType::kF32},
                              to2));
    CZ_RETURN_IF_ERROR(Reduce(inner, ConstBuffer::Of(send),
                              r == 2 ? MutableBuffer::Of(want)
                                     : MutableBuffer{nullptr, 0, DType::kF32},
                              to2));
    if (recv != want) return absl::InternalError("Reduce differs");
    // AllGather, in place and not.
    std::vector<float> gathered(kRanks * kN, 0);
    std::vector<float> mine = Values(r, kN);
    CZ_RETURN_IF_ERROR(
        AllGather(group, ConstBuffer::Of(mine), MutableBuffer::Of(gathered)));
    std::vector<float> in_place(kRanks * kN, -1);
    std::copy(mine.begin(), mine.end(), in_place.begin() + r * kN);
    CZ_RETURN_IF_ERROR(
        AllGather(group, ConstBuffer{in_place.data() + r * kN, kN, DType::kF32},
                  MutableBuffer::Of(in_place)));
    for (int q = 0; q < kRanks; ++q) {
      const std::vector<float> theirs = Values(q, kN);
      if (!std::equal(theirs.begin(), theirs.end(),
                      gathered.begin() + q * kN) ||
          !std::equal(theirs.begin(), theirs.end(),
                      in_place.begin() + q * kN)) {
        return absl::InternalError("AllGather differs");
      }
    }
    // ReduceScatter, in place and not, against the direct one.
    std::vector<float> full = Values(r, kRanks * kN);
    std::vector<float> slot(kN), direct_slot(kN);
    CZ_RETURN_IF_ERROR(
        ReduceScatter(group, ConstBuffer::Of(full), MutableBuffer::Of(slot)));
    CZ_RETURN_IF_ERROR(ReduceScatter(inner, ConstBuffer::Of(full),
                                     MutableBuffer::Of(direct_slot)));
    if (slot != direct_slot) return absl::InternalError("ReduceScatter");
    std::vector<float> own = full;
    CZ_RETURN_IF_ERROR(
        ReduceScatter(group, ConstBuffer::Of(own),
                      MutableBuffer{own.data() + r * kN, kN, DType::kF32}));
    if (!std::equal(direct_slot.begin(), direct_slot.end(),
                    own.begin() + r * kN)) {
      return absl::InternalError("in-place ReduceScatter differs");
    }
    return Barrier(group);
  })));
}

TEST(StagingProcessGroup, ReusesStagingMemoryEveryStep) {
  EXPECT_TRUE(AllRanksOk(SpawnRanks(2, [](ProcessGroup& inner) {
    HostAllocator host(Device::Cpu());
    CountingAllocator counting(&host);
    CachingAllocator staging(&counting);
    StagingProcessGroup group(&inner, kDevice, &staging);
    std::vector<uint16_t> grads(4096, 0x3c00);  // f16 ones
    std::vector<uint16_t> params(2 * 4096), shard(4096);
    for (int step = 0; step < 5; ++step) {
      CZ_RETURN_IF_ERROR(
          AllReduce(group, MutableBuffer::Of(grads, DType::kF16)));
      CZ_RETURN_IF_ERROR(AllGather(group, ConstBuffer::Of(shard, DType::kF16),
                                   MutableBuffer::Of(params, DType::kF16)));
    }
    // Step 1 staged 8 KiB for the all-reduce (which the gather's send then
    // reused, as the all-reduce had completed) and 16 KiB for the gathered
    // params; the four later steps reached the allocator no more.
    if (counting.allocations() != 2) {
      return absl::InternalError(
          absl::StrCat(counting.allocations(), " staging allocations"));
    }
    return absl::OkStatus();
  })));
}

TEST(StagingProcessGroup, NamesItselfAfterTheInnerBackend) {
  InProcessWorld world(1);
  HostAllocator host(Device::Cpu());
  StagingProcessGroup group(*world.group(0), kDevice, &host);
  EXPECT_EQ(group.backend_name(), "inprocess+staged");
  EXPECT_EQ(group.device(), kDevice);
  EXPECT_EQ(group.size(), 1);
  EXPECT_TRUE(group.SupportsDType(DType::kBF16));
}

TEST(StagingProcessGroup, ArgumentErrorsStageNothing) {
  InProcessWorld world(1);
  HostAllocator host(Device::Cpu());
  CountingAllocator counting(&host);
  StagingProcessGroup group(*world.group(0), kDevice, &counting);
  std::vector<float> send(2), recv(3);
  const absl::Status status =
      AllGather(group, ConstBuffer::Of(send), MutableBuffer::Of(recv));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("inprocess+staged"));
  EXPECT_EQ(counting.allocations(), 0);
}

TEST(StagingProcessGroup, InnerFailureLeavesTheDeviceBufferAlone) {
  InProcessWorld world(1);
  FaultInjectingProcessGroup faulty(
      **world.group(0),
      FaultPlan().FailKind(CollectiveKind::kAllReduce,
                           absl::UnavailableError("link down")));
  HostAllocator host(Device::Cpu());
  CountingAllocator counting(&host);
  StagingProcessGroup group(&faulty, kDevice, &counting);
  std::vector<float> x = {1, 2, 3};
  const absl::Status status = AllReduce(group, MutableBuffer::Of(x));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("link down"));
  EXPECT_EQ(x, (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(counting.live_bytes(), 0);  // Staging went back.
}

TEST(StagingProcessGroup, ACopyThatFailsNamesTheDevice) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is visible";
  InProcessWorld world(1);
  HostAllocator host(Device::Cpu());
  CountingAllocator counting(&host);
  StagingProcessGroup group(*world.group(0), Device::Cuda(0), &counting);
  std::vector<float> x = {1};
  const absl::Status status = AllReduce(group, MutableBuffer::Of(x));
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("rank 0: AllReduce(f32, count=1"));
  EXPECT_THAT(status.message(), HasSubstr("staging"));
  EXPECT_THAT(status.message(), HasSubstr("cuda:0"));
  EXPECT_EQ(counting.live_bytes(), 0);
}

TEST(StagingProcessGroup, DestructionWaitsForIssuedCollectives) {
  EXPECT_TRUE(AllRanksOk(SpawnRanks(2, [](ProcessGroup& inner) {
    HostAllocator host(Device::Cpu());
    CountingAllocator counting(&host);
    std::vector<float> x(100, 1.0f);
    std::unique_ptr<Work> work;
    {
      StagingProcessGroup group(&inner, kDevice, &counting);
      work = group.AllReduce(MutableBuffer::Of(x), {});
    }  // Destroyed with the collective possibly in flight.
    CZ_RETURN_IF_ERROR(work->Wait());
    if (x[0] != 2.0f) return absl::InternalError("result not copied back");
    if (counting.live_bytes() != 0) return absl::InternalError("leaked");
    return absl::OkStatus();
  })));
}

// Abort reaches the inner group and returns only once every collective
// issued here is complete: a late peer never gets a copy back into the
// device buffer.
TEST(StagingProcessGroup, AbortStopsTheInnerGroupAndWaitsForTheWorker) {
  InProcessWorld world(2);
  absl::Status late;
  std::thread rank1([&] {
    FaultInjectingProcessGroup slow(
        **world.group(1), FaultPlan().StallCall(0, absl::Milliseconds(300)));
    std::vector<float> y(100, 1.0f);
    late = AllReduce(slow, MutableBuffer::Of(y));
  });
  HostAllocator host(Device::Cpu());
  CountingAllocator counting(&host);
  StagingProcessGroup group(*world.group(0), kDevice, &counting);
  std::vector<float> x(100, 1.0f);
  std::unique_ptr<Work> work = group.AllReduce(MutableBuffer::Of(x), {});
  group.Abort(absl::CancelledError("rank 0 gave up"));
  EXPECT_TRUE(work->IsCompleted());
  EXPECT_THAT(std::string(work->Wait().message()), HasSubstr("rank 0 gave up"));
  std::fill(x.begin(), x.end(), -1.0f);
  rank1.join();
  EXPECT_FALSE(late.ok());
  EXPECT_EQ(x, std::vector<float>(100, -1.0f));
  EXPECT_EQ(counting.live_bytes(), 0);
}

// Where the kernel refuses the worker thread (ulimit -u), each collective
// finishes on the calling thread instead, with the same result.
TEST(StagingProcessGroup, WithoutAWorkerThreadCollectivesFinishInline) {
  EXPECT_TRUE(AllRanksOk(SpawnRanks(2, [](ProcessGroup& inner) {
    HostAllocator host(Device::Cpu());
    CountingAllocator counting(&host);
    std::vector<float> x(100, 1.0f);
    static Mutex start_mu;
    std::unique_ptr<StagingProcessGroup> group;
    {
      MutexLock lock(&start_mu);
      FailThreadStartsForTesting(0, 1);
      group = std::make_unique<StagingProcessGroup>(&inner, kDevice, &counting);
      FailThreadStartsForTesting(0, 0);
    }
    CZ_RETURN_IF_ERROR(AllReduce(*group, MutableBuffer::Of(x)));
    if (x[0] != 2.0f) return absl::InternalError("result not copied back");
    return absl::OkStatus();
  })));
}

}  // namespace
}  // namespace comm
}  // namespace chunkzero
