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
  }
  return "invalid";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
    if (name == DTypeName(d)) return d;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", name, "' (expected f32, f16 or bf16)"));
}

std::ostream& operator<<(std::ostream& os, DType dtype) {
  return os << DTypeName(dtype);
}

}  // namespace chunkzero
