// GPT-2 on the CPU or a GPU, forward and backward, implementing the ddp/
// hook contract (ddp/param_hooks.h), so that ZeroDdp can shard it.
//
//   GptConfig config;                    // GPT-2 small: 12 x 768, 12 heads
//   CZ_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> model,
//                       GptModel::Create(config, /*seed=*/1234));
//   LocalHooks hooks;
//   CZ_ASSIGN_OR_RETURN(float loss,
//                       model->Forward(hooks, B, T, tokens, targets));
//   CZ_RETURN_IF_ERROR(model->Backward(hooks, /*loss_grad_scale=*/1.0f));
//   CZ_RETURN_IF_ERROR(hooks.EndStep());   // every p->grad() now set
//
// The model is GPT-2 exactly (Radford et al. 2019, as in Hugging Face's
// GPT2LMHeadModel): token + learned position embeddings; pre-LayerNorm
// blocks x += attn(ln_1(x)); x += mlp(ln_2(x)) with causal multi-head
// self-attention (scores scaled by 1/sqrt(head_dim)) and an MLP of width
// 4C with the tanh approximation of GELU; a final LayerNorm (all
// LayerNorms eps 1e-5); logits = h wte^T (the output projection is tied to
// the token embedding); no dropout. The loss is the mean token
// cross-entropy.
//
// Parameters, in declaration order (Parameters() returns this order), with
// Hugging Face names, shapes and layouts (Conv1D weights are [in, out],
// y = x W + b):
//   wte.weight [V, C]   wpe.weight [P, C]
//   per block N: h.N.ln_1.weight [C]  h.N.ln_1.bias [C]
//                h.N.attn.c_attn.weight [C, 3C]  h.N.attn.c_attn.bias [3C]
//                h.N.attn.c_proj.weight [C, C]   h.N.attn.c_proj.bias [C]
//                h.N.ln_2.weight [C]  h.N.ln_2.bias [C]
//                h.N.mlp.c_fc.weight [C, 4C]     h.N.mlp.c_fc.bias [4C]
//                h.N.mlp.c_proj.weight [4C, C]   h.N.mlp.c_proj.bias [C]
//   ln_f.weight [C]  ln_f.bias [C]
//
// Hook scopes (one per module use; a forward scope is PreForward ... the
// computation ... PostForward; a backward scope is PreBackward ...
// HandGrad for each of its parameters, in the order listed ...
// PostBackward). With p(X) the parameters of X in declaration order:
//   Forward:  embedding {wte, wpe}; for N = 0..L-1: ln_1, attn, ln_2, mlp of
//             block N; ln_f; lm_head {wte}.
//   Backward: lm_head {wte}; ln_f; for N = L-1..0: mlp, ln_2, attn, ln_1 of
//             block N; embedding {wte, wpe}.
// wte is used twice per step, so it has two forward scopes, two backward
// scopes and two HandGrads (lm head first, embedding second) that add up.
// Grads are handed in the scope's parameter order once every use of the
// weights in that scope is done (grad reuse may overwrite the weights).
// A handed grad is a view of the model's reusable grad buffer, valid only
// during the HandGrad call: hooks copy or reduce it before returning (as
// LocalHooks and ZeroDdp do).
//
// Device: the model computes on the CPU or on one GPU (Create's `device`),
// through a LayerBackend (kernels/layer_backend.h): the same scopes, hooks
// and buffers, with the CPU layers of kernels/cpu_kernels.h or their CUDA
// counterparts. Parameters, activations, scratch and the grads handed to
// the hooks live on that device; a parameter must be there (or, for the CPU,
// on any host-readable device) when its scope runs. On a GPU the layers are
// enqueued on the compute stream and Forward waits only for the loss.
//
// Storage: parameters may be f32, f16 or bf16 (Create's `dtype`, or
// whatever ZeroDdp sets data() to). The model computes in f32: inside each
// scope, 16-bit weights are widened into a scratch buffer; f32 weights are
// read in place. Grads are f32.
//
// Threads (CPU): every layer, matmuls included (kernels/gemm.h), runs on
// base/parallel_for.h's one pool (CHUNKZERO_NUM_THREADS), from the thread
// running Forward/Backward. Models on several threads (ranks as threads)
// share that pool; each caller uses at most its ScopedParallelThreads share
// of it. Results are the same for any thread count.
//
// Memory: activations for Backward are kept per layer (16 N C + NH T^2 B
// floats per block, N = B T; NH T B instead of NH T^2 B with the fused
// attention) plus N V floats of probabilities; they and
// the scratch buffers are reused across steps while B and T stay the same,
// and made again, exactly as large as needed, when they change.
//
// Activation checkpointing (SetActivationCheckpointing): a checkpointed
// block keeps only its output (N C floats, the next block's input) from
// Forward; its other activations (15 N C + 4 N + NH T^2 B floats) live in
// one buffer all checkpointed blocks share. Backward runs a checkpointed
// block's forward again, through the same forward scopes and hooks as the
// first (its parameters are used again: gathered again when sharded),
// into that buffer, right before the block's backward scopes. It is the
// same computation on the same inputs (same kernels, same thread split),
// so the recomputed activations, and so every grad and loss, are the same
// bits as without checkpointing. The recomputed forward hands no grads:
// each parameter still gets one HandGrad per backward use.
// set_memory_accounting reports them (and the model's other working
// buffers) to a MemoryTracker, whose device limit then caps them.
//
// Thread-safety: a model is used by one thread at a time.
#ifndef CHUNKZERO_MODELS_GPT2_GPT_MODEL_H_
#define CHUNKZERO_MODELS_GPT2_GPT_MODEL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ddp/param_hooks.h"
#include "ddp/parameter.h"
#include "engine/activation_checkpointing.h"
#include "kernels/gemm.h"
#include "kernels/layer_backend.h"
#include "models/common/language_model.h"
#include "models/common/parameter_scopes.h"
#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/memory/memory_tracker.h"
#include "tensor/tensor.h"

namespace chunkzero {

struct GptConfig {
  int layers = 12;     // L
  int d_model = 768;   // C
  int heads = 12;      // NH; d_model % heads == 0
  int seq_len = 1024;  // P, the number of learned positions (max T)
  int vocab = 50257;   // V

  // InvalidArgument naming the field when a size is not positive or
  // d_model is not a multiple of heads.
  [[nodiscard]] absl::Status Validate() const;
  int head_dim() const { return d_model / heads; }
};

// Ψ: the number of parameters (wte counted once, though it is used twice).
// REQUIRES: config.Validate().ok().
int64_t GptParameterCount(const GptConfig& config);

// Every parameter's name and shape, in declaration order (the list above).
// REQUIRES: config.Validate().ok().
std::vector<std::pair<std::string, Shape>> GptParameterShapes(
    const GptConfig& config);

// Model FLOPs of one training step (forward + backward) over `tokens`
// tokens in sequences of config.seq_len:
//   6 Ψ tokens + 12 L T C tokens.
// 6 Ψ is 2 (multiply + add) x 3 (forward, and backward's two matmuls per
// weight) per parameter and token; every parameter counts, although wpe,
// the biases and LayerNorm weights are not matmul weights (< 1% of Ψ at
// GPT-2 sizes; nanoGPT leaves out wpe). 12 L T C is the attention matmuls
// (Q K^T and P V: 2 x 2 T C per token and layer forward, x 3 with the
// backward), counted over the full T x T as in PaLM's MFU, not the causal
// half. Recomputation, LayerNorm, softmax and GELU are not counted.
double GptModelFlopsPerStep(const GptConfig& config, int64_t tokens);
// The same for sequences of `seq_len` <= config.seq_len (a context shorter
// than the learned positions).
double GptModelFlopsPerStep(const GptConfig& config, int seq_len,
                            int64_t tokens);

class GptModel final : public LanguageModel {
 public:
  // A model with freshly initialised parameters stored as `dtype`, drawn as
  // GPT-2 / nanoGPT does: every matmul weight, wte and wpe ~ N(0, 0.02),
  // except the c_proj weights (the residual projections) ~ N(0, 0.02 /
  // sqrt(2 L)); biases 0; LayerNorm weights 1 and biases 0. The normals come
  // from one std::mt19937_64 seeded with `seed`, through Box-Muller (the
  // standard library's normal_distribution is not the same on every
  // platform), drawn parameter by parameter in declaration order, so a seed
  // gives the same values everywhere (before rounding to `dtype`). The
  // model computes on `device` (the CPU or cuda:N), where its parameters
  // are made; InvalidArgument for another device (the simulated one holds
  // parameters, but the CPU computes for it). With ParameterTiming::kDeferred
  // each parameter's values are made, the same, only when it is registered
  // (ddp/parameter.h).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<GptModel>> Create(
      const GptConfig& config, uint64_t seed, DType dtype = DType::kF32,
      Device device = Device::Cpu(),
      ParameterTiming timing = ParameterTiming::kEager);

  GptModel(const GptModel&) = delete;
  GptModel& operator=(const GptModel&) = delete;
  ~GptModel() override;

  const GptConfig& config() const { return config_; }
  // Where the layers compute.
  Device compute_device() const { return backend_->device(); }

  // What the matrix products multiply (kernels/gemm.h): f32 (the
  // default), or bf16-rounded inputs with f32 accumulation, which is
  // torch.autocast's bf16 on the CPU: every product of the model, forward
  // and backward, attention included, while embeddings, LayerNorm, GELU,
  // softmax, the loss and the grads handed to the hooks stay f32.
  void set_matmul_precision(gemm::Precision precision) override {
    matmul_precision_ = precision;
    scopes_.set_bf16_products(precision == gemm::Precision::kBf16);
  }
  gemm::Precision matmul_precision() const { return matmul_precision_; }
  // The fused attention on a GPU (LayerBackend::set_fused_attention): no
  // B NH T^2 probabilities kept per block, B NH T log-sum-exps instead.
  // InvalidArgument on the CPU. Takes effect at the next Forward, whose
  // buffers are made again; a pending Backward is dropped.
  [[nodiscard]] absl::Status set_fused_attention(bool fused);
  bool fused_attention() const { return backend_->fused_attention(); }
  // Which blocks keep only their output and run their forward again in
  // Backward (see Memory above). Takes effect at the next Forward, whose
  // buffers are made again; a pending Backward is dropped.
  // InvalidArgument for a negative `every`.
  [[nodiscard]] absl::Status SetActivationCheckpointing(
      const ActivationCheckpointing& checkpointing) override;
  ActivationCheckpointing activation_checkpointing() const {
    return checkpointing_;
  }
  // The activations of one Forward (LanguageModel::ActivationBytes): every
  // block's output, the kept blocks' activations, the embeddings, final
  // LayerNorm and probabilities are kept; the checkpointed blocks'
  // recomputed.
  ActivationBytes activation_bytes(int batch, int seq) const override;
  std::vector<Parameter*> Parameters() override;
  // The parameter called `name` (as listed above), or nullptr.
  Parameter* FindParameter(const std::string& name) override;

  // Copies `state` (every parameter by name, any float dtype, the
  // parameter's shape, on any device) into the parameters, converting to
  // their dtype. InvalidArgument naming the tensor when one is missing,
  // extra, mis-shaped or without memory; nothing is changed then.
  // Parameters must be materialised.
  [[nodiscard]] absl::Status LoadStateDict(
      const std::map<std::string, Tensor>& state) override;

  // Runs the model on `batch` sequences of `seq` tokens (tokens and
  // targets: [batch, seq] row-major, values in [0, V), seq <= P) and
  // returns the mean cross-entropy of predicting targets. Keeps what
  // Backward needs. InvalidArgument for bad sizes or token ids (naming the
  // position); hook errors are returned as they come.
  [[nodiscard]] absl::StatusOr<float> Forward(
      ParamHooks& hooks, int batch, int seq, absl::Span<const int32_t> tokens,
      absl::Span<const int32_t> targets) override;

  // Reports the memory the model holds for computing (activations,
  // Backward's scratch, the grad buffer handed to the hooks, widened 16-bit
  // weights: workspace_bytes()) to `tracker` as MemoryCategory::kActivation
  // on `device`, the device the model computes for; the device's memory
  // limit (MemoryTracker::SetLimit) then caps them, and a Forward whose
  // buffers would pass it fails with ResourceExhausted before it allocates
  // them. What is held moves from the previous tracker (if any) to this
  // one; ResourceExhausted if it does not fit there (nothing changes then).
  // nullptr stops reporting. A GPU backend's bf16 scratch, which grows with
  // the products, reports itself to the same tracker. The tracker must
  // outlive the model or be replaced before it goes.
  [[nodiscard]] absl::Status set_memory_accounting(MemoryTracker* tracker,
                                                   Device device) override;
  // The bytes held for computing now, as reported above.
  int64_t workspace_bytes() const override;

  // Backward of the last Forward with d(loss) = loss_grad_scale (a loss
  // scaler passes its scale; the grads are then scaled by it). Hands every
  // parameter's grad for each use to `hooks`. FailedPrecondition without a
  // Forward since the last Backward.
  [[nodiscard]] absl::Status Backward(ParamHooks& hooks,
                                      float loss_grad_scale = 1.0f) override;

 private:
  struct Activations;
  struct Scratch;

  GptModel(const GptConfig& config, std::unique_ptr<LayerBackend> backend);

  using Scope = ParameterScopes::Scope;
  using ScopeWeights = ParameterScopes::GroupWeights;
  using ScopeGrads = ParameterScopes::GroupGrads;
  using ScopeAccess = ParameterScopes::Access;
  struct BlockScopes {
    Scope ln_1, attn, ln_2, mlp;
  };

  // Block `l`'s forward (its four forward scopes), from its input (the
  // embeddings or block l - 1's output) into its activation slot and its
  // output. The first Forward and Backward's recomputation run this.
  [[nodiscard]] absl::Status BlockForward(ParamHooks& hooks, int l);
  // Activation slots: the kept blocks' own, then (if any block is
  // checkpointed) the one the checkpointed blocks share.
  int NumSlots() const;
  int SlotOf(int block) const;
  // The backward of a LayerNorm scope: dx += d/dx, grads handed over.
  [[nodiscard]] absl::Status LayerNormBackward(
      ParamHooks& hooks, const Scope& scope, float* dx, const float* dout,
      const float* x, const float* mean, const float* rstd);
  // Makes the activations and scratch for `batch` x `seq` (all of them
  // again, exactly as large as needed, when the shape changes), within the
  // accounting's limit, on the backend's device.
  [[nodiscard]] absl::Status ResizeBuffers(int batch, int seq);
  // Calls fn(buffer, elements, role, shared) for every activation and
  // scratch array and its size for `batch` x `seq`; `shared` is how many
  // of the elements are the checkpointed blocks' slot (the recompute
  // buffer), 0 for arrays without slots or without checkpointing.
  template <typename Fn>
  void VisitBuffers(int batch, int seq, Fn fn);

  GptConfig config_;
  const std::unique_ptr<LayerBackend> backend_;
  gemm::Precision matmul_precision_ = gemm::Precision::kF32;
  ActivationCheckpointing checkpointing_;
  // The parameters (declaration order), their hook scopes and the
  // working memory's accounting; reads weights through backend_.
  ParameterScopes scopes_;
  Scope embedding_, lm_head_, ln_f_;
  std::vector<BlockScopes> blocks_;
  std::unique_ptr<Activations> acts_;
  std::unique_ptr<Scratch> scratch_;
  // The threads the buffers were made for (AttentionScratchElements).
  int threads_ = 1;
  bool have_forward_ = false;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_MODELS_GPT2_GPT_MODEL_H_
