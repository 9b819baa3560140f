#include "tensor/memory/caching_allocator.h"

#include <utility>
#include <vector>

namespace chunkzero {

CachingAllocator::~CachingAllocator() { EmptyCache(); }

absl::StatusOr<void*> CachingAllocator::Allocate(size_t bytes) {
  {
    MutexLock lock(&mu_);
    auto it = free_blocks_.find(bytes);
    if (it != free_blocks_.end()) {
      void* ptr = it->second;
      free_blocks_.erase(it);
      ++stats_.hits;
      stats_.cached_bytes -= static_cast<int64_t>(bytes);
      --stats_.cached_blocks;
      return ptr;
    }
    ++stats_.misses;
  }
  absl::StatusOr<void*> ptr = inner_->Allocate(bytes);
  if (ptr.ok()) return ptr;
  // Out of memory: give the cache back and try once more.
  EmptyCache();
  return inner_->Allocate(bytes);
}

void CachingAllocator::Deallocate(void* ptr, size_t bytes) {
  MutexLock lock(&mu_);
  free_blocks_.emplace(bytes, ptr);
  stats_.cached_bytes += static_cast<int64_t>(bytes);
  ++stats_.cached_blocks;
}

CachingAllocator::Stats CachingAllocator::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

void CachingAllocator::EmptyCache() {
  std::multimap<size_t, void*> blocks;
  {
    MutexLock lock(&mu_);
    blocks.swap(free_blocks_);
    stats_.cached_bytes = 0;
    stats_.cached_blocks = 0;
  }
  for (const auto& [bytes, ptr] : blocks) inner_->Deallocate(ptr, bytes);
}

}  // namespace chunkzero
