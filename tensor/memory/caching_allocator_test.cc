#include "tensor/memory/caching_allocator.h"

#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/storage.h"

namespace chunkzero {
namespace {

TEST(CachingAllocator, ReusesBlocksOfTheSameSize) {
  HostAllocator host(Device::Cpu());
  CountingAllocator system(&host);
  CachingAllocator cache(&system);
  void* a = *cache.Allocate(4096);
  cache.Deallocate(a, 4096);
  EXPECT_EQ(cache.stats().cached_bytes, 4096);
  void* b = *cache.Allocate(4096);
  EXPECT_EQ(b, a);
  void* c = *cache.Allocate(2048);  // Another size: a miss.
  EXPECT_EQ(system.allocations(), 2);
  CachingAllocator::Stats s = cache.stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.misses, 2);
  EXPECT_EQ(s.cached_bytes, 0);
  cache.Deallocate(b, 4096);
  cache.Deallocate(c, 2048);
  EXPECT_EQ(cache.stats().cached_blocks, 2);
  cache.EmptyCache();
  EXPECT_EQ(system.deallocations(), 2);
  EXPECT_EQ(system.live_bytes(), 0);
}

TEST(CachingAllocator, DestructorReturnsCachedBlocks) {
  HostAllocator host(Device::Cpu());
  CountingAllocator system(&host);
  {
    CachingAllocator cache(&system);
    cache.Deallocate(*cache.Allocate(64), 64);
  }
  EXPECT_EQ(system.live_bytes(), 0);
}

// What chunks rely on: storages freed and allocated again every step reach
// the system allocator only the first time, and the tracker still counts
// exactly the live payload.
TEST(CachingAllocator, SteadyStateStorageChurnNeverReachesTheSystem) {
  HostAllocator host(Device::Cpu());
  CountingAllocator system(&host);
  CachingAllocator cache(&system);
  AllocatorRegistry registry;
  registry.Register(&cache);
  MemoryTracker tracker;
  StorageOptions options{MemoryCategory::kParam, &tracker, &registry};
  std::vector<std::shared_ptr<Storage>> chunks;
  for (int i = 0; i < 3; ++i) {
    chunks.push_back(
        Storage::CreateUnallocated(1 << 16, Device::Cpu(), options));
  }
  for (int step = 0; step < 10; ++step) {
    for (auto& chunk : chunks) {
      ASSERT_TRUE(chunk->Allocate().ok());
      EXPECT_EQ(tracker.Current(Device::Cpu(), MemoryCategory::kParam),
                (&chunk - &chunks[0] + 1) << 16);
    }
    for (auto& chunk : chunks) chunk->Free();
    EXPECT_EQ(tracker.Current(Device::Cpu(), MemoryCategory::kParam), 0);
  }
  EXPECT_EQ(system.allocations(), 3);
  EXPECT_EQ(cache.stats().hits, 27);
  EXPECT_EQ(tracker.Peak(Device::Cpu(), MemoryCategory::kParam), 3 << 16);
}

TEST(CachingAllocator, ConcurrentUseIsSafe) {
  HostAllocator host(Device::Cpu());
  CountingAllocator system(&host);
  CachingAllocator cache(&system);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&cache, t] {
      for (int i = 0; i < 200; ++i) {
        const size_t bytes = 128 * (1 + (i + t) % 3);
        void* p = *cache.Allocate(bytes);
        static_cast<char*>(p)[bytes - 1] = 1;
        cache.Deallocate(p, bytes);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  CachingAllocator::Stats s = cache.stats();
  EXPECT_EQ(s.hits + s.misses, 800);
  EXPECT_EQ(s.misses, system.allocations());
  // At most 4 threads hold a block of each of 3 sizes at once.
  EXPECT_LE(system.allocations(), 12);
}

}  // namespace
}  // namespace chunkzero
