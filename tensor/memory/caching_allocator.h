// An allocator that keeps freed blocks and hands them out again.
//
//   CachingAllocator cache(*AllocatorRegistry::Default().Get(Device::Cpu()));
//   registry.Register(&cache);   // Storages on cpu now reuse blocks
//   ...
//   cache.stats().hits;          // allocations served from the cache
//
// Chunks are materialised and released every step, always at the same few
// sizes; going to the system allocator each time is the allocator churn
// users of the peers complain about. A block freed here is kept in a free
// list keyed by its exact size and returned by the next Allocate of that
// size, so a steady-state training step reaches the inner allocator zero
// times. Cached blocks are not live payload: MemoryTracker (fed by Storage)
// counts only what is handed out, and stats().cached_bytes tells what is
// held in reserve (PyTorch's "allocated" vs "reserved").
//
// Thread-safe. Does not own `inner`, which must outlive it; the destructor
// returns every cached block to `inner`.
#ifndef CHUNKZERO_TENSOR_MEMORY_CACHING_ALLOCATOR_H_
#define CHUNKZERO_TENSOR_MEMORY_CACHING_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <map>

#include "base/mutex.h"
#include "tensor/memory/allocator.h"

namespace chunkzero {

class CachingAllocator final : public Allocator {
 public:
  struct Stats {
    int64_t hits = 0;          // Allocate served from the cache.
    int64_t misses = 0;        // Allocate that reached the inner allocator.
    int64_t cached_bytes = 0;  // Bytes held in free lists now.
    int64_t cached_blocks = 0;
  };

  explicit CachingAllocator(Allocator* inner) : inner_(inner) {}
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;
  ~CachingAllocator() override;

  Device device() const override { return inner_->device(); }
  [[nodiscard]] absl::StatusOr<void*> Allocate(size_t bytes) override;
  void Deallocate(void* ptr, size_t bytes) override;

  Stats stats() const;

  // Returns every cached block to the inner allocator.
  void EmptyCache();

 private:
  Allocator* const inner_;
  mutable Mutex mu_;
  std::multimap<size_t, void*> free_blocks_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_MEMORY_CACHING_ALLOCATOR_H_
