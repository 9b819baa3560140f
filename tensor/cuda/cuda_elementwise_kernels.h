// The CUDA element-wise kernels, as nvcc compiles them
// (tensor/cuda/cuda_elementwise_kernels.cu): plain functions over device
// pointers, free of Abseil so that nvcc needs no more than this header and
// tensor/elementwise_math.h. Each launches on `stream` (a cudaStream_t;
// null: the legacy default stream) and returns the launch's cudaError_t (0:
// success) without waiting. Call them through tensor/cuda/cuda_elementwise.h,
// which turns the result into a Status.
#ifndef CHUNKZERO_TENSOR_CUDA_CUDA_ELEMENTWISE_KERNELS_H_
#define CHUNKZERO_TENSOR_CUDA_CUDA_ELEMENTWISE_KERNELS_H_

#include <cstddef>
#include <cstdint>

namespace chunkzero {
namespace cuda_kernels {

int CastF32ToF16(uint16_t* dst, const float* src, size_t n, void* stream);
int CastF32ToBF16(uint16_t* dst, const float* src, size_t n, void* stream);
int CastF16ToF32(float* dst, const uint16_t* src, size_t n, void* stream);
int CastBF16ToF32(float* dst, const uint16_t* src, size_t n, void* stream);
// dst[n] = D(src[n] * scale): multiplied in f32, rounded once.
int CastScaledF32(float* dst, const float* src, float scale, size_t n,
                  void* stream);
int CastScaledF16(uint16_t* dst, const float* src, float scale, size_t n,
                  void* stream);
int CastScaledBF16(uint16_t* dst, const float* src, float scale, size_t n,
                   void* stream);
// x[n] *= a, and y[n] += a * x[n], per tensor/elementwise_math.h.
int ScaleF32(float* x, float a, size_t n, void* stream);
int ScaleF16(uint16_t* x, float a, size_t n, void* stream);
int ScaleBF16(uint16_t* x, float a, size_t n, void* stream);
int AxpyF32(float* y, float a, const float* x, size_t n, void* stream);
int AxpyF16(uint16_t* y, float a, const uint16_t* x, size_t n, void* stream);
int AxpyBF16(uint16_t* y, float a, const uint16_t* x, size_t n, void* stream);
// The name of a cudaError_t, for messages.
const char* ErrorName(int error);

}  // namespace cuda_kernels
}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_CUDA_CUDA_ELEMENTWISE_KERNELS_H_
