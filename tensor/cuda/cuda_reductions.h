// Overflow check and sum of squares over a GPU array, with the CPU's
// results (tensor/cpu/reduction_kernels.h).
//
//   CZ_ASSIGN_OR_RETURN(double sq, CudaSumOfSquares(grad16, DType::kBF16, n));
//   const bool overflow = !std::isfinite(sq);   // == CudaHasInfOrNan
//
// `x` is device memory; each call waits for its kernels and returns the
// value to the host. CudaSumOfSquares adds in the CPU's fixed order
// (tensor/elementwise_math.h), so it returns exactly SumOfSquares's bits;
// as there, the result is Inf or NaN iff an element is, so one pass gives
// both the norm and the overflow check. Temporaries come from CUDA's
// stream-ordered pool (cudaMallocAsync), never from cudaMalloc.
//
// InvalidArgument for a dtype other than f32, f16 or bf16, or a null x
// with n > 0; Internal naming the CUDA error if a kernel fails; built
// without --config=cuda every call is Unimplemented.
#ifndef CHUNKZERO_TENSOR_CUDA_CUDA_REDUCTIONS_H_
#define CHUNKZERO_TENSOR_CUDA_CUDA_REDUCTIONS_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "tensor/dtype.h"

namespace chunkzero {

[[nodiscard]] absl::StatusOr<bool> CudaHasInfOrNan(const void* x, DType dtype,
                                                   size_t n);
[[nodiscard]] absl::StatusOr<double> CudaSumOfSquares(const void* x,
                                                      DType dtype, size_t n);

}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_CUDA_CUDA_REDUCTIONS_H_
