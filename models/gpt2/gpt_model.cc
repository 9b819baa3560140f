// GptModel's computing: Forward, Backward, the hook scopes around each
// use of the weights, and the activation and scratch buffers with their
// memory accounting. The parameters themselves (configuration, Create's
// initialisation, state dicts) are in gpt_model_parameters.cc.
#include "models/gpt2/gpt_model.h"

#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "base/parallel_for.h"
#include "base/status_macros.h"
#include "models/common/device_array.h"
#include "models/common/model_buffers.h"
#include "models/common/token_batch.h"
#include "tensor/storage.h"

namespace chunkzero {

// What Forward keeps for Backward, on the backend's device. Per-slot
// arrays hold S slices, one per activation slot (NumSlots: a kept block's
// own, and the one the checkpointed blocks share); res3 holds every
// block's output, checkpointed or not.
struct GptModel::Activations {
  using F = DeviceArray<float>;
  int batch = 0, seq = 0;
  DeviceArray<int32_t> tokens, targets;
  F encoded;                       // [N, C]
  F ln1, ln1_mean, ln1_rstd;       // [S, N, C], [S, N]
  F qkv;                           // [S, N, 3C]
  F att;                           // [S, B, NH, T, T]
  F atty;                          // [S, N, C]
  F res2;                          // [S, N, C]
  F ln2, ln2_mean, ln2_rstd;       // [S, N, C], [S, N]
  F fch, fch_gelu;                 // [S, N, 4C]
  F res3;                          // [L, N, C] block outputs
  F lnf, lnf_mean, lnf_rstd;       // [N, C], [N]
  F probs;                         // [N, V]
  DeviceArray<double> row_losses;  // [N]
};

// Backward's working buffers, shared by all layers.
struct GptModel::Scratch {
  DeviceArray<float> dresidual;  // [N, C]
  DeviceArray<float> dln;        // [N, C]
  // [N, C] and [N, 3C], unless the backend's attention backward works in
  // place (LayerBackend::AttentionBackwardInPlace).
  DeviceArray<float> datty;
  DeviceArray<float> dqkv;
  // AttentionBackward's scratch (LayerBackend::AttentionScratchElements): on
  // the CPU a T x T block and a head's dQ, dK, dV per thread.
  DeviceArray<float> datt;
};

GptModel::GptModel(const GptConfig& config,
                   std::unique_ptr<LayerBackend> backend)
    : config_(config),
      backend_(std::move(backend)),
      scopes_("GptModel", backend_.get()),
      acts_(std::make_unique<Activations>()),
      scratch_(std::make_unique<Scratch>()) {}

GptModel::~GptModel() = default;

absl::Status GptModel::SetActivationCheckpointing(
    const ActivationCheckpointing& checkpointing) {
  if (checkpointing.every < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GptModel: activation checkpointing every ", checkpointing.every,
        " blocks (must be 0, none, or positive)"));
  }
  if (checkpointing == checkpointing_) return absl::OkStatus();
  checkpointing_ = checkpointing;
  // The slots change: made again at the next Forward.
  acts_->batch = acts_->seq = 0;
  have_forward_ = false;
  return absl::OkStatus();
}

absl::Status GptModel::set_fused_attention(bool fused) {
  if (fused == backend_->fused_attention()) return absl::OkStatus();
  CZ_RETURN_IF_ERROR(backend_->set_fused_attention(fused));
  // The attention buffers change size: made again at the next Forward.
  acts_->batch = acts_->seq = 0;
  have_forward_ = false;
  return absl::OkStatus();
}

absl::Status GptModel::LayerNormBackward(ParamHooks& hooks, const Scope& scope,
                                         float* dx, const float* dout,
                                         const float* x, const float* mean,
                                         const float* rstd) {
  const int N = acts_->batch * acts_->seq;
  return scopes_.RunBackward(hooks, scope, /*read_weights=*/true,
                             [&](const ScopeWeights& w, float* const* g) {
                               return backend_->LayerNormBackward(
                                   dx, g[0], g[1], dout, x, w[0], mean, rstd, N,
                                   config_.d_model);
                             });
}

int GptModel::NumSlots() const { return checkpointing_.Slots(config_.layers); }

int GptModel::SlotOf(int block) const {
  return checkpointing_.SlotOf(block, config_.layers);
}

template <typename Fn>
void GptModel::VisitBuffers(int batch, int seq, Fn fn) {
  const size_t L = config_.layers, C = config_.d_model, V = config_.vocab;
  const size_t S = NumSlots();
  const size_t N = static_cast<size_t>(batch) * seq;
  const size_t att = static_cast<size_t>(
      backend_->AttentionElements(batch, seq, config_.heads));
  const size_t datt = static_cast<size_t>(backend_->AttentionScratchElements(
      batch, seq, config_.d_model, config_.heads, threads_));
  // A backend whose attention backward works in place needs no datty and
  // dqkv: they go over atty and qkv.
  const size_t own = backend_->AttentionBackwardInPlace() ? 0 : 1;
  // The checkpointed blocks' slot is the recompute buffer; the rest of the
  // slot arrays is kept.
  const bool shared = checkpointing_.enabled();
  auto slots = [&](auto& buffer, size_t per_slot) {
    fn(buffer, S * per_slot, BufferRole::kKept, shared ? per_slot : size_t{0});
  };
  Activations& a = *acts_;
  fn(a.tokens, N, BufferRole::kKept, 0);
  fn(a.targets, N, BufferRole::kKept, 0);
  fn(a.encoded, N * C, BufferRole::kKept, 0);
  slots(a.ln1, N * C);
  slots(a.ln1_mean, N);
  slots(a.ln1_rstd, N);
  slots(a.qkv, N * 3 * C);
  slots(a.att, att);
  slots(a.atty, N * C);
  slots(a.res2, N * C);
  slots(a.ln2, N * C);
  slots(a.ln2_mean, N);
  slots(a.ln2_rstd, N);
  slots(a.fch, N * 4 * C);
  slots(a.fch_gelu, N * 4 * C);
  fn(a.res3, L * N * C, BufferRole::kKept, 0);
  fn(a.lnf, N * C, BufferRole::kKept, 0);
  fn(a.lnf_mean, N, BufferRole::kKept, 0);
  fn(a.lnf_rstd, N, BufferRole::kKept, 0);
  fn(a.probs, N * V, BufferRole::kKept, 0);
  fn(a.row_losses, N, BufferRole::kKept, 0);
  Scratch& s = *scratch_;
  fn(s.dresidual, N * C, BufferRole::kScratch, 0);
  fn(s.dln, N * C, BufferRole::kScratch, 0);
  fn(s.datty, own * N * C, BufferRole::kScratch, 0);
  fn(s.dqkv, own * N * 3 * C, BufferRole::kScratch, 0);
  fn(s.datt, datt, BufferRole::kScratch, 0);
}

GptModel::ActivationBytes GptModel::activation_bytes(int batch, int seq) const {
  // VisitBuffers only names the buffers here; nothing is touched.
  auto visit = [this](int b, int t, auto fn) {
    const_cast<GptModel*>(this)->VisitBuffers(b, t, fn);
  };
  return CountActivationBytes(
      visit, batch, seq, checkpointing_.CheckpointedBlocks(config_.layers));
}

absl::Status GptModel::ResizeBuffers(int batch, int seq) {
  Activations& a = *acts_;
  if (a.batch == batch && a.seq == seq) return absl::OkStatus();
  threads_ = GetParallelThreads();
  a.batch = a.seq = 0;  // Until the new ones are made.
  CZ_RETURN_IF_ERROR(
      RemakeBuffers([this](int b, int t, auto fn) { VisitBuffers(b, t, fn); },
                    batch, seq, backend_->device(), scopes_));
  a.batch = batch;
  a.seq = seq;
  return absl::OkStatus();
}

int64_t GptModel::workspace_bytes() const { return scopes_.workspace_bytes(); }

absl::Status GptModel::set_memory_accounting(MemoryTracker* tracker,
                                             Device device) {
  CZ_RETURN_IF_ERROR(scopes_.set_memory_accounting(tracker, device));
  backend_->set_scratch_accounting(tracker);
  return absl::OkStatus();
}

absl::Status GptModel::BlockForward(ParamHooks& hooks, int l) {
  const GptConfig& cfg = config_;
  Activations& a = *acts_;
  const int B = a.batch, T = a.seq, C = cfg.d_model, NH = cfg.heads, N = B * T;
  const size_t NC = static_cast<size_t>(N) * C;
  const size_t att_size =
      static_cast<size_t>(backend_->AttentionElements(B, T, NH));
  const size_t s = SlotOf(l);
  const BlockScopes& block = blocks_[l];
  const float* x = l == 0 ? a.encoded.data() : a.res3.data() + (l - 1) * NC;
  float* ln1 = a.ln1.data() + s * NC;
  float* qkv = a.qkv.data() + s * 3 * NC;
  float* att = a.att.data() + s * att_size;
  float* atty = a.atty.data() + s * NC;
  float* res2 = a.res2.data() + s * NC;
  float* ln2 = a.ln2.data() + s * NC;
  float* fch = a.fch.data() + s * 4 * NC;
  float* fch_gelu = a.fch_gelu.data() + s * 4 * NC;
  float* res3 = a.res3.data() + l * NC;
  CZ_RETURN_IF_ERROR(
      scopes_.RunForward(hooks, block.ln_1, [&](const ScopeWeights& w) {
        return backend_->LayerNormForward(ln1, a.ln1_mean.data() + s * N,
                                          a.ln1_rstd.data() + s * N, x, w[0],
                                          w[1], N, C);
      }));
  // The attention's and the MLP's two matmuls read their weights one pair
  // at a time, so that only one pair is widened at once.
  CZ_RETURN_IF_ERROR(
      scopes_.RunForwardByGroup(hooks, block.attn, [&](ScopeAccess& s) {
        CZ_ASSIGN_OR_RETURN(const ScopeWeights in, s.Weights(0, 2));
        CZ_RETURN_IF_ERROR(backend_->MatmulForward(
            qkv, ln1, in.matrix(0), in[1], N, C, 3 * C, matmul_precision_));
        CZ_RETURN_IF_ERROR(backend_->AttentionForward(atty, att, qkv, B, T, C,
                                                      NH, matmul_precision_));
        CZ_ASSIGN_OR_RETURN(const ScopeWeights proj, s.Weights(2, 2));
        CZ_RETURN_IF_ERROR(backend_->MatmulForward(
            res2, atty, proj.matrix(0), proj[1], N, C, C, matmul_precision_));
        return backend_->Add(res2, res2, x, NC);
      }));
  CZ_RETURN_IF_ERROR(
      scopes_.RunForward(hooks, block.ln_2, [&](const ScopeWeights& w) {
        return backend_->LayerNormForward(ln2, a.ln2_mean.data() + s * N,
                                          a.ln2_rstd.data() + s * N, res2, w[0],
                                          w[1], N, C);
      }));
  CZ_RETURN_IF_ERROR(
      scopes_.RunForwardByGroup(hooks, block.mlp, [&](ScopeAccess& s) {
        CZ_ASSIGN_OR_RETURN(const ScopeWeights fc, s.Weights(0, 2));
        CZ_RETURN_IF_ERROR(backend_->MatmulForward(
            fch, ln2, fc.matrix(0), fc[1], N, C, 4 * C, matmul_precision_));
        CZ_RETURN_IF_ERROR(backend_->GeluForward(fch_gelu, fch, 4 * NC));
        CZ_ASSIGN_OR_RETURN(const ScopeWeights proj, s.Weights(2, 2));
        CZ_RETURN_IF_ERROR(
            backend_->MatmulForward(res3, fch_gelu, proj.matrix(0), proj[1], N,
                                    4 * C, C, matmul_precision_));
        return backend_->Add(res3, res3, res2, NC);
      }));
  return absl::OkStatus();
}

absl::StatusOr<float> GptModel::Forward(ParamHooks& hooks, int batch, int seq,
                                        absl::Span<const int32_t> tokens,
                                        absl::Span<const int32_t> targets) {
  have_forward_ = false;
  const GptConfig& cfg = config_;
  CZ_RETURN_IF_ERROR(CheckTokenBatch("GptModel::Forward", batch, seq,
                                     cfg.seq_len, cfg.vocab, tokens, targets));
  const size_t n_tokens = static_cast<size_t>(batch) * seq;
  CZ_RETURN_IF_ERROR(ResizeBuffers(batch, seq),
                     "GptModel::Forward: ", "activations for batch ", batch,
                     " x seq ", seq);
  Activations& a = *acts_;
  const Device device = backend_->device();
  CZ_RETURN_IF_ERROR(CopyBytes(a.tokens.data(), device, tokens.data(),
                               Device::Cpu(), n_tokens * sizeof(int32_t)),
                     "GptModel::Forward: tokens to ", device.ToString());
  CZ_RETURN_IF_ERROR(CopyBytes(a.targets.data(), device, targets.data(),
                               Device::Cpu(), n_tokens * sizeof(int32_t)),
                     "GptModel::Forward: targets to ", device.ToString());
  const int B = batch, T = seq, C = cfg.d_model, V = cfg.vocab, N = B * T;
  const size_t NC = static_cast<size_t>(N) * C;

  CZ_RETURN_IF_ERROR(
      scopes_.RunForward(hooks, embedding_, [&](const ScopeWeights& w) {
        return backend_->EmbeddingForward(a.encoded.data(), a.tokens.data(),
                                          w[0], w[1], B, T, C, V);
      }));
  for (int l = 0; l < cfg.layers; ++l) {
    CZ_RETURN_IF_ERROR(BlockForward(hooks, l));
  }
  const float* last = a.res3.data() + (cfg.layers - 1) * NC;
  CZ_RETURN_IF_ERROR(
      scopes_.RunForward(hooks, ln_f_, [&](const ScopeWeights& w) {
        return backend_->LayerNormForward(a.lnf.data(), a.lnf_mean.data(),
                                          a.lnf_rstd.data(), last, w[0], w[1],
                                          N, C);
      }));
  CZ_RETURN_IF_ERROR(
      scopes_.RunForward(hooks, lm_head_, [&](const ScopeWeights& w) {
        return backend_->MatmulTransposedForward(a.probs.data(), a.lnf.data(),
                                                 w.matrix(0), N, C, V,
                                                 matmul_precision_);
      }));
  CZ_ASSIGN_OR_RETURN(const double loss, backend_->CrossEntropyForward(
                                             a.probs.data(), a.targets.data(),
                                             N, V, a.row_losses.data()));
  have_forward_ = true;
  return static_cast<float>(loss);
}

absl::Status GptModel::Backward(ParamHooks& hooks, float loss_grad_scale) {
  if (!have_forward_) {
    return absl::FailedPreconditionError(
        "GptModel::Backward without a Forward since the last Backward");
  }
  // The probabilities become dlogits in place: no second Backward.
  have_forward_ = false;
  const GptConfig& cfg = config_;
  Activations& a = *acts_;
  Scratch& sc = *scratch_;
  const bool in_place = backend_->AttentionBackwardInPlace();
  const int B = a.batch, T = a.seq, C = cfg.d_model, NH = cfg.heads,
            V = cfg.vocab, N = B * T;
  const size_t NC = static_cast<size_t>(N) * C;
  const size_t att_size =
      static_cast<size_t>(backend_->AttentionElements(B, T, NH));
  float* dres = sc.dresidual.data();
  float* dln = sc.dln.data();

  // logits = lnf wte^T, loss = mean over rows of the row losses.
  CZ_RETURN_IF_ERROR(scopes_.RunBackward(
      hooks, lm_head_, /*read_weights=*/true,
      [&](const ScopeWeights& w, float* const* g) {
        CZ_RETURN_IF_ERROR(backend_->CrossEntropyBackward(
            a.probs.data(), a.targets.data(), loss_grad_scale / N, N, V));
        CZ_RETURN_IF_ERROR(backend_->MatmulTransposedBackward(
            dln, g[0], a.probs.data(), a.lnf.data(), w.matrix(0), N, C, V,
            matmul_precision_));
        return absl::OkStatus();
      }));
  const float* last = a.res3.data() + (cfg.layers - 1) * NC;
  CZ_RETURN_IF_ERROR(backend_->Zero(dres, NC));
  CZ_RETURN_IF_ERROR(LayerNormBackward(hooks, ln_f_, dres, dln, last,
                                       a.lnf_mean.data(), a.lnf_rstd.data()));
  // dres holds d(loss)/d(block output), then, in place, d/d(block input).
  for (int l = cfg.layers - 1; l >= 0; --l) {
    // A checkpointed block's activations come back first: its forward
    // again, from its kept input, into the shared slot.
    if (checkpointing_.Checkpoints(l))
      CZ_RETURN_IF_ERROR(BlockForward(hooks, l));
    const size_t slot = SlotOf(l);
    const BlockScopes& block = blocks_[l];
    const float* x = l == 0 ? a.encoded.data() : a.res3.data() + (l - 1) * NC;
    const float* ln1 = a.ln1.data() + slot * NC;
    // The attention's and the MLP's activations are used up: Backward
    // writes their grads over them (no second Backward).
    float* qkv = a.qkv.data() + slot * 3 * NC;
    float* att = a.att.data() + slot * att_size;
    float* atty = a.atty.data() + slot * NC;
    float* datty = in_place ? atty : sc.datty.data();
    float* dqkv = in_place ? qkv : sc.dqkv.data();
    const float* res2 = a.res2.data() + slot * NC;
    const float* ln2 = a.ln2.data() + slot * NC;
    float* fch = a.fch.data() + slot * 4 * NC;
    float* fch_gelu = a.fch_gelu.data() + slot * 4 * NC;
    // res3 = res2 + c_proj(gelu(c_fc(ln2))), a pair of weights at a time:
    // c_proj's grads are handed before c_fc's weights are read. d(gelu
    // output) goes over the gelu output (MatmulBackward makes dw first),
    // d(c_fc output) over the c_fc output.
    CZ_RETURN_IF_ERROR(
        scopes_.RunBackwardByGroup(hooks, block.mlp, [&](ScopeAccess& s) {
          CZ_ASSIGN_OR_RETURN(const ScopeWeights proj, s.Weights(2, 2));
          CZ_ASSIGN_OR_RETURN(const ScopeGrads gp, s.Grads(2, 2));
          CZ_RETURN_IF_ERROR(backend_->MatmulBackward(
              fch_gelu, gp.g[0], gp.g[1], dres, fch_gelu, proj.matrix(0), N,
              4 * C, C, matmul_precision_));
          CZ_RETURN_IF_ERROR(s.Hand());
          CZ_RETURN_IF_ERROR(
              backend_->GeluBackward(fch, fch, fch_gelu, 4 * NC));
          CZ_ASSIGN_OR_RETURN(const ScopeWeights fc, s.Weights(0, 2));
          CZ_ASSIGN_OR_RETURN(const ScopeGrads gf, s.Grads(0, 2));
          return backend_->MatmulBackward(dln, gf.g[0], gf.g[1], fch, ln2,
                                          fc.matrix(0), N, C, 4 * C,
                                          matmul_precision_);
        }));
    CZ_RETURN_IF_ERROR(LayerNormBackward(hooks, block.ln_2, dres, dln, res2,
                                         a.ln2_mean.data() + slot * N,
                                         a.ln2_rstd.data() + slot * N));
    // res2 = x + c_proj(attention(c_attn(ln1))), c_proj's pair first.
    CZ_RETURN_IF_ERROR(
        scopes_.RunBackwardByGroup(hooks, block.attn, [&](ScopeAccess& s) {
          CZ_ASSIGN_OR_RETURN(const ScopeWeights proj, s.Weights(2, 2));
          CZ_ASSIGN_OR_RETURN(const ScopeGrads gp, s.Grads(2, 2));
          CZ_RETURN_IF_ERROR(backend_->MatmulBackward(
              datty, gp.g[0], gp.g[1], dres, atty, proj.matrix(0), N, C, C,
              matmul_precision_));
          CZ_RETURN_IF_ERROR(s.Hand());
          CZ_RETURN_IF_ERROR(backend_->AttentionBackward(
              dqkv, sc.datt.data(), static_cast<int64_t>(sc.datt.size()), datty,
              qkv, att, atty, B, T, C, NH, matmul_precision_));
          CZ_ASSIGN_OR_RETURN(const ScopeWeights in, s.Weights(0, 2));
          CZ_ASSIGN_OR_RETURN(const ScopeGrads gi, s.Grads(0, 2));
          return backend_->MatmulBackward(dln, gi.g[0], gi.g[1], dqkv, ln1,
                                          in.matrix(0), N, C, 3 * C,
                                          matmul_precision_);
        }));
    CZ_RETURN_IF_ERROR(LayerNormBackward(hooks, block.ln_1, dres, dln, x,
                                         a.ln1_mean.data() + slot * N,
                                         a.ln1_rstd.data() + slot * N));
  }
  // encoded = wte[tokens] + wpe[positions]: no weights read.
  CZ_RETURN_IF_ERROR(scopes_.RunBackward(
      hooks, embedding_, /*read_weights=*/false,
      [&](const ScopeWeights&, float* const* g) {
        return backend_->EmbeddingBackward(g[0], g[1], dres, a.tokens.data(), B,
                                           T, C, V, cfg.seq_len);
      }));
  return absl::OkStatus();
}

}  // namespace chunkzero
