// The per-element math of the transformer layers, written once for the CPU
// kernels (kernels/cpu_kernels.cc) and the CUDA ones
// (kernels/internal/cuda_kernels_nvcc.cu), so the CPU tests cover what
// the GPU runs.
//
//   out[i] = layer_math::Gelu(x[i]);
//
// Branch-free, so that the CPU loops over it vectorise.
#ifndef CHUNKZERO_KERNELS_INTERNAL_LAYER_MATH_H_
#define CHUNKZERO_KERNELS_INTERNAL_LAYER_MATH_H_

#include <cstdint>

#include "base/host_device.h"
#include "tensor/half.h"

namespace chunkzero {
namespace layer_math {

// e^x to about 2 ulp for x in [-87, 88]: Cody-Waite range reduction
// x = n ln2 + r, |r| <= ln2 / 2, and the Cephes expf polynomial for e^r,
// with 2^n built in the exponent bits. Below -87 it returns a tiny positive
// value instead of 0, above 88 a value near FLT_MAX; NaN stays NaN (the
// clamps are written so that a NaN passes through them).
CZ_HOST_DEVICE inline float Exp(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  // 1.5 * 2^23: adding it rounds x * log2(e) to an integer in the low
  // mantissa bits.
  constexpr float kShifter = 12582912.0f;
  const float shifted = x * 1.44269504088896341f + kShifter;
  const float n = shifted - kShifter;
  // Unsigned, so that a NaN x gives a NaN, not undefined behaviour in the
  // shift below; for finite x the bits are the same.
  const uint32_t ni = FloatBits(shifted) - 0x4B400000u;  // kShifter's bits.
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * BitsToFloat((ni + 127u) << 23);
}

// tanh(u) = 1 - 2 / (e^{2u} + 1): absolute error ~1e-7, which is what GELU
// needs (it adds tanh to 1).
CZ_HOST_DEVICE inline float Tanh(float u) {
  return 1.0f - 2.0f / (Exp(2.0f * u) + 1.0f);
}

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCube = 0.044715f;

// GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
CZ_HOST_DEVICE inline float Gelu(float x) {
  const float t = Tanh(kGeluScale * (x + kGeluCube * x * x * x));
  return 0.5f * x * (1.0f + t);
}

// dout * gelu'(x).
CZ_HOST_DEVICE inline float GeluGrad(float x, float dout) {
  const float t = Tanh(kGeluScale * (x + kGeluCube * x * x * x));
  const float du = kGeluScale * (1.0f + 3.0f * kGeluCube * x * x);
  return dout * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
}

}  // namespace layer_math
}  // namespace chunkzero

#endif  // CHUNKZERO_KERNELS_INTERNAL_LAYER_MATH_H_
