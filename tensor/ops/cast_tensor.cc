#include "tensor/ops/cast_tensor.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "tensor/cpu/cast_kernels.h"
#include "tensor/cuda/cuda_elementwise.h"

namespace chunkzero {

absl::Status CastTensor(Tensor& dst, const Tensor& src) {
  if (dst.numel() != src.numel()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot cast ", src.DebugString(), " into ",
                     dst.DebugString(), ": the element counts differ"));
  }
  if (dst.numel() == 0) return absl::OkStatus();
  if (!dst.is_materialized() || !src.is_materialized()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cast from ", src.DebugString(), " into ",
                     dst.DebugString(), ": storage not materialised"));
  }
  const Device where = dst.device();
  // Where the host can read both, no copy is needed whatever the devices.
  const bool same_memory = where.is_host_accessible()
                               ? src.device().is_host_accessible()
                               : src.device() == where;
  Tensor staged;
  const Tensor* from = &src;
  if (!same_memory) {
    CZ_ASSIGN_OR_RETURN(staged, src.To(where));
    from = &staged;
  }
  const size_t n = static_cast<size_t>(dst.numel());
  const absl::Status cast = where.is_host_accessible()
                                ? Cast(dst.raw_data(), dst.dtype(),
                                       from->raw_data(), from->dtype(), n)
                                : CudaCast(dst.raw_data(), dst.dtype(),
                                           from->raw_data(), from->dtype(), n);
  CZ_RETURN_IF_ERROR(cast, "casting ", src.DebugString(), " into ",
                     dst.DebugString());
  return absl::OkStatus();
}

}  // namespace chunkzero
