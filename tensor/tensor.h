// A typed, shaped, contiguous view of a Storage.
//
//   CZ_ASSIGN_OR_RETURN(Tensor w, Tensor::Empty({768, 2304}, DType::kF16));
//   CZ_ASSIGN_OR_RETURN(Tensor row, w.Slice(0, 1));     // shares storage
//   CZ_ASSIGN_OR_RETURN(Tensor flat, w.Reshape({768 * 2304}));
//   uint16_t* p = w.data<uint16_t>();                   // nullptr if freed
//
// A Tensor is a value: (shared storage, byte offset, shape, dtype). It never
// caches a raw pointer; data() asks the storage each time, so a view stays
// valid (and follows the memory) when its storage is freed, reallocated or
// moved to another device. Strides are always contiguous (row-major).
//
// Thread-safety: a Tensor value may be read from several threads; writing
// the underlying bytes or changing the storage needs external
// synchronisation, as for any buffer.
#ifndef CHUNKZERO_TENSOR_TENSOR_H_
#define CHUNKZERO_TENSOR_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/storage.h"

namespace chunkzero {

using Shape = absl::InlinedVector<int64_t, 4>;

// Number of elements of `shape` (1 for a scalar shape {}).
int64_t NumElements(absl::Span<const int64_t> shape);
// "[768, 2304]".
std::string ShapeToString(absl::Span<const int64_t> shape);

class Tensor {
 public:
  // An undefined tensor: no storage, shape {0}.
  Tensor() = default;

  // New storage of the right size on `device`; contents indeterminate.
  [[nodiscard]] static absl::StatusOr<Tensor> Empty(
      Shape shape, DType dtype, Device device = Device::Cpu(),
      const StorageOptions& options = {});
  // Like Empty, filled with zeros.
  [[nodiscard]] static absl::StatusOr<Tensor> Zeros(
      Shape shape, DType dtype, Device device = Device::Cpu(),
      const StorageOptions& options = {});
  // A CPU tensor holding `values` converted (round to nearest even) to
  // `dtype`. InvalidArgument if the counts differ.
  [[nodiscard]] static absl::StatusOr<Tensor> FromFloats(
      absl::Span<const float> values, Shape shape, DType dtype = DType::kF32);

  // A view of `storage` starting at `byte_offset`. InvalidArgument when it
  // does not fit, a dimension is negative or the offset is not a multiple of
  // the element size.
  [[nodiscard]] static absl::StatusOr<Tensor> View(
      std::shared_ptr<Storage> storage, size_t byte_offset, Shape shape,
      DType dtype);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_[i]; }
  // Contiguous row-major strides, in elements.
  Shape strides() const;
  int64_t numel() const { return NumElements(shape_); }
  size_t nbytes() const { return numel() * ElementSize(dtype_); }
  DType dtype() const { return dtype_; }
  // The storage's current device (Cpu for an undefined tensor).
  Device device() const;
  size_t byte_offset() const { return byte_offset_; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  // True when the storage currently holds memory.
  bool is_materialized() const;

  // The first element, or nullptr when the storage holds no memory.
  void* raw_data();
  const void* raw_data() const;
  // Typed access. REQUIRES: sizeof(T) == ElementSize(dtype()).
  template <typename T>
  T* data() {
    static_assert(
        sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8,
        "an element type of some DType");
    return sizeof(T) == ElementSize(dtype_) ? static_cast<T*>(raw_data())
                                            : nullptr;
  }
  template <typename T>
  const T* data() const {
    return const_cast<Tensor*>(this)->data<T>();
  }

  // Rows [begin, end) of dimension 0, sharing storage.
  [[nodiscard]] absl::StatusOr<Tensor> Slice(int64_t begin, int64_t end) const;
  // Same elements, another shape with the same element count.
  [[nodiscard]] absl::StatusOr<Tensor> Reshape(Shape shape) const;
  // The same elements as a rank-1 tensor.
  Tensor Flatten() const;
  // Elements [offset, offset + NumElements(shape)) of the flattened tensor.
  [[nodiscard]] absl::StatusOr<Tensor> ViewRange(int64_t element_offset,
                                                 Shape shape) const;

  // A copy in new storage on `device` (default: this tensor's device).
  [[nodiscard]] absl::StatusOr<Tensor> Clone(
      const StorageOptions& options = {}) const;
  [[nodiscard]] absl::StatusOr<Tensor> To(
      Device device, const StorageOptions& options = {}) const;

  // Copies `src` into this tensor's memory, across devices. Both must be
  // materialised and have the same dtype and element count.
  [[nodiscard]] absl::Status CopyFrom(const Tensor& src);

  // The values widened to f32 (for tests and reports), copied to the host
  // first from a device it cannot read (a GPU). FailedPrecondition if not
  // materialised, unless there are no elements to read; a failed copy's
  // error otherwise.
  [[nodiscard]] absl::StatusOr<std::vector<float>> ToFloats() const;

  // "f16[768, 2304] on sim:0 (+128 B)".
  std::string DebugString() const;

 private:
  Tensor(std::shared_ptr<Storage> storage, size_t byte_offset, Shape shape,
         DType dtype)
      : storage_(std::move(storage)),
        byte_offset_(byte_offset),
        shape_(std::move(shape)),
        dtype_(dtype) {}

  std::shared_ptr<Storage> storage_;
  size_t byte_offset_ = 0;
  Shape shape_ = {0};
  DType dtype_ = DType::kF32;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_TENSOR_H_
