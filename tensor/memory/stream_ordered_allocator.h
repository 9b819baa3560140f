// A caching allocator for GPU memory whose blocks belong to CUDA streams.
//
//   CudaMemoryRuntime runtime(0);
//   StreamOrderedAllocator gpu(&runtime, /*default_stream=*/compute);
//   CZ_ASSIGN_OR_RETURN(void* p, gpu.Allocate(bytes));      // on `compute`
//   CZ_RETURN_IF_ERROR(gpu.RecordStream(p, comm));  // also used on `comm`
//   gpu.Deallocate(p, bytes);       // reusable once `comm` is past its use
//
// cudaMalloc and cudaFree synchronise the whole device, so a training step
// must not reach them: every block freed here is kept and handed out again
// (the CUDA caching allocator's design, as in PyTorch). GPU work is
// asynchronous, so a freed block may still be read or written by kernels
// the host has already enqueued. The rules that make reuse safe:
//  - A block belongs to the stream it was allocated on. Freed, it goes back
//    to that stream's pool at once: anything the stream does next runs after
//    the work that used the block.
//  - A block also used on other streams (RecordStream) waits, when freed,
//    for an event recorded on each of them; it rejoins its stream's pool
//    only once they have all finished. The host never waits for this.
//  - Sizes are rounded up to 512 bytes. A request takes the smallest cached
//    block of its stream that is at least as large and at most 1/8 larger
//    (bounding the waste); else it gets a new block from the device.
//  - When the device is out of memory the cache is returned to the device
//    (first the idle blocks, then, after waiting for their events, the
//    blocks still in use on other streams) and the request tried again.
//
// stats() counts what the device handed out (reserved) against what is in
// use (allocated, in rounded bytes); Storage reports each payload's exact
// bytes by category to its MemoryTracker, as on every device.
//
// Thread-safe. Does not own `runtime`, which must outlive it. Blocks still
// handed out when the allocator is destroyed are left to the device.
#ifndef CHUNKZERO_TENSOR_MEMORY_STREAM_ORDERED_ALLOCATOR_H_
#define CHUNKZERO_TENSOR_MEMORY_STREAM_ORDERED_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "tensor/cuda/cuda_handles.h"
#include "tensor/memory/allocator_base.h"
#include "tensor/memory/gpu_memory_runtime.h"

namespace chunkzero {

class StreamOrderedAllocator final : public Allocator {
 public:
  // Granularity of block sizes.
  static constexpr size_t kRoundBytes = 512;

  struct Stats {
    int64_t device_mallocs = 0;       // Blocks obtained from the device.
    int64_t device_frees = 0;         // Blocks returned to the device.
    int64_t hits = 0;                 // Requests served from the cache.
    int64_t allocated_bytes = 0;      // Rounded bytes handed out now.
    int64_t reserved_bytes = 0;       // Bytes held from the device now.
    int64_t peak_reserved_bytes = 0;  // Most ever held at once.
    int64_t pending_blocks = 0;       // Freed, waiting for other streams.
    int64_t oom_retries = 0;          // Times the cache was emptied to retry.
    int64_t unknown_frees = 0;        // Deallocate of a pointer not handed out.
  };

  StreamOrderedAllocator(GpuMemoryRuntime* runtime, CudaStream default_stream)
      : runtime_(runtime), default_stream_(default_stream) {}
  StreamOrderedAllocator(const StreamOrderedAllocator&) = delete;
  StreamOrderedAllocator& operator=(const StreamOrderedAllocator&) = delete;
  ~StreamOrderedAllocator() override;

  // `bytes` rounded up to a multiple of kRoundBytes (at least one).
  static size_t RoundSize(size_t bytes);

  Device device() const override { return runtime_->device(); }

  // On the default stream.
  [[nodiscard]] absl::StatusOr<void*> Allocate(size_t bytes) override;
  [[nodiscard]] absl::StatusOr<void*> AllocateOn(size_t bytes,
                                                 CudaStream stream);
  void Deallocate(void* ptr, size_t bytes) override;

  // Declares that the block at `ptr` (handed out, not yet freed) is used on
  // `stream` too, so that freeing it waits for `stream`'s work enqueued up
  // to the free. NotFound for a pointer not handed out by this allocator.
  [[nodiscard]] absl::Status RecordStream(void* ptr, CudaStream stream);

  // Returns every idle cached block to the device (blocks still waiting for
  // other streams stay).
  void EmptyCache();

  Stats stats() const;

 private:
  struct Block {
    size_t size = 0;  // Rounded.
    CudaStream stream = nullptr;
    std::vector<CudaStream> also_used_on;
  };
  struct Pending {
    void* ptr = nullptr;
    Block block;
    std::vector<CudaEvent> events;
  };
  using Pool = std::multimap<size_t, void*>;  // Size -> block, per stream.

  // Moves pending blocks whose events are all done to their pools.
  absl::Status ReclaimPendingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Returns idle blocks to the device.
  void FreeIdleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits for every pending block's events, then frees idle blocks.
  absl::Status FreeAllCachedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<void*> MallocLocked(size_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseEvents(const std::vector<CudaEvent>& events);

  GpuMemoryRuntime* const runtime_;
  const CudaStream default_stream_;
  mutable Mutex mu_;
  absl::flat_hash_map<void*, Block> live_ ABSL_GUARDED_BY(mu_);
  std::map<CudaStream, Pool> pools_ ABSL_GUARDED_BY(mu_);
  std::vector<Pending> pending_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_MEMORY_STREAM_ORDERED_ALLOCATOR_H_
