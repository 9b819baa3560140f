#include "tensor/memory/allocator.h"

#include <sys/mman.h>

#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "tensor/cuda/cuda_runtime.h"

namespace chunkzero {

namespace {

// Whether a block of `bytes` is mapped from the kernel on its own rather
// than taken from the C heap. Large blocks (chunks, their shards) are: a
// freed one goes back to the kernel at once. From the heap they would not:
// glibc raises its mmap threshold to the size of each mapped block freed
// (up to 32 MiB), after which blocks of chunk size come from arenas that
// fragment between the chunks and the temporaries around them, and a
// process's resident memory grows well past what it holds (measured: 3.1
// GB resident for 0.93 GB held while two ranks registered a 311 M
// parameter model). Sanitizer builds keep the heap, whose blocks they
// check.
bool MapsOnItsOwn(size_t bytes) {
#ifdef CHUNKZERO_SANITIZER_BUILD
  return false;
#else
  return bytes >= kHostMapThreshold;
#endif
}

}  // namespace

absl::StatusOr<void*> HostAllocator::Allocate(size_t bytes) {
  void* ptr = nullptr;
  if (MapsOnItsOwn(bytes)) {
    ptr = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ptr == MAP_FAILED) ptr = nullptr;
  } else {
    ptr = ::operator new(bytes == 0 ? kAllocationAlignment : bytes,
                         std::align_val_t(kAllocationAlignment), std::nothrow);
  }
  if (ptr == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("out of memory on ", device_.ToString(), " allocating ",
                     bytes, " bytes"));
  }
  return ptr;
}

void HostAllocator::Deallocate(void* ptr, size_t bytes) {
  if (MapsOnItsOwn(bytes)) {
    ::munmap(ptr, bytes);
    return;
  }
  ::operator delete(ptr, std::align_val_t(kAllocationAlignment));
}

absl::StatusOr<void*> PinnedHostAllocator::Allocate(size_t bytes) {
  return CudaHostAlloc(bytes);
}

void PinnedHostAllocator::Deallocate(void* ptr, size_t /*bytes*/) {
  // A failing cudaFreeHost means a broken context; nothing useful can be
  // done with the error at this point.
  CudaHostFree(ptr).IgnoreError();
}

absl::StatusOr<void*> CountingAllocator::Allocate(size_t bytes) {
  absl::StatusOr<void*> ptr = inner_->Allocate(bytes);
  if (ptr.ok()) {
    MutexLock lock(&mu_);
    ++allocations_;
    live_bytes_ += static_cast<int64_t>(bytes);
  }
  return ptr;
}

void CountingAllocator::Deallocate(void* ptr, size_t bytes) {
  inner_->Deallocate(ptr, bytes);
  MutexLock lock(&mu_);
  ++deallocations_;
  live_bytes_ -= static_cast<int64_t>(bytes);
}

int64_t CountingAllocator::allocations() const {
  MutexLock lock(&mu_);
  return allocations_;
}

int64_t CountingAllocator::deallocations() const {
  MutexLock lock(&mu_);
  return deallocations_;
}

int64_t CountingAllocator::live_bytes() const {
  MutexLock lock(&mu_);
  return live_bytes_;
}

AllocatorRegistry& AllocatorRegistry::Default() {
  static AllocatorRegistry* registry = new AllocatorRegistry();
  return *registry;
}

void AllocatorRegistry::Register(Allocator* allocator) {
  MutexLock lock(&mu_);
  registered_[allocator->device()] = allocator;
}

absl::StatusOr<Allocator*> AllocatorRegistry::Get(Device device) {
  MutexLock lock(&mu_);
  if (auto it = registered_.find(device); it != registered_.end()) {
    return it->second;
  }
  if (auto it = owned_.find(device); it != owned_.end()) {
    return it->second.get();
  }
  std::unique_ptr<Allocator> allocator;
  if (device.is_host_accessible()) {
    allocator = std::make_unique<HostAllocator>(device);
  } else if (device.index() < CudaDeviceCount()) {
    allocator = std::make_unique<CudaAllocator>(device);
  } else {
    return absl::NotFoundError(
        absl::StrCat("no allocator for ", device.ToString(), " (",
                     BuiltWithCuda() ? "this machine has fewer GPUs"
                                     : "built without --config=cuda",
                     ")"));
  }
  return (owned_[device] = std::move(allocator)).get();
}

absl::Status CopyBytes(void* dst, Device dst_device, const void* src,
                       Device src_device, size_t bytes) {
  if (dst_device.is_host_accessible() && src_device.is_host_accessible()) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status copied = CudaMemcpy(dst, src, bytes);
  if (copied.ok()) return copied;
  return absl::Status(
      copied.code(),
      absl::StrCat("copy of ", bytes, " bytes from ", src_device.ToString(),
                   " to ", dst_device.ToString(), ": ", copied.message()));
}

}  // namespace chunkzero
