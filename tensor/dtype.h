// Element types of chunkzero tensors and collectives.
//
//   DType t = DType::kF16;
//   size_t bytes = n * ElementSize(t);           // 2 * n
//   absl::StatusOr<DType> p = ParseDType("bf16");  // DType::kBF16
//
// f16 is IEEE 754 binary16; bf16 is the upper half of an IEEE binary32. Both
// are stored as their 16-bit patterns (see tensor/half.h for conversions).
#ifndef CHUNKZERO_TENSOR_DTYPE_H_
#define CHUNKZERO_TENSOR_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <ostream>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace chunkzero {

enum class DType : uint8_t {
  kF32 = 0,
  kF16 = 1,
  kBF16 = 2,
  // Integer and f64 elements travel through the collectives (indexes, sizes,
  // byte payloads, double-precision sums); tensors, chunks and kernels
  // compute only in the three types above (IsComputeDType).
  kU8 = 3,
  kI32 = 4,
  kI64 = 5,
  kF64 = 6,
};
inline constexpr int kNumDTypes = 7;

// Bytes per element: 1 for u8, 2 for f16 and bf16, 4 for f32 and i32, 8 for
// i64 and f64.
constexpr size_t ElementSize(DType dtype) {
  switch (dtype) {
    case DType::kU8:
      return 1;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kI64:
    case DType::kF64:
      return 8;
  }
  return 0;  // Not a DType value.
}

// True for f32, f16 and bf16: what tensors, chunks and the CPU kernels hold
// and compute with.
constexpr bool IsComputeDType(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

// True for every named DType value (an enum can hold others).
constexpr bool IsValidDType(DType dtype) {
  return static_cast<int>(dtype) < kNumDTypes;
}

// OK for a named DType value; else InvalidArgument
// "<what>: unknown dtype value N".
[[nodiscard]] absl::Status CheckValidDType(DType dtype, absl::string_view what);

// OK for f32, f16 and bf16; else InvalidArgument "<what>: unknown dtype value
// N" or "<what>: i64 is not f32, f16 or bf16". Kernels, tensors' float
// conversions and the optimizer refuse other dtypes with it.
[[nodiscard]] absl::Status CheckComputeDType(DType dtype,
                                             absl::string_view what);

// "f32", "f16", "bf16", "u8", "i32", "i64" or "f64".
absl::string_view DTypeName(DType dtype);

// Inverse of DTypeName. Returns InvalidArgument for any other string.
[[nodiscard]] absl::StatusOr<DType> ParseDType(absl::string_view name);

std::ostream& operator<<(std::ostream& os, DType dtype);

}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_DTYPE_H_
