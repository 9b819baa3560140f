#include "tensor/storage.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace chunkzero {

absl::StatusOr<std::shared_ptr<Storage>> Storage::Create(
    size_t nbytes, Device device, const StorageOptions& options) {
  std::shared_ptr<Storage> storage = CreateUnallocated(nbytes, device, options);
  CZ_RETURN_IF_ERROR(storage->Allocate());
  return storage;
}

std::shared_ptr<Storage> Storage::CreateUnallocated(
    size_t nbytes, Device device, const StorageOptions& options) {
  return std::shared_ptr<Storage>(new Storage(nbytes, device, options));
}

Storage::~Storage() { Free(); }

AllocatorRegistry& Storage::allocators() const {
  return options_.allocators != nullptr ? *options_.allocators
                                        : AllocatorRegistry::Default();
}

absl::StatusOr<void*> Storage::AllocateOn(Device device) {
  CZ_ASSIGN_OR_RETURN(Allocator * allocator, allocators().Get(device));
  const int64_t bytes = static_cast<int64_t>(nbytes_);
  // The device's memory limit first, so that a request past it never
  // reaches the allocator; counted once the memory is held, so that a
  // failed allocation never shows in a peak. Between the two another
  // thread may have taken the room: TryAdd checks again.
  if (options_.tracker != nullptr) {
    CZ_RETURN_IF_ERROR(
        options_.tracker->MakeRoom(device, options_.category, bytes));
  }
  CZ_ASSIGN_OR_RETURN(void* data, allocator->Allocate(nbytes_));
  if (options_.tracker != nullptr) {
    absl::Status counted =
        options_.tracker->TryAdd(device, options_.category, bytes);
    if (!counted.ok()) {
      allocator->Deallocate(data, nbytes_);
      return counted;
    }
  }
  return data;
}

void Storage::FreeOn(void* data, Device device) {
  // The allocator was found when `data` was allocated, so Get succeeds.
  absl::StatusOr<Allocator*> allocator = allocators().Get(device);
  (*allocator)->Deallocate(data, nbytes_);
  if (options_.tracker != nullptr) {
    options_.tracker->Subtract(device, options_.category,
                               static_cast<int64_t>(nbytes_));
  }
}

absl::StatusOr<const void*> Storage::MoveToAsync(
    Device device, CopyStream& stream,
    std::function<absl::Status()> readers_done,
    std::function<void(absl::Status)> then) {
  if (data_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot move ", nbytes_, " unallocated bytes to ", device.ToString()));
  }
  void* old = data_;
  const Device from = device_;
  if (device == from) {
    stream.Enqueue(
        [readers_done = std::move(readers_done), then = std::move(then)] {
          then(readers_done ? readers_done() : absl::OkStatus());
        });
    return old;
  }
  absl::StatusOr<void*> allocated = AllocateOn(device);
  CZ_RETURN_IF_ERROR(allocated, "moving ", nbytes_, " bytes from ",
                     from.ToString());
  void* moved = *allocated;
  data_ = moved;
  device_ = device;
  stream.Enqueue([this, old, from, moved, device,
                  readers_done = std::move(readers_done),
                  then = std::move(then)] {
    absl::Status status = CopyBytes(moved, device, old, from, nbytes_);
    if (readers_done) {
      absl::Status read = readers_done();
      if (status.ok()) status = read;
    }
    FreeOn(old, from);
    then(status);
  });
  return old;
}

absl::Status Storage::Allocate() {
  if (data_ != nullptr) return absl::OkStatus();
  CZ_ASSIGN_OR_RETURN(data_, AllocateOn(device_));
  return absl::OkStatus();
}

void Storage::Free() {
  if (data_ == nullptr) return;
  FreeOn(data_, device_);
  data_ = nullptr;
}

absl::Status Storage::MoveTo(Device device) {
  if (device == device_) return absl::OkStatus();
  if (data_ == nullptr) {
    device_ = device;
    return absl::OkStatus();
  }
  absl::StatusOr<void*> allocated = AllocateOn(device);
  CZ_RETURN_IF_ERROR(allocated, "moving ", nbytes_, " bytes from ",
                     device_.ToString());
  void* moved = *allocated;
  absl::Status copied = CopyBytes(moved, device, data_, device_, nbytes_);
  if (!copied.ok()) {
    FreeOn(moved, device);
    return copied;
  }
  FreeOn(data_, device_);
  data_ = moved;
  device_ = device;
  return absl::OkStatus();
}

}  // namespace chunkzero
