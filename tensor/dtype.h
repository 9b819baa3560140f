// Element types of chunkzero tensors.
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
};

// Bytes per element: 4 for f32, 2 for f16 and bf16.
constexpr size_t ElementSize(DType dtype) {
  return dtype == DType::kF32 ? 4 : 2;
}

// "f32", "f16" or "bf16".
absl::string_view DTypeName(DType dtype);

// Inverse of DTypeName. Returns InvalidArgument for any other string.
absl::StatusOr<DType> ParseDType(absl::string_view name);

std::ostream& operator<<(std::ostream& os, DType dtype);

}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_DTYPE_H_
