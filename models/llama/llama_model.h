// A Llama-family decoder on the CPU, forward and backward, implementing the
// engine's model contract (engine/model.h), so that it trains with every
// layout, precision, offload and activation checkpointing the engine has.
//
//   LlamaConfig config;                  // sizes, heads, kv heads, theta
//   CZ_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model,
//                       LlamaModel::Create(config, /*seed=*/1234));
//   LocalHooks hooks;
//   CZ_ASSIGN_OR_RETURN(float loss,
//                       model->Forward(hooks, B, T, tokens, targets));
//   CZ_RETURN_IF_ERROR(model->Backward(hooks, /*loss_grad_scale=*/1.0f));
//
// The model is Hugging Face's LlamaForCausalLM without biases, dropout,
// rope scaling or sliding windows: token embedding; pre-norm blocks
// x += o_proj(attention(rope(q_proj(n1)), rope(k_proj(n1)), v_proj(n1)))
// with n1 = RMSNorm(x), then x += down_proj(silu(gate_proj(n2)) *
// up_proj(n2)) with n2 = RMSNorm(x); a final RMSNorm and logits =
// h lm_head^T (lm_head is the embedding when tie_word_embeddings). The
// attention is causal, grouped-query (kv_heads key/value heads, each read
// by heads / kv_heads query heads), scaled by 1 / sqrt(head_dim); the
// rotary embedding is the rotate-half layout with rope_theta. RMSNorm is
// x / sqrt(mean(x^2) + rms_norm_eps) * w. The loss is the mean token
// cross-entropy.
//
// Parameters, in Hugging Face's declaration order and names, Linear
// weights [out, in] (y = x W^T), Ch = heads * head_dim,
// Ckv = kv_heads * head_dim, F = ffn:
//   model.embed_tokens.weight [V, C]
//   per layer N: model.layers.N.self_attn.{q_proj [Ch, C], k_proj [Ckv, C],
//                  v_proj [Ckv, C], o_proj [C, Ch]}.weight
//                model.layers.N.mlp.{gate_proj [F, C], up_proj [F, C],
//                  down_proj [C, F]}.weight
//                model.layers.N.input_layernorm.weight [C]
//                model.layers.N.post_attention_layernorm.weight [C]
//   model.norm.weight [C]
//   lm_head.weight [V, C]   (absent when tie_word_embeddings)
//
// Hook scopes (ParameterScopes, models/common/parameter_scopes.h):
//   Forward:  embedding {embed_tokens}; per layer: input_layernorm,
//             self_attn {q, k, v, o}, post_attention_layernorm,
//             mlp {gate, up, down}; norm; lm_head {lm_head or embed_tokens}.
//   Backward: the reverse; inside self_attn o_proj's grad is handed first,
//             then q, k, v; inside mlp down_proj's, then gate and up.
// A tied embedding has two scopes and two grads a step, as GPT-2's wte.
//
// Precision, threads and memory are GPT-2's (models/gpt2/gpt_model.h):
// parameters may be f32, f16 or bf16 and the model computes in f32 (bf16
// products on request, torch.autocast's bf16 on the CPU); results are the
// same for any thread count; activations are kept per layer and, with
// activation checkpointing, a checkpointed layer keeps only its output and
// runs its forward again in Backward through the same hooks, giving the
// same bits.
//
// Thread-safety: a model is used by one thread at a time.
#ifndef CHUNKZERO_MODELS_LLAMA_LLAMA_MODEL_H_
#define CHUNKZERO_MODELS_LLAMA_LLAMA_MODEL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/model.h"
#include "kernels/gemm_types.h"
#include "kernels/layer_backend.h"
#include "models/common/language_model.h"
#include "models/common/parameter_scopes.h"
#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/memory/memory_tracker.h"

namespace chunkzero {

struct LlamaConfig {
  int layers = 4;              // num_hidden_layers
  int d_model = 256;           // hidden_size, C
  int heads = 8;               // num_attention_heads, NH
  int kv_heads = 4;            // num_key_value_heads; heads % kv_heads == 0
  int head_dim = 0;            // 0: d_model / heads
  int ffn = 688;               // intermediate_size, F
  int vocab = 4096;            // vocab_size, V
  int seq_len = 256;           // max_position_embeddings (max T)
  double rope_theta = 10000;   // the rotary embedding's base
  double rms_norm_eps = 1e-5;  // added to the mean square
  bool tie_word_embeddings = false;

  // InvalidArgument naming the field (as config.json names it) when a size
  // is not positive, heads is not a multiple of kv_heads, head_dim is odd or
  // (when 0) d_model is not a multiple of heads, theta or eps is not
  // positive and finite, or theta gives rotary angles that are not finite
  // (RopeThetaProblem).
  [[nodiscard]] absl::Status Validate() const;
  int resolved_head_dim() const {
    return head_dim > 0 ? head_dim : d_model / heads;
  }
};

// Why the rotary tables of `theta` (for heads `head_dim` wide, over
// `positions` positions) cannot be computed, or "" when they can: a base
// that is not a positive finite number, or one whose frequencies
// 1 / theta^(2i / head_dim) or angles t x frequency are not finite in f32,
// as RopeTables computes them (a base below about 1e-38 rounds to 0 in f32;
// a tiny one, 1e-36, makes the top pair's angle overflow). The message
// starts with the value: "1e-300 gives rotary frequencies ...".
std::string RopeThetaProblem(double theta, int head_dim, int positions);

// Every parameter's name and shape in declaration order (the list above).
// REQUIRES: config.Validate().ok().
std::vector<std::pair<std::string, Shape>> LlamaParameterShapes(
    const LlamaConfig& config);
// Ψ: the number of parameters (a tied embedding counted once).
int64_t LlamaParameterCount(const LlamaConfig& config);
// Model FLOPs of a training step over `tokens` tokens in sequences of
// `seq_len`: 6 Ψ tokens + 12 L T Ch tokens (the attention's products over
// the full T x T), as GptModelFlopsPerStep counts.
double LlamaModelFlopsPerStep(const LlamaConfig& config, int seq_len,
                              int64_t tokens);

class LlamaModel final : public LanguageModel {
 public:
  // A model with fresh parameters stored as `dtype`, drawn as Hugging
  // Face's LlamaPreTrainedModel does: embeddings and Linear weights
  // ~ N(0, 0.02), RMSNorm weights 1; the normals from NormalSampler(seed),
  // parameter by parameter in declaration order. The model computes on
  // `device`, the CPU or a GPU (cuda:N, whose layers fail with
  // Unimplemented in a build without --config=cuda); InvalidArgument for
  // another device. The parameters are made on `device` (without CUDA:
  // Unimplemented, naming the first parameter). With
  // ParameterTiming::kDeferred each parameter's values are made, the same,
  // only when it is registered (ddp/parameter.h).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<LlamaModel>> Create(
      const LlamaConfig& config, uint64_t seed, DType dtype = DType::kF32,
      Device device = Device::Cpu(),
      ParameterTiming timing = ParameterTiming::kEager);

  LlamaModel(const LlamaModel&) = delete;
  LlamaModel& operator=(const LlamaModel&) = delete;
  ~LlamaModel() override;

  const LlamaConfig& config() const { return config_; }
  // Where the layers compute: the CPU or the GPU given to Create.
  Device compute_device() const { return backend_->device(); }

  // f32 products (the default) or bf16-rounded inputs with f32
  // accumulation, as GptModel::set_matmul_precision.
  void set_matmul_precision(gemm::Precision precision) override;
  gemm::Precision matmul_precision() const { return matmul_precision_; }
  // Which layers keep only their output and run their forward again in
  // Backward. Takes effect at the next Forward; a pending Backward is
  // dropped. InvalidArgument for a negative `every`.
  [[nodiscard]] absl::Status SetActivationCheckpointing(
      const ActivationCheckpointing& checkpointing) override;
  ActivationCheckpointing activation_checkpointing() const {
    return checkpointing_;
  }
  // The activations of one Forward (LanguageModel::ActivationBytes), as
  // GptModel counts them.
  ActivationBytes activation_bytes(int batch, int seq) const override;

  std::vector<Parameter*> Parameters() override;
  // The parameter called `name` (as listed above), or nullptr.
  Parameter* FindParameter(const std::string& name) override;
  // Copies `state` into the parameters (ParameterScopes::LoadStateDict).
  [[nodiscard]] absl::Status LoadStateDict(
      const std::map<std::string, Tensor>& state) override;

  // Runs the model on `batch` sequences of `seq` tokens (tokens and
  // targets: [batch, seq] row-major, in [0, V), seq <= config.seq_len) and
  // returns the mean cross-entropy of predicting targets. Keeps what
  // Backward needs. InvalidArgument for bad sizes or token ids (naming the
  // position); hook errors as they come.
  [[nodiscard]] absl::StatusOr<float> Forward(
      ParamHooks& hooks, int batch, int seq, absl::Span<const int32_t> tokens,
      absl::Span<const int32_t> targets) override;
  // Backward of the last Forward with d(loss) = loss_grad_scale; hands
  // every parameter's grad for each use to `hooks`. FailedPrecondition
  // without a Forward since the last Backward.
  [[nodiscard]] absl::Status Backward(ParamHooks& hooks,
                                      float loss_grad_scale = 1.0f) override;

  // Reports the working memory (activations, scratch, the grad and widen
  // buffers) to `tracker` as GptModel::set_memory_accounting does.
  [[nodiscard]] absl::Status set_memory_accounting(MemoryTracker* tracker,
                                                   Device device) override;
  int64_t workspace_bytes() const override;

 private:
  struct Activations;
  struct Scratch;
  using Scope = ParameterScopes::Scope;
  using ScopeWeights = ParameterScopes::GroupWeights;
  using ScopeGrads = ParameterScopes::GroupGrads;
  using ScopeAccess = ParameterScopes::Access;
  struct LayerScopes {
    Scope input_norm, attn, post_norm, mlp;
  };

  LlamaModel(const LlamaConfig& config, std::unique_ptr<LayerBackend> backend);

  // Layer `l`'s forward (its four scopes) from its input into its slot and
  // its output; Forward and Backward's recomputation run this.
  [[nodiscard]] absl::Status LayerForward(ParamHooks& hooks, int l);
  // An RMSNorm scope's backward: dx += d/dx, its weight's grad handed.
  [[nodiscard]] absl::Status RmsNormBackward(ParamHooks& hooks,
                                             const Scope& scope, float* dx,
                                             const float* dout, const float* x,
                                             const float* rstd);
  [[nodiscard]] absl::Status ResizeBuffers(int batch, int seq);
  // fn(buffer, elements, role, shared) for every activation and scratch
  // array for `batch` x `seq`, as GptModel's.
  template <typename Fn>
  void VisitBuffers(int batch, int seq, Fn fn);

  LlamaConfig config_;
  // The layers (also the reader of the weights), on the device the model
  // computes on.
  std::unique_ptr<LayerBackend> backend_;
  gemm::Precision matmul_precision_ = gemm::Precision::kF32;
  ActivationCheckpointing checkpointing_;
  ParameterScopes scopes_;
  Scope embedding_, norm_, lm_head_;
  std::vector<LayerScopes> layers_;
  std::unique_ptr<Activations> acts_;
  std::unique_ptr<Scratch> scratch_;
  int threads_ = 1;
  bool have_forward_ = false;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_MODELS_LLAMA_LLAMA_MODEL_H_
