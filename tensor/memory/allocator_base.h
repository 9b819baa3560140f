// The Allocator interface: raw memory of one device.
//
//   absl::StatusOr<void*> p = allocator.Allocate(1 << 20);
//   allocator.Deallocate(*p, 1 << 20);
//
// Split from tensor/memory/allocator.h (which holds the implementations and the
// registry) so that allocators built on others, such as the GPU's
// stream-ordered cache, can implement it without depending on the registry.
#ifndef CHUNKZERO_TENSOR_MEMORY_ALLOCATOR_BASE_H_
#define CHUNKZERO_TENSOR_MEMORY_ALLOCATOR_BASE_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "tensor/device.h"

namespace chunkzero {

// Every allocation is aligned to this many bytes (one cache line, and the
// widest vector load the kernels use).
inline constexpr size_t kAllocationAlignment = 64;

// Hands out memory of one device. Implementations must be thread-safe.
class Allocator {
 public:
  virtual ~Allocator() = default;

  virtual Device device() const = 0;

  // Returns `bytes` bytes aligned to kAllocationAlignment, ResourceExhausted
  // when the device is out of memory. Allocate(0) returns a non-null pointer
  // that must be passed back to Deallocate.
  [[nodiscard]] virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;

  // Releases memory from Allocate of this allocator; `bytes` is the size that
  // was asked for.
  virtual void Deallocate(void* ptr, size_t bytes) = 0;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_MEMORY_ALLOCATOR_BASE_H_
