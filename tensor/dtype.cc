#include "tensor/dtype.h"

#include "absl/strings/str_cat.h"

namespace chunkzero {

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kU8:
      return "u8";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kF64:
      return "f64";
  }
  return "invalid";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType d = static_cast<DType>(i);
    if (name == DTypeName(d)) return d;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", name,
                   "' (expected f32, f16, bf16, u8, i32, i64 or f64)"));
}

absl::Status CheckValidDType(DType dtype, absl::string_view what) {
  if (!IsValidDType(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": unknown dtype value ", static_cast<int>(dtype)));
  }
  return absl::OkStatus();
}

absl::Status CheckComputeDType(DType dtype, absl::string_view what) {
  if (absl::Status valid = CheckValidDType(dtype, what); !valid.ok()) {
    return valid;
  }
  if (!IsComputeDType(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", DTypeName(dtype), " is not f32, f16 or bf16"));
  }
  return absl::OkStatus();
}

std::ostream& operator<<(std::ostream& os, DType dtype) {
  return os << DTypeName(dtype);
}

}  // namespace chunkzero
