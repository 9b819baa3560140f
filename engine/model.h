// What a model trained through the engine implements and uses, in one
// header of the engine's own target, so that a model's code depends on
// //engine alone:
//  - `Module` and `Parameter` (ddp/parameter.h): the model lists its
//    parameters, in declaration order;
//  - `ParamHooks` and `HookScope` (ddp/param_hooks.h): every use of a
//    parameter is wrapped in a forward or backward scope, and each use's f32
//    gradient is handed over with `HandGrad` (docs/DESIGN.md §5, §10);
//  - `Tensor` (tensor/tensor.h): a parameter's data, in the compute dtype,
//    and the gradients handed over;
//  - `ActivationCheckpointable` (engine/activation_checkpointing.h): a model
//    that can recompute its blocks' activations in backward implements it;
//  - CZ_RETURN_IF_ERROR and CZ_ASSIGN_OR_RETURN (base/status_macros.h), the
//    macros the hooks' absl::Status results are checked with.
//
//   class MyModel : public chunkzero::Module {
//     std::vector<chunkzero::Parameter*> Parameters() override;
//     absl::StatusOr<double> Forward(chunkzero::ParamHooks& hooks, ...);
//     absl::Status Backward(chunkzero::ParamHooks& hooks, float loss_scale);
//   };
#ifndef CHUNKZERO_ENGINE_MODEL_H_
#define CHUNKZERO_ENGINE_MODEL_H_

#include "base/status_macros.h"               // IWYU pragma: export
#include "ddp/param_hooks.h"                  // IWYU pragma: export
#include "ddp/parameter.h"                    // IWYU pragma: export
#include "engine/activation_checkpointing.h"  // IWYU pragma: export
#include "tensor/tensor.h"                    // IWYU pragma: export

#endif  // CHUNKZERO_ENGINE_MODEL_H_
