#include "tensor/memory/stream_ordered_allocator.h"

#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor/memory/testing/fake_gpu_memory_runtime.h"
#include "tensor/storage.h"

namespace chunkzero {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const CudaStream kCompute = FakeStream(1);
const CudaStream kComm = FakeStream(2);

TEST(StreamOrderedAllocator, RoundsSizesUpTo512Bytes) {
  EXPECT_EQ(StreamOrderedAllocator::RoundSize(0), 512u);
  EXPECT_EQ(StreamOrderedAllocator::RoundSize(1), 512u);
  EXPECT_EQ(StreamOrderedAllocator::RoundSize(512), 512u);
  EXPECT_EQ(StreamOrderedAllocator::RoundSize(513), 1024u);
}

TEST(StreamOrderedAllocator, SteadyStateNeverReachesTheDevice) {
  FakeGpuMemoryRuntime runtime(1 << 20);
  StreamOrderedAllocator allocator(&runtime, kCompute);
  EXPECT_EQ(allocator.device(), Device::Cuda(0));
  // Step 1 allocates; steps 2 to 5 reuse the same blocks.
  std::vector<void*> first;
  for (int step = 0; step < 5; ++step) {
    void* a = *allocator.Allocate(4096);
    void* b = *allocator.Allocate(1000);
    if (step == 0) first = {a, b};
    EXPECT_EQ(a, first[0]);
    EXPECT_EQ(b, first[1]);
    allocator.Deallocate(a, 4096);
    allocator.Deallocate(b, 1000);
  }
  EXPECT_THAT(runtime.TakeLog(), ElementsAre("malloc 4096", "malloc 1024"));
  const StreamOrderedAllocator::Stats s = allocator.stats();
  EXPECT_EQ(s.device_mallocs, 2);
  EXPECT_EQ(s.hits, 8);
  EXPECT_EQ(s.allocated_bytes, 0);
  EXPECT_EQ(s.reserved_bytes, 4096 + 1024);
  EXPECT_EQ(s.peak_reserved_bytes, 4096 + 1024);
}

TEST(StreamOrderedAllocator, CountsRoundedBytesInUse) {
  FakeGpuMemoryRuntime runtime(1 << 20);
  StreamOrderedAllocator allocator(&runtime, kCompute);
  void* a = *allocator.Allocate(100);
  void* b = *allocator.Allocate(600);
  EXPECT_EQ(allocator.stats().allocated_bytes, 512 + 1024);
  allocator.Deallocate(a, 100);
  EXPECT_EQ(allocator.stats().allocated_bytes, 1024);
  allocator.Deallocate(b, 600);
  EXPECT_EQ(allocator.stats().allocated_bytes, 0);
  EXPECT_EQ(allocator.stats().reserved_bytes, 512 + 1024);
}

TEST(StreamOrderedAllocator, ReusesALargerBlockOnlyWithinAnEighth) {
  FakeGpuMemoryRuntime runtime(1 << 20);
  StreamOrderedAllocator allocator(&runtime, kCompute);
  void* big = *allocator.Allocate(9 * 512);
  allocator.Deallocate(big, 9 * 512);
  // 8 blocks of 512 may take 9 (1/8 more): a hit, counting the whole block.
  void* fits = *allocator.Allocate(8 * 512);
  EXPECT_EQ(fits, big);
  EXPECT_EQ(allocator.stats().allocated_bytes, 9 * 512);
  allocator.Deallocate(fits, 8 * 512);
  // 7 blocks may not: a new block.
  void* small = *allocator.Allocate(7 * 512);
  EXPECT_NE(small, big);
  allocator.Deallocate(small, 7 * 512);
  EXPECT_THAT(runtime.TakeLog(), ElementsAre("malloc 4608", "malloc 3584"));
}

TEST(StreamOrderedAllocator, BlocksBelongToTheirStream) {
  FakeGpuMemoryRuntime runtime(1 << 20);
  StreamOrderedAllocator allocator(&runtime, kCompute);
  void* a = *allocator.AllocateOn(4096, kComm);
  allocator.Deallocate(a, 4096);
  // Freed on the comm stream: the compute stream gets a block of its own,
  // since its work is not ordered after the comm stream's.
  void* b = *allocator.Allocate(4096);
  EXPECT_NE(b, a);
  void* c = *allocator.AllocateOn(4096, kComm);
  EXPECT_EQ(c, a);
  allocator.Deallocate(b, 4096);
  allocator.Deallocate(c, 4096);
  EXPECT_EQ(allocator.stats().device_mallocs, 2);
}

TEST(StreamOrderedAllocator, BlockUsedOnAnotherStreamWaitsForIt) {
  FakeGpuMemoryRuntime runtime(1 << 20);
  StreamOrderedAllocator allocator(&runtime, kCompute);
  void* a = *allocator.Allocate(4096);
  ASSERT_TRUE(allocator.RecordStream(a, kComm).ok());
  ASSERT_TRUE(allocator.RecordStream(a, kComm).ok());     // Once is enough.
  ASSERT_TRUE(allocator.RecordStream(a, kCompute).ok());  // Its own: no-op.
  runtime.TakeLog();
  allocator.Deallocate(a, 4096);
  EXPECT_THAT(runtime.TakeLog(), ElementsAre("record 2"));
  EXPECT_EQ(allocator.stats().pending_blocks, 1);
  // The comm stream has not finished: the block is not handed out.
  void* b = *allocator.Allocate(4096);
  EXPECT_NE(b, a);
  allocator.Deallocate(b, 4096);
  runtime.FinishStream(kComm);
  void* c = *allocator.Allocate(4096);
  void* d = *allocator.Allocate(4096);
  EXPECT_THAT((std::vector<void*>{c, d}),
              ::testing::UnorderedElementsAre(a, b));
  EXPECT_EQ(allocator.stats().pending_blocks, 0);
  EXPECT_EQ(runtime.live_events(), 0u);  // Released to the runtime.
  allocator.Deallocate(c, 4096);
  allocator.Deallocate(d, 4096);
}

TEST(StreamOrderedAllocator, RecordStreamOfAForeignPointerIsNotFound) {
  FakeGpuMemoryRuntime runtime(1 << 20);
  StreamOrderedAllocator allocator(&runtime, kCompute);
  int local = 0;
  const absl::Status status = allocator.RecordStream(&local, kComm);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("cuda:0"));
}

TEST(StreamOrderedAllocator, IgnoresAndCountsAFreeOfAForeignPointer) {
  FakeGpuMemoryRuntime runtime(1 << 20);
  StreamOrderedAllocator allocator(&runtime, kCompute);
  int local = 0;
  allocator.Deallocate(&local, 4);
  EXPECT_EQ(allocator.stats().unknown_frees, 1);
  EXPECT_THAT(runtime.TakeLog(), IsEmpty());
}

TEST(StreamOrderedAllocator, OutOfMemoryReturnsTheIdleCacheAndRetries) {
  FakeGpuMemoryRuntime runtime(8192);
  StreamOrderedAllocator allocator(&runtime, kCompute);
  void* a = *allocator.Allocate(4096);
  void* b = *allocator.Allocate(2048);
  allocator.Deallocate(a, 4096);
  allocator.Deallocate(b, 2048);
  runtime.TakeLog();
  // 6144 fits no cached block and not beside them.
  absl::StatusOr<void*> c = allocator.Allocate(6144);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(runtime.TakeLog(), ElementsAre("malloc 6144 failed", "free 2048",
                                             "free 4096", "malloc 6144"));
  const StreamOrderedAllocator::Stats s = allocator.stats();
  EXPECT_EQ(s.oom_retries, 1);
  EXPECT_EQ(s.device_frees, 2);
  EXPECT_EQ(s.reserved_bytes, 6144);
  EXPECT_EQ(s.peak_reserved_bytes, 6144);
  allocator.Deallocate(*c, 6144);
}

TEST(StreamOrderedAllocator, OutOfMemoryWaitsForOtherStreamsAsALastResort) {
  FakeGpuMemoryRuntime runtime(8192);
  StreamOrderedAllocator allocator(&runtime, kCompute);
  void* a = *allocator.Allocate(8192);
  ASSERT_TRUE(allocator.RecordStream(a, kComm).ok());
  allocator.Deallocate(a, 8192);
  runtime.TakeLog();
  absl::StatusOr<void*> b = allocator.Allocate(4096);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_THAT(runtime.TakeLog(),
              ElementsAre("malloc 4096 failed", "malloc 4096 failed", "wait 2",
                          "release 2", "free 8192", "malloc 4096"));
  allocator.Deallocate(*b, 4096);
}

TEST(StreamOrderedAllocator, OutOfMemoryNamesTheDeviceAndTheBytes) {
  FakeGpuMemoryRuntime runtime(4096, Device::Cuda(3));
  StreamOrderedAllocator allocator(&runtime, kCompute);
  void* a = *allocator.Allocate(4096);
  const absl::Status status = allocator.Allocate(100).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("allocating 100 bytes on cuda:3"));
  EXPECT_THAT(status.message(), HasSubstr("4096 bytes held from the device "
                                          "and 4096 in use"));
  EXPECT_THAT(status.message(), HasSubstr("fake device full"));
  allocator.Deallocate(a, 4096);
}

TEST(StreamOrderedAllocator, AFailedEventQueryIsReportedByAllocate) {
  FakeGpuMemoryRuntime runtime(1 << 20);
  StreamOrderedAllocator allocator(&runtime, kCompute);
  void* a = *allocator.Allocate(512);
  ASSERT_TRUE(allocator.RecordStream(a, kComm).ok());
  allocator.Deallocate(a, 512);
  runtime.FailQueries(absl::InternalError("illegal address"));
  const absl::Status status = allocator.Allocate(512).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("other streams"));
  EXPECT_THAT(status.message(), HasSubstr("illegal address"));
}

TEST(StreamOrderedAllocator, ABlockWhoseEventCannotBeRecordedIsNeverReused) {
  FakeGpuMemoryRuntime runtime(1 << 20);
  StreamOrderedAllocator allocator(&runtime, kCompute);
  void* a = *allocator.Allocate(512);
  ASSERT_TRUE(allocator.RecordStream(a, kComm).ok());
  runtime.FailRecords(absl::InternalError("context lost"));
  allocator.Deallocate(a, 512);
  EXPECT_EQ(allocator.stats().pending_blocks, 0);
  void* b = *allocator.Allocate(512);
  EXPECT_NE(b, a);
  allocator.Deallocate(b, 512);
  allocator.EmptyCache();
  // Only b went back to the device; a stays held.
  EXPECT_EQ(allocator.stats().device_frees, 1);
  EXPECT_EQ(allocator.stats().reserved_bytes, 512);
}

TEST(StreamOrderedAllocator, EmptyCacheKeepsBlocksStillInUseElsewhere) {
  FakeGpuMemoryRuntime runtime(1 << 20);
  StreamOrderedAllocator allocator(&runtime, kCompute);
  void* a = *allocator.Allocate(512);
  void* b = *allocator.Allocate(1024);
  ASSERT_TRUE(allocator.RecordStream(b, kComm).ok());
  allocator.Deallocate(a, 512);
  allocator.Deallocate(b, 1024);
  runtime.TakeLog();
  allocator.EmptyCache();
  EXPECT_THAT(runtime.TakeLog(), ElementsAre("free 512"));
  EXPECT_EQ(allocator.stats().reserved_bytes, 1024);
  runtime.FinishStream(kComm);
  allocator.EmptyCache();
  EXPECT_THAT(runtime.TakeLog(), ElementsAre("release 2", "free 1024"));
  EXPECT_EQ(allocator.stats().reserved_bytes, 0);
}

TEST(StreamOrderedAllocator, DestructorWaitsThenReturnsEveryCachedBlock) {
  FakeGpuMemoryRuntime runtime(1 << 20);
  {
    StreamOrderedAllocator allocator(&runtime, kCompute);
    void* a = *allocator.Allocate(512);
    void* b = *allocator.Allocate(1024);
    ASSERT_TRUE(allocator.RecordStream(b, kComm).ok());
    allocator.Deallocate(a, 512);
    allocator.Deallocate(b, 1024);
    runtime.TakeLog();
  }
  EXPECT_THAT(runtime.TakeLog(),
              ElementsAre("wait 2", "release 2", "free 512", "free 1024"));
  EXPECT_EQ(runtime.in_use(), 0u);
}

TEST(StreamOrderedAllocator, ServesStoragesWithExactTrackedBytes) {
  FakeGpuMemoryRuntime runtime(1 << 20);
  StreamOrderedAllocator allocator(&runtime, kCompute);
  AllocatorRegistry registry;
  registry.Register(&allocator);
  MemoryTracker tracker;
  StorageOptions options;
  options.category = MemoryCategory::kParam;
  options.tracker = &tracker;
  options.allocators = &registry;
  for (int step = 0; step < 3; ++step) {
    absl::StatusOr<std::shared_ptr<Storage>> s =
        Storage::Create(1000, Device::Cuda(0), options);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(tracker.Current(Device::Cuda(0), MemoryCategory::kParam), 1000);
    (*s)->Free();
    EXPECT_EQ(tracker.Current(Device::Cuda(0), MemoryCategory::kParam), 0);
  }
  EXPECT_EQ(allocator.stats().device_mallocs, 1);
  EXPECT_EQ(allocator.stats().hits, 2);
}

TEST(StreamOrderedAllocator, ThreadsAllocatingAtOnceGetDistinctBlocks) {
  FakeGpuMemoryRuntime runtime(64 << 20);
  StreamOrderedAllocator allocator(&runtime, kCompute);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&allocator, t] {
      const CudaStream stream = FakeStream(10 + t % 2);
      for (int i = 0; i < 200; ++i) {
        void* p = *allocator.AllocateOn(512 * (1 + i % 3), stream);
        *static_cast<int*>(p) = t;  // Caught by tsan if shared.
        allocator.Deallocate(p, 0);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const StreamOrderedAllocator::Stats s = allocator.stats();
  EXPECT_EQ(s.allocated_bytes, 0);
  EXPECT_EQ(s.hits + s.device_mallocs, 800);
  EXPECT_LE(s.device_mallocs, 12);  // At most 4 threads x 3 sizes.
}

}  // namespace
}  // namespace chunkzero
