#include "models/common/export_tensor.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "tensor/cpu/cast_kernels.h"
#include "tensor/cpu/reduction_kernels.h"

namespace chunkzero {

absl::StatusOr<Tensor> ExportTensor(const Tensor& t, absl::string_view name,
                                    absl::string_view where) {
  if (!t.is_materialized() || !t.device().is_host_accessible()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": tensor '", name, "' is not readable on the host"));
  }
  Tensor f32 = t;
  if (t.dtype() != DType::kF32) {
    CZ_ASSIGN_OR_RETURN(f32, Tensor::Empty(t.shape(), DType::kF32));
    CZ_RETURN_IF_ERROR(
        Cast(f32.raw_data(), DType::kF32, t.raw_data(), t.dtype(), t.numel()),
        where, ": tensor '", name, "'");
  }
  CZ_ASSIGN_OR_RETURN(const bool non_finite,
                      HasInfOrNan(f32.raw_data(), DType::kF32,
                                  static_cast<size_t>(f32.numel())));
  if (non_finite) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": tensor '", name,
        "' holds Inf or NaN; such a model is unusable, so nothing was "
        "written"));
  }
  return f32;
}

}  // namespace chunkzero
