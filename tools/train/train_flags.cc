#include "tools/train/train_flags.h"

#include "absl/strings/str_cat.h"

namespace chunkzero {
namespace {

absl::Status Bad(absl::string_view flag, absl::string_view value,
                 absl::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, "=", value, ": ", want));
}

}  // namespace

absl::StatusOr<Backend> ParseBackendFlag(absl::string_view value) {
  for (Backend b : {Backend::kInProcess, Backend::kGloo, Backend::kNccl}) {
    if (value == BackendFlagValue(b)) return b;
  }
  return Bad("backend", value, "want inproc or gloo");
}

absl::string_view BackendFlagValue(Backend backend) {
  switch (backend) {
    case Backend::kInProcess:
      return "inproc";
    case Backend::kGloo:
      return "gloo";
    case Backend::kNccl:
      return "nccl";
  }
  return "";
}

absl::StatusOr<DType> ParsePrecisionFlag(absl::string_view value) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
    if (value == PrecisionFlagValue(d)) return d;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--precision=", value, " is not one of fp32, fp16, bf16"));
}

absl::string_view PrecisionFlagValue(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "fp32";
    case DType::kF16:
      return "fp16";
    case DType::kBF16:
      return "bf16";
    default:
      return "";
  }
}

absl::StatusOr<ChunkLayout> ParseStorageFlag(absl::string_view value) {
  absl::StatusOr<ChunkLayout> layout = ParseChunkLayout(value);
  if (!layout.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--storage: ", layout.status().message()));
  }
  return *layout;
}

absl::StatusOr<OptimizerKind> ParseOptimizerFlag(absl::string_view value) {
  absl::StatusOr<OptimizerKind> kind = ParseOptimizerKind(value);
  if (!kind.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--optimizer: ", kind.status().message()));
  }
  return *kind;
}

absl::StatusOr<OffloadPolicy> ParseOffloadFlag(absl::string_view value) {
  for (OffloadPolicy p : {OffloadPolicy::kNone, OffloadPolicy::kOptimizer}) {
    if (value == OffloadFlagValue(p)) return p;
  }
  return Bad("offload", value, "want none or optimizer");
}

absl::string_view OffloadFlagValue(OffloadPolicy offload) {
  switch (offload) {
    case OffloadPolicy::kNone:
      return "none";
    case OffloadPolicy::kOptimizer:
      return "optimizer";
  }
  return "";
}

}  // namespace chunkzero
