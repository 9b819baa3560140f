// The hyper-parameters of one optimizer step, as the fused kernels take
// them (optim/fused_kernels.h on the CPU, optim/cuda_fused_kernels.h on the
// GPU).
//
//   AdamStep step;
//   step.lr = 3e-4f;
//   step.bias_correction1 = 1 - std::pow(step.beta1, t);
#ifndef CHUNKZERO_OPTIM_FUSED_STEP_H_
#define CHUNKZERO_OPTIM_FUSED_STEP_H_

namespace chunkzero {

// Hyper-parameters of one Adam/AdamW step, already folded into f32 scalars
// by the caller.
struct AdamStep {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  bool decoupled_weight_decay = false;  // AdamW
  float bias_correction1 = 1.0f;        // 1 - beta1^t
  float bias_correction2_sqrt = 1.0f;   // sqrt(1 - beta2^t)
  float grad_scale = 1.0f;  // multiplies every grad first (unscale * clip /
                            // micro-batches)
};

struct SgdStep {
  float lr = 1e-2f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  bool first_step = false;  // momentum buffer is initialised to g (PyTorch)
  float grad_scale = 1.0f;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_OPTIM_FUSED_STEP_H_
