// The per-element math of the element-wise kernels, written once for the
// CPU kernels (whose scalar code is the definition every vectorised variant
// matches) and the CUDA kernels, so that both compute the same bits.
//
//   using D = elementwise_math::F16;
//   y[i] = elementwise_math::Axpy<D>(y[i], a, x[i]);  // fma(a, x, y) -> f16
//
// Element types: the storage type T, the exact widening to f32 (Load), the
// rounding from f32 to nearest even (Store, tensor/half.h) and the Inf/NaN
// test on the stored bits.
#ifndef CHUNKZERO_TENSOR_ELEMENTWISE_MATH_H_
#define CHUNKZERO_TENSOR_ELEMENTWISE_MATH_H_

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "base/host_device.h"
#include "tensor/half.h"

namespace chunkzero {
namespace elementwise_math {

struct F32 {
  using T = float;
  CZ_HOST_DEVICE static float Load(T x) { return x; }
  CZ_HOST_DEVICE static T Store(float v) { return v; }
  CZ_HOST_DEVICE static bool IsInfOrNan(T x) {
    return (FloatBits(x) & 0x7fffffffu) >= 0x7f800000u;
  }
};
struct F16 {
  using T = uint16_t;
  CZ_HOST_DEVICE static float Load(T x) { return HalfBitsToFloat(x); }
  CZ_HOST_DEVICE static T Store(float v) { return FloatToHalfBits(v); }
  CZ_HOST_DEVICE static bool IsInfOrNan(T x) {
    return (x & 0x7fffu) >= 0x7c00u;
  }
};
struct BF16 {
  using T = uint16_t;
  CZ_HOST_DEVICE static float Load(T x) { return BFloat16BitsToFloat(x); }
  CZ_HOST_DEVICE static T Store(float v) { return FloatToBFloat16Bits(v); }
  CZ_HOST_DEVICE static bool IsInfOrNan(T x) {
    return (x & 0x7fffu) >= 0x7f80u;
  }
};

// SumOfSquares order, shared by the CPU and CUDA reductions. x is cut into
// blocks of kSumBlock elements (the last may be shorter). In a block,
// element k's square (exact in double) is added to lane k % kSumLanes, in
// increasing k; the lanes are combined as lanes[i] += lanes[i + w] for
// w = 8, 4, 2, 1. Block sums are added in block order to 0.0.
inline constexpr size_t kSumBlock = 8192;
inline constexpr size_t kSumLanes = 16;

// D(f32(x) * a): computed in f32, rounded once to D.
template <typename D>
CZ_HOST_DEVICE inline typename D::T Scale(typename D::T x, float a) {
  return D::Store(D::Load(x) * a);
}

// D(fma(a, f32(x), f32(y))): one f32 rounding, then D's.
template <typename D>
CZ_HOST_DEVICE inline typename D::T Axpy(typename D::T y, float a,
                                         typename D::T x) {
  return D::Store(fmaf(a, D::Load(x), D::Load(y)));
}

}  // namespace elementwise_math
}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_ELEMENTWISE_MATH_H_
