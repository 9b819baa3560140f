// AxpyTensor: y += a * x for two f32 tensors on one device, whichever it is.
//
//   CZ_RETURN_IF_ERROR(AxpyTensor(sum, 1.0f, grad));  // a tied weight's grads
//
// On a host-readable device the CPU kernel runs
// (tensor/cpu/elementwise_kernels.h AxpyF32), on a GPU the CUDA one
// (tensor/cuda/cuda_elementwise.h CudaAxpy), with the same per-element math.
// Errors: InvalidArgument unless both are f32, materialised, of one element
// count and on one device; a GPU kernel's.
#ifndef CHUNKZERO_TENSOR_OPS_AXPY_TENSOR_H_
#define CHUNKZERO_TENSOR_OPS_AXPY_TENSOR_H_

#include "absl/status/status.h"
#include "tensor/tensor.h"

namespace chunkzero {

[[nodiscard]] absl::Status AxpyTensor(Tensor& y, float a, const Tensor& x);

}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_OPS_AXPY_TENSOR_H_
