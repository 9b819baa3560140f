// LanguageModel: what a causal language model trained on token sequences
// offers the code that trains it (the train job), whatever its
// architecture: the engine's model contract (Module, the hooks, activation
// checkpointing; engine/model.h) plus the forward and backward of a batch,
// the products' precision, its activations and working memory, and its
// weights by name. GptModel and LlamaModel implement it.
//
//   std::unique_ptr<LanguageModel> model = ...;
//   CZ_ASSIGN_OR_RETURN(float loss,
//                       model->Forward(hooks, batch, seq, tokens, targets));
//   CZ_RETURN_IF_ERROR(model->Backward(hooks, loss_scale));
#ifndef CHUNKZERO_MODELS_COMMON_LANGUAGE_MODEL_H_
#define CHUNKZERO_MODELS_COMMON_LANGUAGE_MODEL_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/model.h"
#include "kernels/gemm_types.h"
#include "tensor/device.h"
#include "tensor/memory/memory_tracker.h"

namespace chunkzero {

class LanguageModel : public Module, public ActivationCheckpointable {
 public:
  ~LanguageModel() override = default;

  // The mean cross-entropy of predicting `targets` from `tokens` ([batch,
  // seq] row-major ids), keeping what Backward needs. InvalidArgument for
  // bad sizes or ids, naming the position.
  [[nodiscard]] virtual absl::StatusOr<float> Forward(
      ParamHooks& hooks, int batch, int seq, absl::Span<const int32_t> tokens,
      absl::Span<const int32_t> targets) = 0;
  // The last Forward's backward with d(loss) = loss_grad_scale, every
  // parameter's grad handed to `hooks` per use.
  [[nodiscard]] virtual absl::Status Backward(ParamHooks& hooks,
                                              float loss_grad_scale) = 0;

  // f32 products, or bf16-rounded inputs with f32 accumulation.
  virtual void set_matmul_precision(gemm::Precision precision) = 0;

  // The activations of one Forward of `batch` x `seq` tokens, in bytes:
  // `kept` from Forward to Backward, `recomputed` produced again in
  // Backward (checkpointed blocks), `recompute_buffer` the one buffer those
  // are recomputed into. Backward's scratch, grads and widened weights are
  // in none of them.
  struct ActivationBytes {
    int64_t kept = 0;
    int64_t recomputed = 0;
    int64_t recompute_buffer = 0;
  };
  virtual ActivationBytes activation_bytes(int batch, int seq) const = 0;

  // Reports the working memory (activations, scratch, grad and widen
  // buffers) to `tracker` as MemoryCategory::kActivation on `device`, whose
  // limit then caps it; nullptr stops.
  [[nodiscard]] virtual absl::Status set_memory_accounting(
      MemoryTracker* tracker, Device device) = 0;
  virtual int64_t workspace_bytes() const = 0;

  // Copies every parameter's values by name (any float dtype) into the
  // parameters; InvalidArgument naming a tensor missing, extra or
  // mis-shaped, nothing changed then.
  [[nodiscard]] virtual absl::Status LoadStateDict(
      const std::map<std::string, Tensor>& state) = 0;
  // The parameter called `name`, or nullptr.
  virtual Parameter* FindParameter(const std::string& name) = 0;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_MODELS_COMMON_LANGUAGE_MODEL_H_
