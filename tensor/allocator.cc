#include "tensor/allocator.h"

#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"

namespace chunkzero {

absl::StatusOr<void*> HostAllocator::Allocate(size_t bytes) {
  void* ptr =
      ::operator new(bytes == 0 ? kAllocationAlignment : bytes,
                     std::align_val_t(kAllocationAlignment), std::nothrow);
  if (ptr == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("out of memory on ", device_.ToString(), " allocating ",
                     bytes, " bytes"));
  }
  return ptr;
}

void HostAllocator::Deallocate(void* ptr, size_t bytes) {
  ::operator delete(ptr, std::align_val_t(kAllocationAlignment));
}

absl::StatusOr<void*> CountingAllocator::Allocate(size_t bytes) {
  absl::StatusOr<void*> ptr = inner_->Allocate(bytes);
  if (ptr.ok()) {
    absl::MutexLock lock(&mu_);
    ++allocations_;
    live_bytes_ += static_cast<int64_t>(bytes);
  }
  return ptr;
}

void CountingAllocator::Deallocate(void* ptr, size_t bytes) {
  inner_->Deallocate(ptr, bytes);
  absl::MutexLock lock(&mu_);
  ++deallocations_;
  live_bytes_ -= static_cast<int64_t>(bytes);
}

int64_t CountingAllocator::allocations() const {
  absl::MutexLock lock(&mu_);
  return allocations_;
}

int64_t CountingAllocator::deallocations() const {
  absl::MutexLock lock(&mu_);
  return deallocations_;
}

int64_t CountingAllocator::live_bytes() const {
  absl::MutexLock lock(&mu_);
  return live_bytes_;
}

AllocatorRegistry& AllocatorRegistry::Default() {
  static AllocatorRegistry* registry = new AllocatorRegistry();
  return *registry;
}

void AllocatorRegistry::Register(Allocator* allocator) {
  absl::MutexLock lock(&mu_);
  registered_[allocator->device()] = allocator;
}

absl::StatusOr<Allocator*> AllocatorRegistry::Get(Device device) {
  absl::MutexLock lock(&mu_);
  if (auto it = registered_.find(device); it != registered_.end()) {
    return it->second;
  }
  if (!device.is_host_accessible()) {
    return absl::NotFoundError(absl::StrCat(
        "no allocator for ", device.ToString(),
        " (CUDA devices need a build with --config=cuda and a GPU)"));
  }
  std::unique_ptr<HostAllocator>& owned = owned_[device];
  if (owned == nullptr) owned = std::make_unique<HostAllocator>(device);
  return owned.get();
}

absl::Status CopyBytes(void* dst, Device dst_device, const void* src,
                       Device src_device, size_t bytes) {
  if (!dst_device.is_host_accessible() || !src_device.is_host_accessible()) {
    return absl::UnimplementedError(
        absl::StrCat("copy from ", src_device.ToString(), " to ",
                     dst_device.ToString(), " needs a CUDA build"));
  }
  if (bytes > 0) std::memcpy(dst, src, bytes);
  return absl::OkStatus();
}

}  // namespace chunkzero
