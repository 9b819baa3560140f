// Helpers shared by the files that implement ZeroDdp (zero_ddp.cc,
// zero_ddp_registration.cc, zero_ddp_state_dict.cc); not part of its API.
#ifndef CHUNKZERO_DDP_ZERO_DDP_INTERNAL_H_
#define CHUNKZERO_DDP_ZERO_DDP_INTERNAL_H_

#include "absl/status/statusor.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace chunkzero {
namespace zero_ddp_internal {

// `t` (on any device) converted to `dtype` in new CPU storage.
[[nodiscard]] absl::StatusOr<Tensor> CastTo(const Tensor& t, DType dtype);

}  // namespace zero_ddp_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_DDP_ZERO_DDP_INTERNAL_H_
