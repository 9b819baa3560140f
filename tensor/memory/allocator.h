// Raw memory for a device, and the registry that maps devices to allocators.
//
//   AllocatorRegistry& registry = AllocatorRegistry::Default();
//   absl::StatusOr<Allocator*> a = registry.Get(Device::Simulated(0));
//   absl::StatusOr<void*> p = (*a)->Allocate(1 << 20);
//
// Storage goes through an Allocator for every byte it holds, so tests can
// swap in a CountingAllocator and see exactly how often the system allocator
// is reached (chunk payloads must be reused, not reallocated, every step).
#ifndef CHUNKZERO_TENSOR_MEMORY_ALLOCATOR_H_
#define CHUNKZERO_TENSOR_MEMORY_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "tensor/device.h"
#include "tensor/memory/allocator_base.h"
#include "tensor/memory/gpu_memory_runtime.h"
#include "tensor/memory/stream_ordered_allocator.h"

namespace chunkzero {

// Blocks of at least this many bytes come straight from the kernel (mmap).
inline constexpr size_t kHostMapThreshold = size_t{1} << 20;

// Host memory from aligned operator new, or for blocks of kHostMapThreshold
// bytes or more mapped on their own, returned to the kernel when freed
// (Deallocate must be given the size allocated). Used for Device::Cpu()
// and, as a separate instance per index, for the simulated devices.
class HostAllocator final : public Allocator {
 public:
  explicit HostAllocator(Device device) : device_(device) {}
  Device device() const override { return device_; }
  [[nodiscard]] absl::StatusOr<void*> Allocate(size_t bytes) override;
  void Deallocate(void* ptr, size_t bytes) override;

 private:
  const Device device_;
};

// GPU memory of cuda:N, cached per stream
// (tensor/memory/stream_ordered_allocator.h) on the legacy default stream
// unless a stream is named. Only useful in a
// --config=cuda build on a machine with a GPU; elsewhere Allocate fails with
// Unimplemented.
class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(Device device)
      : runtime_(device.index()),
        cache_(&runtime_, /*default_stream=*/nullptr) {}
  Device device() const override { return runtime_.device(); }
  [[nodiscard]] absl::StatusOr<void*> Allocate(size_t bytes) override {
    return cache_.Allocate(bytes);
  }
  void Deallocate(void* ptr, size_t bytes) override {
    cache_.Deallocate(ptr, bytes);
  }
  // For stream-aware callers: AllocateOn, RecordStream, stats.
  StreamOrderedAllocator& cache() { return cache_; }

 private:
  CudaMemoryRuntime runtime_;
  StreamOrderedAllocator cache_;
};

// Page-locked host memory (cudaHostAlloc), which the GPU's copy engines
// read and write directly: asynchronous copies from and to it overlap
// compute. Its device is the CPU. Pinning is slow and limited, so wrap it in
// a CachingAllocator. Unimplemented in a build without CUDA.
class PinnedHostAllocator final : public Allocator {
 public:
  Device device() const override { return Device::Cpu(); }
  [[nodiscard]] absl::StatusOr<void*> Allocate(size_t bytes) override;
  void Deallocate(void* ptr, size_t bytes) override;
};

// Forwards to another allocator and counts the calls and live bytes.
// Thread-safe. Does not own `inner`, which must outlive it.
class CountingAllocator final : public Allocator {
 public:
  explicit CountingAllocator(Allocator* inner) : inner_(inner) {}
  Device device() const override { return inner_->device(); }
  [[nodiscard]] absl::StatusOr<void*> Allocate(size_t bytes) override;
  void Deallocate(void* ptr, size_t bytes) override;

  int64_t allocations() const;
  int64_t deallocations() const;
  int64_t live_bytes() const;

 private:
  Allocator* const inner_;
  mutable Mutex mu_;
  int64_t allocations_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t deallocations_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t live_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// Maps devices to allocators. Thread-safe.
class AllocatorRegistry {
 public:
  AllocatorRegistry() = default;
  AllocatorRegistry(const AllocatorRegistry&) = delete;
  AllocatorRegistry& operator=(const AllocatorRegistry&) = delete;

  // The process-wide registry: the CPU and every simulated device have host
  // allocators; CUDA devices have CudaAllocators in a CUDA build with GPUs.
  static AllocatorRegistry& Default();

  // Makes `allocator` serve allocator->device(), replacing any previous one.
  // Does not take ownership; `allocator` must outlive every use.
  void Register(Allocator* allocator);

  // The allocator for `device`. Devices of kind cpu and sim get a host
  // allocator on first use, and cuda:N (N < CudaDeviceCount()) a
  // CudaAllocator, owned by the registry; others are NotFound unless
  // registered.
  [[nodiscard]] absl::StatusOr<Allocator*> Get(Device device);

 private:
  Mutex mu_;
  std::map<Device, Allocator*> registered_ ABSL_GUARDED_BY(mu_);
  std::map<Device, std::unique_ptr<Allocator>> owned_ ABSL_GUARDED_BY(mu_);
};

// Copies `bytes` bytes between two allocations that may be on different
// devices. Host-accessible pairs (cpu, sim) are memcpy; pairs with a CUDA
// device use cudaMemcpy (Unimplemented, naming both devices, in a build
// without CUDA).
[[nodiscard]] absl::Status CopyBytes(void* dst, Device dst_device,
                                     const void* src, Device src_device,
                                     size_t bytes);

}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_MEMORY_ALLOCATOR_H_
