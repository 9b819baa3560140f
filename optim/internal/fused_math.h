// The per-element math of the fused optimizer kernels, written once for
// the CPU's scalar kernels (the definition every vectorised variant
// matches) and the CUDA kernels, so that both compute the same bits.
//
//   AdamElement e = AdamUpdate<WeightDecay::kDecoupled>(c, g, {p, m, v});
//
// The order of operations is optim/fused_kernels.h's. Both compilers must
// keep multiplies and adds apart (-ffp-contract=off, nvcc -fmad=false) and
// use IEEE division and square root (nvcc -prec-div=true -prec-sqrt=true).
#ifndef CHUNKZERO_OPTIM_INTERNAL_FUSED_MATH_H_
#define CHUNKZERO_OPTIM_INTERNAL_FUSED_MATH_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "base/host_device.h"
#include "optim/internal/fused_constants.h"
#include "tensor/elementwise_math.h"

namespace chunkzero {
namespace optim_internal {

struct AdamElement {
  float param;
  float exp_avg;
  float exp_avg_sq;
};

// One Adam/AdamW update of one element from its widened gradient.
template <WeightDecay kMode>
CZ_HOST_DEVICE inline AdamElement AdamUpdate(const AdamConstants& c, float grad,
                                             AdamElement e) {
  float g = grad * c.grad_scale;
  float p = e.param;
  if constexpr (kMode == WeightDecay::kCoupled) g = g + c.weight_decay * p;
  if constexpr (kMode == WeightDecay::kDecoupled) p = p * c.decay_factor;
  const float m = c.beta1 * e.exp_avg + c.one_minus_beta1 * g;
  const float v = c.beta2 * e.exp_avg_sq + c.one_minus_beta2 * (g * g);
  const float denom = sqrtf(v) / c.bias_correction2_sqrt + c.eps;
  p = p - c.step_size * (m / denom);
  return {p, m, v};
}

struct SgdElement {
  float param;
  // Read only under Momentum::kRunning; meaningful after the update unless
  // Momentum::kNone.
  float momentum_buffer;
};

CZ_HOST_DEVICE inline SgdElement SgdUpdate(const SgdConstants& c, float grad,
                                           SgdElement e) {
  float g = grad * c.grad_scale;
  float p = e.param;
  float buf = e.momentum_buffer;
  if (c.has_weight_decay) g = g + c.weight_decay * p;
  if (c.momentum_mode != Momentum::kNone) {
    buf = c.momentum_mode == Momentum::kFirst
              ? g
              : c.momentum * buf + c.one_minus_dampening * g;
    g = c.nesterov ? g + c.momentum * buf : buf;
  }
  p = p - c.lr * g;
  return {p, buf};
}

// acc = (first ? 0 : acc) + grad.
CZ_HOST_DEVICE inline float AccumulateUpdate(bool first, float acc,
                                             float grad) {
  return (first ? 0.0f : acc) + grad;
}

// ---- Element i of the kernels' arrays ----
//
// G and O are the element types of the grad and of param_out
// (tensor/elementwise_math.h's F32, F16, BF16; NoOut for a null
// param_out). The CPU scalar kernels loop over these; the CUDA kernels run
// them one element per thread.

// The element type of a null param_out: nothing is stored.
struct NoOut {
  using T = uint16_t;
};

template <typename O>
CZ_HOST_DEVICE inline void StoreOut(typename O::T* out, size_t i, float p) {
  if constexpr (!std::is_same_v<O, NoOut>) out[i] = O::Store(p);
}

template <typename G, typename O, WeightDecay kMode>
CZ_HOST_DEVICE inline void AdamAt(const AdamConstants& c, float* param,
                                  float* exp_avg, float* exp_avg_sq,
                                  const typename G::T* grad,
                                  typename O::T* param_out, size_t i) {
  const AdamElement e = AdamUpdate<kMode>(
      c, G::Load(grad[i]), {param[i], exp_avg[i], exp_avg_sq[i]});
  param[i] = e.param;
  exp_avg[i] = e.exp_avg;
  exp_avg_sq[i] = e.exp_avg_sq;
  StoreOut<O>(param_out, i, e.param);
}

// momentum_buffer may be null iff c.momentum_mode == Momentum::kNone.
template <typename G, typename O>
CZ_HOST_DEVICE inline void SgdAt(const SgdConstants& c, float* param,
                                 float* momentum_buffer,
                                 const typename G::T* grad,
                                 typename O::T* param_out, size_t i) {
  const float buf =
      c.momentum_mode == Momentum::kRunning ? momentum_buffer[i] : 0.0f;
  const SgdElement e = SgdUpdate(c, G::Load(grad[i]), {param[i], buf});
  if (c.momentum_mode != Momentum::kNone)
    momentum_buffer[i] = e.momentum_buffer;
  param[i] = e.param;
  StoreOut<O>(param_out, i, e.param);
}

// acc is not read when `first`.
template <typename G, typename O>
CZ_HOST_DEVICE inline void AccumulateAt(bool first, float* acc,
                                        const typename G::T* grad,
                                        const float* master,
                                        typename O::T* param_out, size_t i) {
  acc[i] = AccumulateUpdate(first, first ? 0.0f : acc[i], G::Load(grad[i]));
  StoreOut<O>(param_out, i, master[i]);
}

}  // namespace optim_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_OPTIM_INTERNAL_FUSED_MATH_H_
