// The per-element math of RMSNorm, rotary embedding and SwiGLU, written once
// for the CPU kernels (kernels/cpu_rmsnorm_rope_swiglu_kernels.cc) and the CUDA
// ones (kernels/internal/cuda_rmsnorm_rope_swiglu_kernels_nvcc.cu), so the CPU
// tests cover what the GPU runs.
//
//   h[i] = layer_math::SwiGlu(gate[i], up[i]);
//
// Branch-free (the exponential is layer_math::Exp's polynomial, not libm's),
// so that the CPU loops over it vectorise.
#ifndef CHUNKZERO_KERNELS_INTERNAL_RMSNORM_ROPE_SWIGLU_MATH_H_
#define CHUNKZERO_KERNELS_INTERNAL_RMSNORM_ROPE_SWIGLU_MATH_H_

#include "base/host_device.h"
#include "kernels/internal/layer_math.h"

namespace chunkzero {
namespace layer_math {

// 1 / (1 + e^-x).
CZ_HOST_DEVICE inline float Sigmoid(float x) {
  return 1.0f / (1.0f + layer_math::Exp(-x));
}

// silu(gate) up, silu(g) = g sigmoid(g).
CZ_HOST_DEVICE inline float SwiGlu(float gate, float up) {
  return gate * Sigmoid(gate) * up;
}

// The grads of SwiGlu(gate, up) given dh: silu'(g) = s (1 + g (1 - s)).
CZ_HOST_DEVICE inline void SwiGluGrad(float dh, float gate, float up,
                                      float* dgate, float* dup) {
  const float s = Sigmoid(gate);
  *dgate = dh * up * (s * (1.0f + gate * (1.0f - s)));
  *dup = dh * (gate * s);
}

// The pair (a, b) = (x_i, x_{i + hd/2}) of a head rotated by the angle of
// cosine c and sine s (s negated rotates back).
CZ_HOST_DEVICE inline void Rotate(float c, float s, float* a, float* b) {
  const float x = *a, y = *b;
  *a = x * c - y * s;
  *b = y * c + x * s;
}

// x / sqrt(mean(x^2) + eps)'s factor from the row's sum of squares.
CZ_HOST_DEVICE inline float RmsScale(float sum_of_squares, int C, float eps) {
  return 1.0f / sqrtf(sum_of_squares / C + eps);
}

// The row's part of dx: r (w g - x k), k = r^2 sum(g w x) / C.
CZ_HOST_DEVICE inline float RmsNormInputGrad(float r, float k, float w, float g,
                                             float x) {
  return r * (w * g - x * k);
}

}  // namespace layer_math
}  // namespace chunkzero

#endif  // CHUNKZERO_KERNELS_INTERNAL_RMSNORM_ROPE_SWIGLU_MATH_H_
