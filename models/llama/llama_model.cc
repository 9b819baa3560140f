// LlamaModel's computing: Forward, Backward, the hook scopes around each use
// of the weights, and the activation and scratch buffers. The parameters
// (configuration, initialisation, state dicts) are in
// llama_model_parameters.cc.
#include "models/llama/llama_model.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/parallel_for.h"
#include "base/status_macros.h"
#include "models/common/device_array.h"
#include "models/common/model_buffers.h"
#include "models/common/token_batch.h"
#include "tensor/memory/allocator.h"

namespace chunkzero {

// What Forward keeps for Backward. Per-slot arrays hold one slice per
// activation slot (ActivationCheckpointing::Slots); res3 every layer's
// output.
struct LlamaModel::Activations {
  using F = DeviceArray<float>;
  int batch = 0, seq = 0;
  DeviceArray<int32_t> tokens, targets;
  F rope_cos, rope_sin;  // [T, hd / 2]
  F embedded;            // [N, C]
  F xn1, rstd1;          // [S, N, C], [S, N]
  F qkv;                 // [S, N, 3 Ch], q and k rotated, kv heads repeated
  F att;                 // [S, B, NH, T, T]
  F atty;                // [S, N, Ch]
  F res2;                // [S, N, C]
  F xn2, rstd2;          // [S, N, C], [S, N]
  F gate, up, gated;     // [S, N, F]
  F res3;                // [L, N, C] layer outputs
  F xnf, rstdf;          // [N, C], [N]
  F probs;               // [N, V]
  DeviceArray<double> row_losses;  // [N]
};

// Working buffers shared by all layers: Forward's q, k, v before the heads
// are expanded, and Backward's.
struct LlamaModel::Scratch {
  DeviceArray<float> q, k, v;  // [N, Ch], [N, Ckv], [N, Ckv]; also dq dk dv
  DeviceArray<float> dres, dln, dsum;  // [N, C]
  DeviceArray<float> dgated;           // [N, F]
  DeviceArray<float> datty;            // [N, Ch]
  // [N, 3 Ch], unless the attention backward writes dqkv over qkv
  // (LayerBackend::AttentionBackwardInPlace: the CPU's).
  DeviceArray<float> dqkv;
  // The attention backward's (LayerBackend::AttentionScratchElements): on the
  // CPU a T x T block and a head's dQ, dK, dV per thread.
  DeviceArray<float> datt;
};

LlamaModel::LlamaModel(const LlamaConfig& config,
                       std::unique_ptr<LayerBackend> backend)
    : config_(config),
      backend_(std::move(backend)),
      scopes_("LlamaModel", backend_.get()),
      acts_(std::make_unique<Activations>()),
      scratch_(std::make_unique<Scratch>()) {}

LlamaModel::~LlamaModel() = default;

void LlamaModel::set_matmul_precision(gemm::Precision precision) {
  matmul_precision_ = precision;
  scopes_.set_bf16_products(precision == gemm::Precision::kBf16);
}

absl::Status LlamaModel::SetActivationCheckpointing(
    const ActivationCheckpointing& checkpointing) {
  if (checkpointing.every < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LlamaModel: activation checkpointing every ", checkpointing.every,
        " layers (must be 0, none, or positive)"));
  }
  if (checkpointing == checkpointing_) return absl::OkStatus();
  checkpointing_ = checkpointing;
  acts_->batch = acts_->seq = 0;  // The slots change: made again.
  have_forward_ = false;
  return absl::OkStatus();
}

template <typename Fn>
void LlamaModel::VisitBuffers(int batch, int seq, Fn fn) {
  const LlamaConfig& c = config_;
  const size_t L = c.layers, C = c.d_model, V = c.vocab, F = c.ffn;
  const size_t hd = c.resolved_head_dim();
  const size_t ch = c.heads * hd, ckv = c.kv_heads * hd;
  const size_t S = checkpointing_.Slots(c.layers);
  const size_t N = static_cast<size_t>(batch) * seq;
  const size_t att =
      static_cast<size_t>(backend_->AttentionElements(batch, seq, c.heads));
  const size_t datt =
      batch == 0 ? 0
                 : static_cast<size_t>(backend_->AttentionScratchElements(
                       batch, seq, static_cast<int>(ch), c.heads, threads_));
  const size_t own = backend_->AttentionBackwardInPlace() ? 0 : 1;
  const bool shared = checkpointing_.enabled();
  auto slots = [&](auto& buffer, size_t per_slot) {
    fn(buffer, S * per_slot, BufferRole::kKept, shared ? per_slot : size_t{0});
  };
  Activations& a = *acts_;
  fn(a.tokens, N, BufferRole::kKept, 0);
  fn(a.targets, N, BufferRole::kKept, 0);
  fn(a.rope_cos, seq * hd / 2, BufferRole::kKept, 0);
  fn(a.rope_sin, seq * hd / 2, BufferRole::kKept, 0);
  fn(a.embedded, N * C, BufferRole::kKept, 0);
  slots(a.xn1, N * C);
  slots(a.rstd1, N);
  slots(a.qkv, N * 3 * ch);
  slots(a.att, att);
  slots(a.atty, N * ch);
  slots(a.res2, N * C);
  slots(a.xn2, N * C);
  slots(a.rstd2, N);
  slots(a.gate, N * F);
  slots(a.up, N * F);
  slots(a.gated, N * F);
  fn(a.res3, L * N * C, BufferRole::kKept, 0);
  fn(a.xnf, N * C, BufferRole::kKept, 0);
  fn(a.rstdf, N, BufferRole::kKept, 0);
  fn(a.probs, N * V, BufferRole::kKept, 0);
  fn(a.row_losses, N, BufferRole::kKept, 0);
  Scratch& s = *scratch_;
  fn(s.q, N * ch, BufferRole::kScratch, 0);
  fn(s.k, N * ckv, BufferRole::kScratch, 0);
  fn(s.v, N * ckv, BufferRole::kScratch, 0);
  fn(s.dres, N * C, BufferRole::kScratch, 0);
  fn(s.dln, N * C, BufferRole::kScratch, 0);
  fn(s.dsum, N * C, BufferRole::kScratch, 0);
  fn(s.dgated, N * F, BufferRole::kScratch, 0);
  fn(s.datty, N * ch, BufferRole::kScratch, 0);
  fn(s.dqkv, own * N * 3 * ch, BufferRole::kScratch, 0);
  fn(s.datt, datt, BufferRole::kScratch, 0);
}

LlamaModel::ActivationBytes LlamaModel::activation_bytes(int batch,
                                                         int seq) const {
  // VisitBuffers only names the buffers here; nothing is touched.
  auto visit = [this](int b, int t, auto fn) {
    const_cast<LlamaModel*>(this)->VisitBuffers(b, t, fn);
  };
  return CountActivationBytes(
      visit, batch, seq, checkpointing_.CheckpointedBlocks(config_.layers));
}

absl::Status LlamaModel::ResizeBuffers(int batch, int seq) {
  Activations& a = *acts_;
  if (a.batch == batch && a.seq == seq) return absl::OkStatus();
  threads_ = GetParallelThreads();
  a.batch = a.seq = 0;  // Until the new ones are made.
  CZ_RETURN_IF_ERROR(
      RemakeBuffers([this](int b, int t, auto fn) { VisitBuffers(b, t, fn); },
                    batch, seq, backend_->device(), scopes_));
  CZ_RETURN_IF_ERROR(backend_->RopeTables(a.rope_cos.data(), a.rope_sin.data(),
                                          seq, config_.resolved_head_dim(),
                                          config_.rope_theta));
  a.batch = batch;
  a.seq = seq;
  return absl::OkStatus();
}

int64_t LlamaModel::workspace_bytes() const {
  return scopes_.workspace_bytes();
}

absl::Status LlamaModel::set_memory_accounting(MemoryTracker* tracker,
                                               Device device) {
  CZ_RETURN_IF_ERROR(scopes_.set_memory_accounting(tracker, device));
  backend_->set_scratch_accounting(tracker);
  return absl::OkStatus();
}

absl::Status LlamaModel::RmsNormBackward(ParamHooks& hooks, const Scope& scope,
                                         float* dx, const float* dout,
                                         const float* x, const float* rstd) {
  const int N = acts_->batch * acts_->seq;
  return scopes_.RunBackward(hooks, scope, /*read_weights=*/true,
                             [&](const ScopeWeights& w, float* const* g) {
                               return backend_->RmsNormBackward(
                                   dx, g[0], dout, x, w[0], rstd, N,
                                   config_.d_model);
                             });
}

absl::Status LlamaModel::LayerForward(ParamHooks& hooks, int l) {
  const LlamaConfig& c = config_;
  Activations& a = *acts_;
  Scratch& sc = *scratch_;
  const int B = a.batch, T = a.seq, N = B * T, C = c.d_model, F = c.ffn;
  const int NH = c.heads, KV = c.kv_heads, hd = c.resolved_head_dim();
  const int ch = NH * hd, ckv = KV * hd;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const size_t NC = static_cast<size_t>(N) * C;
  const size_t s = checkpointing_.SlotOf(l, c.layers);
  const LayerScopes& layer = layers_[l];
  const gemm::Precision p = matmul_precision_;
  const float* x = l == 0 ? a.embedded.data() : a.res3.data() + (l - 1) * NC;
  float* xn1 = a.xn1.data() + s * NC;
  float* rstd1 = a.rstd1.data() + s * N;
  float* qkv = a.qkv.data() + s * N * 3 * static_cast<size_t>(ch);
  float* att = a.att.data() +
               s * static_cast<size_t>(backend_->AttentionElements(B, T, NH));
  float* atty = a.atty.data() + s * N * static_cast<size_t>(ch);
  float* res2 = a.res2.data() + s * NC;
  float* xn2 = a.xn2.data() + s * NC;
  float* rstd2 = a.rstd2.data() + s * N;
  const size_t NF = static_cast<size_t>(N) * F;
  float* gate = a.gate.data() + s * NF;
  float* up = a.up.data() + s * NF;
  float* gated = a.gated.data() + s * NF;
  float* res3 = a.res3.data() + l * NC;

  CZ_RETURN_IF_ERROR(
      scopes_.RunForward(hooks, layer.input_norm, [&](const ScopeWeights& w) {
        return backend_->RmsNormForward(xn1, rstd1, x, w[0], N, C, eps);
      }));
  CZ_RETURN_IF_ERROR(scopes_.RunForwardByGroup(
      hooks, layer.attn, [&](ScopeAccess& access) -> absl::Status {
        CZ_ASSIGN_OR_RETURN(const ScopeWeights in, access.Weights(0, 3));
        CZ_RETURN_IF_ERROR(backend_->MatmulTransposedForward(
            sc.q.data(), xn1, in.matrix(0), N, C, ch, p));
        CZ_RETURN_IF_ERROR(backend_->MatmulTransposedForward(
            sc.k.data(), xn1, in.matrix(1), N, C, ckv, p));
        CZ_RETURN_IF_ERROR(backend_->MatmulTransposedForward(
            sc.v.data(), xn1, in.matrix(2), N, C, ckv, p));
        CZ_RETURN_IF_ERROR(backend_->RopeForward(
            sc.q.data(), a.rope_cos.data(), a.rope_sin.data(), N, T, NH, hd));
        CZ_RETURN_IF_ERROR(backend_->RopeForward(
            sc.k.data(), a.rope_cos.data(), a.rope_sin.data(), N, T, KV, hd));
        CZ_RETURN_IF_ERROR(backend_->ExpandQkv(qkv, sc.q.data(), sc.k.data(),
                                               sc.v.data(), N, NH, KV, hd));
        CZ_RETURN_IF_ERROR(
            backend_->AttentionForward(atty, att, qkv, B, T, ch, NH, p));
        CZ_ASSIGN_OR_RETURN(const ScopeWeights o, access.Weights(3, 1));
        CZ_RETURN_IF_ERROR(backend_->MatmulTransposedForward(
            res2, atty, o.matrix(0), N, ch, C, p));
        return backend_->Add(res2, res2, x, NC);
      }));
  CZ_RETURN_IF_ERROR(
      scopes_.RunForward(hooks, layer.post_norm, [&](const ScopeWeights& w) {
        return backend_->RmsNormForward(xn2, rstd2, res2, w[0], N, C, eps);
      }));
  CZ_RETURN_IF_ERROR(scopes_.RunForwardByGroup(
      hooks, layer.mlp, [&](ScopeAccess& access) -> absl::Status {
        CZ_ASSIGN_OR_RETURN(const ScopeWeights in, access.Weights(0, 2));
        CZ_RETURN_IF_ERROR(backend_->MatmulTransposedForward(
            gate, xn2, in.matrix(0), N, C, F, p));
        CZ_RETURN_IF_ERROR(backend_->MatmulTransposedForward(
            up, xn2, in.matrix(1), N, C, F, p));
        CZ_RETURN_IF_ERROR(backend_->SwiGluForward(gated, gate, up, NF));
        CZ_ASSIGN_OR_RETURN(const ScopeWeights down, access.Weights(2, 1));
        CZ_RETURN_IF_ERROR(backend_->MatmulTransposedForward(
            res3, gated, down.matrix(0), N, F, C, p));
        return backend_->Add(res3, res3, res2, NC);
      }));
  return absl::OkStatus();
}

absl::StatusOr<float> LlamaModel::Forward(ParamHooks& hooks, int batch, int seq,
                                          absl::Span<const int32_t> tokens,
                                          absl::Span<const int32_t> targets) {
  have_forward_ = false;
  const LlamaConfig& c = config_;
  CZ_RETURN_IF_ERROR(CheckTokenBatch("LlamaModel::Forward", batch, seq,
                                     c.seq_len, c.vocab, tokens, targets));
  CZ_RETURN_IF_ERROR(ResizeBuffers(batch, seq),
                     "LlamaModel::Forward: activations for batch ", batch,
                     " x seq ", seq);
  Activations& a = *acts_;
  const int N = batch * seq, C = c.d_model, V = c.vocab;
  const Device device = backend_->device();
  CZ_RETURN_IF_ERROR(CopyBytes(a.tokens.data(), device, tokens.data(),
                               Device::Cpu(), N * sizeof(int32_t)),
                     "LlamaModel::Forward: the tokens");
  CZ_RETURN_IF_ERROR(CopyBytes(a.targets.data(), device, targets.data(),
                               Device::Cpu(), N * sizeof(int32_t)),
                     "LlamaModel::Forward: the targets");
  const size_t NC = static_cast<size_t>(N) * C;

  CZ_RETURN_IF_ERROR(
      scopes_.RunForward(hooks, embedding_, [&](const ScopeWeights& w) {
        return backend_->TokenEmbeddingForward(a.embedded.data(),
                                               a.tokens.data(), w[0], N, C, V);
      }));
  for (int l = 0; l < c.layers; ++l) {
    CZ_RETURN_IF_ERROR(LayerForward(hooks, l));
  }
  const float* last = a.res3.data() + (c.layers - 1) * NC;
  CZ_RETURN_IF_ERROR(
      scopes_.RunForward(hooks, norm_, [&](const ScopeWeights& w) {
        return backend_->RmsNormForward(a.xnf.data(), a.rstdf.data(), last,
                                        w[0], N, C,
                                        static_cast<float>(c.rms_norm_eps));
      }));
  CZ_RETURN_IF_ERROR(
      scopes_.RunForward(hooks, lm_head_, [&](const ScopeWeights& w) {
        return backend_->MatmulTransposedForward(a.probs.data(), a.xnf.data(),
                                                 w.matrix(0), N, C, V,
                                                 matmul_precision_);
      }));
  CZ_ASSIGN_OR_RETURN(const double loss, backend_->CrossEntropyForward(
                                             a.probs.data(), a.targets.data(),
                                             N, V, a.row_losses.data()));
  have_forward_ = true;
  return static_cast<float>(loss);
}

absl::Status LlamaModel::Backward(ParamHooks& hooks, float loss_grad_scale) {
  if (!have_forward_) {
    return absl::FailedPreconditionError(
        "LlamaModel::Backward without a Forward since the last Backward");
  }
  // The probabilities become dlogits in place: no second Backward.
  have_forward_ = false;
  const LlamaConfig& c = config_;
  Activations& a = *acts_;
  Scratch& sc = *scratch_;
  const int B = a.batch, T = a.seq, N = B * T, C = c.d_model, F = c.ffn,
            V = c.vocab;
  const int NH = c.heads, KV = c.kv_heads, hd = c.resolved_head_dim();
  const int ch = NH * hd, ckv = KV * hd;
  const size_t NC = static_cast<size_t>(N) * C;
  const size_t NF = static_cast<size_t>(N) * F;
  const gemm::Precision p = matmul_precision_;
  const bool in_place = backend_->AttentionBackwardInPlace();
  const size_t att_size =
      static_cast<size_t>(backend_->AttentionElements(B, T, NH));
  float* dres = sc.dres.data();
  float* dln = sc.dln.data();
  float* dsum = sc.dsum.data();

  CZ_RETURN_IF_ERROR(scopes_.RunBackward(
      hooks, lm_head_, /*read_weights=*/true,
      [&](const ScopeWeights& w, float* const* g) {
        CZ_RETURN_IF_ERROR(backend_->CrossEntropyBackward(
            a.probs.data(), a.targets.data(), loss_grad_scale / N, N, V));
        return backend_->MatmulTransposedBackward(
            dln, g[0], a.probs.data(), a.xnf.data(), w.matrix(0), N, C, V, p);
      }));
  CZ_RETURN_IF_ERROR(backend_->Zero(dres, NC));
  const float* last = a.res3.data() + (c.layers - 1) * NC;
  CZ_RETURN_IF_ERROR(
      RmsNormBackward(hooks, norm_, dres, dln, last, a.rstdf.data()));
  // dres holds d(loss)/d(layer output), then, in place, d/d(layer input).
  for (int l = c.layers - 1; l >= 0; --l) {
    if (checkpointing_.Checkpoints(l)) {
      CZ_RETURN_IF_ERROR(LayerForward(hooks, l));
    }
    const size_t s = checkpointing_.SlotOf(l, c.layers);
    const LayerScopes& layer = layers_[l];
    const float* x = l == 0 ? a.embedded.data() : a.res3.data() + (l - 1) * NC;
    const float* xn1 = a.xn1.data() + s * NC;
    float* qkv = a.qkv.data() + s * N * 3 * static_cast<size_t>(ch);
    float* att = a.att.data() + s * att_size;
    float* dqkv = in_place ? qkv : sc.dqkv.data();
    const float* atty = a.atty.data() + s * N * static_cast<size_t>(ch);
    const float* res2 = a.res2.data() + s * NC;
    const float* xn2 = a.xn2.data() + s * NC;
    // The gate's and up's outputs are used up: their grads go over them.
    float* gate = a.gate.data() + s * NF;
    float* up = a.up.data() + s * NF;
    const float* gated = a.gated.data() + s * NF;

    // res3 = res2 + down(silu(gate(xn2)) up(xn2)): down's grad is handed
    // before gate's and up's weights are read.
    CZ_RETURN_IF_ERROR(scopes_.RunBackwardByGroup(
        hooks, layer.mlp, [&](ScopeAccess& access) -> absl::Status {
          CZ_ASSIGN_OR_RETURN(const ScopeWeights down, access.Weights(2, 1));
          CZ_ASSIGN_OR_RETURN(const ScopeGrads gd, access.Grads(2, 1));
          CZ_RETURN_IF_ERROR(backend_->MatmulTransposedBackward(
              sc.dgated.data(), gd.g[0], dres, gated, down.matrix(0), N, F, C,
              p));
          CZ_RETURN_IF_ERROR(access.Hand());
          CZ_RETURN_IF_ERROR(backend_->SwiGluBackward(
              gate, up, sc.dgated.data(), gate, up, NF));
          CZ_ASSIGN_OR_RETURN(const ScopeWeights in, access.Weights(0, 2));
          CZ_ASSIGN_OR_RETURN(const ScopeGrads gi, access.Grads(0, 2));
          CZ_RETURN_IF_ERROR(backend_->MatmulTransposedBackward(
              dln, gi.g[0], gate, xn2, in.matrix(0), N, C, F, p));
          CZ_RETURN_IF_ERROR(backend_->MatmulTransposedBackward(
              dsum, gi.g[1], up, xn2, in.matrix(1), N, C, F, p));
          return backend_->Add(dln, dln, dsum, NC);
        }));
    CZ_RETURN_IF_ERROR(RmsNormBackward(hooks, layer.post_norm, dres, dln, res2,
                                       a.rstd2.data() + s * N));
    // res2 = x + o(attention(rope(q(xn1)), rope(k(xn1)), v(xn1))), o's
    // grad first; the attention writes dqkv over qkv.
    CZ_RETURN_IF_ERROR(scopes_.RunBackwardByGroup(
        hooks, layer.attn, [&](ScopeAccess& access) -> absl::Status {
          CZ_ASSIGN_OR_RETURN(const ScopeWeights o, access.Weights(3, 1));
          CZ_ASSIGN_OR_RETURN(const ScopeGrads go, access.Grads(3, 1));
          CZ_RETURN_IF_ERROR(backend_->MatmulTransposedBackward(
              sc.datty.data(), go.g[0], dres, atty, o.matrix(0), N, ch, C, p));
          CZ_RETURN_IF_ERROR(access.Hand());
          CZ_RETURN_IF_ERROR(backend_->AttentionBackward(
              dqkv, sc.datt.data(), static_cast<int64_t>(sc.datt.size()),
              sc.datty.data(), qkv, att, atty, B, T, ch, NH, p));
          CZ_RETURN_IF_ERROR(backend_->ReduceQkvGrad(
              sc.q.data(), sc.k.data(), sc.v.data(), dqkv, N, NH, KV, hd));
          CZ_RETURN_IF_ERROR(backend_->RopeBackward(
              sc.q.data(), a.rope_cos.data(), a.rope_sin.data(), N, T, NH, hd));
          CZ_RETURN_IF_ERROR(backend_->RopeBackward(
              sc.k.data(), a.rope_cos.data(), a.rope_sin.data(), N, T, KV, hd));
          CZ_ASSIGN_OR_RETURN(const ScopeWeights in, access.Weights(0, 3));
          CZ_ASSIGN_OR_RETURN(const ScopeGrads gi, access.Grads(0, 3));
          CZ_RETURN_IF_ERROR(backend_->MatmulTransposedBackward(
              dln, gi.g[0], sc.q.data(), xn1, in.matrix(0), N, C, ch, p));
          CZ_RETURN_IF_ERROR(backend_->MatmulTransposedBackward(
              dsum, gi.g[1], sc.k.data(), xn1, in.matrix(1), N, C, ckv, p));
          CZ_RETURN_IF_ERROR(backend_->Add(dln, dln, dsum, NC));
          CZ_RETURN_IF_ERROR(backend_->MatmulTransposedBackward(
              dsum, gi.g[2], sc.v.data(), xn1, in.matrix(2), N, C, ckv, p));
          return backend_->Add(dln, dln, dsum, NC);
        }));
    CZ_RETURN_IF_ERROR(RmsNormBackward(hooks, layer.input_norm, dres, dln, x,
                                       a.rstd1.data() + s * N));
  }
  // embedded = embed_tokens[tokens]: no weights read.
  return scopes_.RunBackward(hooks, embedding_, /*read_weights=*/false,
                             [&](const ScopeWeights&, float* const* g) {
                               return backend_->TokenEmbeddingBackward(
                                   g[0], dres, a.tokens.data(), N, C, V);
                             });
}

}  // namespace chunkzero
