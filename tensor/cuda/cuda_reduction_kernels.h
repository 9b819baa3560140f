// The CUDA reductions, as nvcc compiles them
// (tensor/cuda/cuda_reduction_kernels.cu): plain functions over device
// pointers, free of Abseil. Each runs on the legacy default stream, waits,
// writes its result to host memory and returns the cudaError_t (0: success).
// Call them through tensor/cuda/cuda_reductions.h.
#ifndef CHUNKZERO_TENSOR_CUDA_CUDA_REDUCTION_KERNELS_H_
#define CHUNKZERO_TENSOR_CUDA_CUDA_REDUCTION_KERNELS_H_

#include <cstddef>
#include <cstdint>

namespace chunkzero {
namespace cuda_kernels {

int HasInfOrNanF32(const float* x, size_t n, bool* result);
int HasInfOrNanF16(const uint16_t* x, size_t n, bool* result);
int HasInfOrNanBF16(const uint16_t* x, size_t n, bool* result);
// In tensor/elementwise_math.h's order, the CPU's exactly.
int SumOfSquaresF32(const float* x, size_t n, double* result);
int SumOfSquaresF16(const uint16_t* x, size_t n, double* result);
int SumOfSquaresBF16(const uint16_t* x, size_t n, double* result);

}  // namespace cuda_kernels
}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_CUDA_CUDA_REDUCTION_KERNELS_H_
