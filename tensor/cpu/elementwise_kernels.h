// Element-wise kernels on f32, f16 and bf16 arrays.
//
//   Copy(dst, src, bytes);                      // multithreaded memcpy
//   ScaleF16(grad16, 1.0f / loss_scale, n);     // grad16 *= 1/loss_scale
//   AxpyF32(master, -lr, update, n);            // master += -lr * update
//
// f16/bf16 arrays hold 16-bit patterns; their kernels widen to f32 (exact),
// compute in f32 and round once to the storage type (nearest even, as in
// tensor/half.h). Results are bit-identical whichever implementation runs
// (AVX-512, AVX2 or plain C++; tensor/cpu/cpu_features.h), except that when
// several operands are NaN the payload of the NaN result may differ. Arrays
// of 128K elements or more are split over threads (base/parallel_for.h).
//
// Thread-safety: any number of threads may run kernels at once on disjoint
// outputs. REQUIRES: every array holds n elements; inputs do not overlap
// outputs except as stated.
#ifndef CHUNKZERO_TENSOR_CPU_ELEMENTWISE_KERNELS_H_
#define CHUNKZERO_TENSOR_CPU_ELEMENTWISE_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "tensor/dtype.h"

namespace chunkzero {

// out[bytes] = in[bytes]. Like memcpy (which it calls), split over threads
// from 1 MiB on. REQUIRES: no overlap.
void Copy(void* out, const void* in, size_t bytes);

// x[n] *= a
void ScaleF32(float* x, float a, size_t n);
// x[n] = f16(f32(x) * a)
void ScaleF16(uint16_t* x, float a, size_t n);
// x[n] = bf16(f32(x) * a)
void ScaleBF16(uint16_t* x, float a, size_t n);

// y[n] = fma(a, x[n], y[n]): a fused multiply-add, rounded once.
void AxpyF32(float* y, float a, const float* x, size_t n);
// y[n] = f16(fma(a, f32(x), f32(y)))
void AxpyF16(uint16_t* y, float a, const uint16_t* x, size_t n);
// y[n] = bf16(fma(a, f32(x), f32(y)))
void AxpyBF16(uint16_t* y, float a, const uint16_t* x, size_t n);

// The kernels above chosen by dtype (x and y share it). Return
// InvalidArgument for a null pointer with n > 0 or an unknown DType value.
[[nodiscard]] absl::Status Scale(void* x, DType dtype, float a, size_t n);
[[nodiscard]] absl::Status Axpy(void* y, DType dtype, float a, const void* x,
                                size_t n);

}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_CPU_ELEMENTWISE_KERNELS_H_
