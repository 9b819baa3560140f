// The CUDA cast kernels, as nvcc compiles them (tensor/cuda_cast_kernels.cu):
// plain functions over device pointers, free of Abseil so that nvcc needs
// no more than this header and tensor/half.h. Each launches on the default
// stream, waits, and returns the cudaError_t (0: success). Call them through
// tensor/cuda_elementwise.h, which turns the result into a Status.
#ifndef CHUNKZERO_TENSOR_CUDA_CAST_KERNELS_H_
#define CHUNKZERO_TENSOR_CUDA_CAST_KERNELS_H_

#include <cstddef>
#include <cstdint>

namespace chunkzero {
namespace cuda_kernels {

int CastF32ToF16(uint16_t* dst, const float* src, size_t n);
int CastF32ToBF16(uint16_t* dst, const float* src, size_t n);
int CastF16ToF32(float* dst, const uint16_t* src, size_t n);
int CastBF16ToF32(float* dst, const uint16_t* src, size_t n);
// The name of a cudaError_t, for messages.
const char* ErrorName(int error);

}  // namespace cuda_kernels
}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_CUDA_CAST_KERNELS_H_
