// CastTensor: one tensor's values converted into another's dtype, wherever
// the two live.
//
//   CZ_ASSIGN_OR_RETURN(Tensor f32, Tensor::Empty(w.shape(), DType::kF32));
//   CZ_RETURN_IF_ERROR(CastTensor(f32, w));   // w may be on a GPU
//
// The conversion runs where `dst` is: the CPU kernel (tensor/cpu/cast_kernels.h
// Cast) when the host can read it, the GPU kernel
// (tensor/cuda/cuda_elementwise.h CudaCast) on a GPU; `src` is first copied to
// dst's device when it is elsewhere. Both kernels round alike, so the result's
// bits do not depend on where it ran. Errors: InvalidArgument for different
// element counts or a pair of dtypes Cast does not convert; FailedPrecondition
// when either tensor has no memory; a failed copy's or kernel's error.
#ifndef CHUNKZERO_TENSOR_OPS_CAST_TENSOR_H_
#define CHUNKZERO_TENSOR_OPS_CAST_TENSOR_H_

#include "absl/status/status.h"
#include "tensor/tensor.h"

namespace chunkzero {

[[nodiscard]] absl::Status CastTensor(Tensor& dst, const Tensor& src);

}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_OPS_CAST_TENSOR_H_
