// The per-call constants of the fused optimizer kernels, folded once from
// the step's hyper-parameters (optim/internal/fused_step_args.h) so that
// every implementation (each CPU ISA, every thread, the GPU) multiplies by
// exactly the same f32 values.
//
//   AdamConstants c = FoldAdamStep(step);
//   AdamElement e = AdamUpdate<WeightDecay::kNone>(c, grad, {p, m, v});
//
// Plain structs with no dependencies, so that nvcc compiles them too.
#ifndef CHUNKZERO_OPTIM_INTERNAL_FUSED_CONSTANTS_H_
#define CHUNKZERO_OPTIM_INTERNAL_FUSED_CONSTANTS_H_

namespace chunkzero {
namespace optim_internal {

enum class WeightDecay {
  kNone,
  kCoupled,    // Adam: g = g + weight_decay * p.
  kDecoupled,  // AdamW: p = p * (1 - lr * weight_decay).
};

// One Adam step's f32 scalars, folded once per call so that every ISA and
// every thread multiply by exactly the same values.
struct AdamConstants {
  WeightDecay weight_decay_mode = WeightDecay::kNone;
  float grad_scale = 1.0f;
  float weight_decay = 0.0f;  // kCoupled.
  float decay_factor = 1.0f;  // kDecoupled: 1 - lr * weight_decay.
  float beta1 = 0.0f;
  float one_minus_beta1 = 1.0f;
  float beta2 = 0.0f;
  float one_minus_beta2 = 1.0f;
  float bias_correction2_sqrt = 1.0f;
  float eps = 0.0f;
  float step_size = 0.0f;  // lr / bias_correction1.
};

enum class Momentum {
  kNone,
  kFirst,    // buf = g
  kRunning,  // buf = momentum * buf + (1 - dampening) * g
};

struct SgdConstants {
  Momentum momentum_mode = Momentum::kNone;
  bool has_weight_decay = false;
  bool nesterov = false;
  float grad_scale = 1.0f;
  float weight_decay = 0.0f;
  float momentum = 0.0f;
  float one_minus_dampening = 1.0f;
  float lr = 0.0f;
};

}  // namespace optim_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_OPTIM_INTERNAL_FUSED_CONSTANTS_H_
