// A byte buffer on one device that can be freed, allocated again and moved
// while the tensors that view it stay valid.
//
//   CZ_ASSIGN_OR_RETURN(std::shared_ptr<Storage> s,
//                       Storage::Create(1024, Device::Cpu(), options));
//   s->Free();                                  // nbytes() stays 1024
//   CZ_RETURN_IF_ERROR(s->Allocate());          // fresh memory, same views
//   CZ_RETURN_IF_ERROR(s->MoveTo(Device::Simulated(0)));
//
// A Tensor is (storage, byte offset, shape, dtype) and asks the storage for
// its pointer on every access, so freeing, reallocating or moving the storage
// re-points every view at once: this is how a chunk's parameters follow the
// chunk's payload. nbytes() is the logical size and never changes; whether
// memory is currently held is allocated().
//
// Ownership: shared by the tensors that view it (a shared_ptr, because views
// are values that outlive the code that made them, as in PyTorch). The
// allocator, the tracker and the registry must outlive the storage.
// Thread-safety: not thread-safe for mutation; callers (the chunk code)
// serialise Free/Allocate/MoveTo with any access to data().
#ifndef CHUNKZERO_TENSOR_STORAGE_H_
#define CHUNKZERO_TENSOR_STORAGE_H_

#include <cstddef>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensor/copy_stream.h"
#include "tensor/device.h"
#include "tensor/memory/allocator.h"
#include "tensor/memory/memory_tracker.h"

namespace chunkzero {

// Where a storage gets its memory and where it reports it.
struct StorageOptions {
  // Accounting category of the bytes.
  MemoryCategory category = MemoryCategory::kOther;
  // Tracker to report to; nullptr reports nowhere.
  MemoryTracker* tracker = nullptr;
  // Allocators by device; nullptr means AllocatorRegistry::Default().
  AllocatorRegistry* allocators = nullptr;
};

class Storage {
 public:
  // Allocates `nbytes` on `device` (contents indeterminate).
  [[nodiscard]] static absl::StatusOr<std::shared_ptr<Storage>> Create(
      size_t nbytes, Device device, const StorageOptions& options = {});

  // A storage of logical size `nbytes` that holds no memory yet.
  static std::shared_ptr<Storage> CreateUnallocated(
      size_t nbytes, Device device, const StorageOptions& options = {});

  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage();

  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  MemoryCategory category() const { return options_.category; }
  bool allocated() const { return data_ != nullptr; }

  // The memory, or nullptr while not allocated.
  void* data() { return data_; }
  const void* data() const { return data_; }

  // Gets nbytes() of fresh memory on device(). Contents are indeterminate.
  // OK and nothing happens if already allocated.
  [[nodiscard]] absl::Status Allocate();

  // Returns the memory to the allocator. Nothing happens if not allocated.
  void Free();

  // Starts a move to `device` whose copy runs on `stream`: allocates there
  // at once (so that a limit or an allocation failure is reported here, and
  // nothing changes then), points data() at the new memory, and enqueues
  // the copy from the old memory, then `readers_done()` (null: nothing),
  // then the freeing of the old memory, then `then(status)` with the first
  // error of the copy and `readers_done`. Returns the old memory, which
  // stays valid and unchanged until `readers_done` has returned (a
  // collective may read it meanwhile). data() must not be read or written
  // until `then` runs. FailedPrecondition when not allocated. REQUIRES: the
  // Storage outlives the task (wait for `then` before freeing or moving it
  // again).
  [[nodiscard]] absl::StatusOr<const void*> MoveToAsync(
      Device device, CopyStream& stream,
      std::function<absl::Status()> readers_done,
      std::function<void(absl::Status)> then);

  // Moves to `device`. If allocated, allocates there, copies, then frees the
  // old memory; on error nothing changes. If not allocated, only the device
  // changes.
  [[nodiscard]] absl::Status MoveTo(Device device);

 private:
  Storage(size_t nbytes, Device device, const StorageOptions& options)
      : nbytes_(nbytes), device_(device), options_(options) {}

  AllocatorRegistry& allocators() const;
  // Allocates on `device` and accounts for it.
  [[nodiscard]] absl::StatusOr<void*> AllocateOn(Device device);
  void FreeOn(void* data, Device device);

  const size_t nbytes_;
  Device device_;
  const StorageOptions options_;
  void* data_ = nullptr;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_STORAGE_H_
