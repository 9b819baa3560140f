// Reductions over f32, f16 and bf16 arrays: overflow checks and norms.
//
//   bool overflow = HasInfOrNanF16(grad16, n);
//   double norm = std::sqrt(SumOfSquaresF32(grad, n));
//
// f16/bf16 arrays hold 16-bit patterns.
//
// SumOfSquares is deterministic: the same input gives the same bits on every
// ISA (AVX-512, AVX2, plain C++; tensor/cpu/cpu_features.h) and every thread
// count. The order of summation is fixed: x is cut into blocks of 8192
// elements; in a block, element k's square (exact in double) is added to
// lane k % 16 in increasing k; the 16 lanes are combined pairwise
// (lane[i] += lane[i + w] for w = 8, 4, 2, 1); block sums are added in block
// order to 0.0. The relative error is below (516 + n / 8192) * 2^-53 of the
// exact sum (far less in practice). If any element is Inf or NaN the result
// is Inf or NaN.
//
// Arrays of 128K elements or more are split over threads
// (base/parallel_for.h). Thread-safety: any number of threads may run
// kernels at once. REQUIRES: x holds n elements.
#ifndef CHUNKZERO_TENSOR_CPU_REDUCTION_KERNELS_H_
#define CHUNKZERO_TENSOR_CPU_REDUCTION_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "tensor/dtype.h"

namespace chunkzero {

// True if any of x[n] is +-Inf or NaN.
bool HasInfOrNanF32(const float* x, size_t n);
bool HasInfOrNanF16(const uint16_t* x, size_t n);
bool HasInfOrNanBF16(const uint16_t* x, size_t n);

// sum(x[n]^2) in double, in the order above.
double SumOfSquaresF32(const float* x, size_t n);
double SumOfSquaresF16(const uint16_t* x, size_t n);
double SumOfSquaresBF16(const uint16_t* x, size_t n);

// The kernels above chosen by dtype. Return InvalidArgument for a null
// pointer with n > 0 or an unknown DType value.
[[nodiscard]] absl::StatusOr<bool> HasInfOrNan(const void* x, DType dtype,
                                               size_t n);
[[nodiscard]] absl::StatusOr<double> SumOfSquares(const void* x, DType dtype,
                                                  size_t n);

}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_CPU_REDUCTION_KERNELS_H_
