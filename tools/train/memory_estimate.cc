#include "tools/train/memory_estimate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/system_memory.h"
#include "engine/cost_model.h"

namespace chunkzero {
namespace {

// The kernels index rows and columns with int (cblas takes int sizes).
constexpr double kMaxInt = std::numeric_limits<int>::max();
// Tensors, chunks and offsets are int64 elements; keep well inside that.
constexpr double kMaxElements = 4.0e18;

absl::Status TooLarge(absl::string_view flags, absl::string_view what,
                      double value, double limit) {
  return absl::InvalidArgumentError(
      absl::StrCat(flags, ": ", what, " would be ", value, ", more than the ",
                   limit, " the model's kernels can index"));
}

}  // namespace

std::string TrainMemoryEstimate::Describe() const {
  return absl::StrCat(
      ranks_in_process, ranks_in_process == 1 ? " rank" : " ranks", " x ",
      FormatBytes(per_rank()), " (model init ", FormatBytes(model_init),
      ", chunks ", FormatBytes(chunks), ", optimizer ", FormatBytes(optimizer),
      ", activations ", FormatBytes(activations), ") + data ",
      FormatBytes(data), " = ", FormatBytes(total()));
}

double TrainMemoryEstimate::HostBytesPerRank(OffloadPolicy offload,
                                             bool staged) const {
  const bool rests_on_host =
      offload == OffloadPolicy::kParams || offload == OffloadPolicy::kAuto;
  return model_init + reduce_scratch +
         (offload != OffloadPolicy::kNone ? optimizer : 0) +
         (rests_on_host ? chunks_at_rest : 0) + (staged ? in_flight : 0);
}

std::string TrainMemoryEstimate::DescribeHost(OffloadPolicy offload,
                                              bool staged) const {
  const bool rests_on_host =
      offload == OffloadPolicy::kParams || offload == OffloadPolicy::kAuto;
  std::string parts =
      absl::StrCat("model init ", FormatBytes(model_init), ", reduce scratch ",
                   FormatBytes(reduce_scratch));
  if (offload != OffloadPolicy::kNone) {
    absl::StrAppend(&parts, ", offloaded optimizer ", FormatBytes(optimizer));
  }
  if (rests_on_host) {
    absl::StrAppend(&parts, ", chunks at rest ", FormatBytes(chunks_at_rest));
  }
  if (staged) {
    absl::StrAppend(&parts, ", pinned staging ", FormatBytes(in_flight));
  }
  return absl::StrCat(ranks_in_process,
                      ranks_in_process == 1 ? " rank" : " ranks", " x ",
                      FormatBytes(HostBytesPerRank(offload, staged)),
                      " on the host (", parts, ") + data ", FormatBytes(data),
                      " = ", FormatBytes(HostTotal(offload, staged)));
}

std::string TrainMemoryEstimate::LargestPartFlags() const {
  const std::vector<std::pair<double, const char*>> parts = {
      {model_init * ranks_in_process, "--vocab, --d_model, --layers"},
      {chunks * ranks_in_process,
       "--chunk_size, --storage, --vocab, --d_model, --layers"},
      {optimizer * ranks_in_process,
       "--storage, --optimizer, --vocab, --d_model, --layers"},
      {activations * ranks_in_process,
       "--batch, --seq_len, --vocab, --d_model, --layers"},
      {data, "--data or --tokens"},
  };
  return std::max_element(parts.begin(), parts.end())->second;
}

namespace {

// What the estimate needs of the architecture: Ψ, the largest tensor, one
// block's parameters, and the floats of the model's buffers for one
// micro-batch (activations, Backward's scratch, the grad and widen
// buffers, the tied weight's f32 grad sum).
struct ModelFigures {
  double psi = 0, largest = 0, block = 0, floats = 0;
};

// models/llama/llama_model.cc's buffers, exactly (VisitBuffers): per
// layer its output N C, per activation slot 3 N C + 2 N + 3 N Ch + B NH
// T^2 + N Ch + 3 N F; the embedding, final norm and probabilities
// N C + N C + N + N V; the rotary tables T hd. Scratch: q, k, v N (Ch + 2
// Ckv), three N C, N F and N Ch, and the attention backward's: on the CPU
// T^2 + 3 T hd per thread (for at most B NH heads), dqkv in place; on a
// GPU B NH T^2 and dqkv's N 3 Ch. The grad buffer holds the largest
// group (the embedding or output projection, q k v, or gate and up); the
// widen buffer the largest 16-bit group (with bf16 products only the
// embedding's, which is not a product's matrix). The tied embedding's f32
// grad sum, V C, as GPT-2's.
ModelFigures LlamaFigures(const TrainMemoryInput& in, const LlamaConfig& m) {
  const double L = m.layers, C = m.d_model, V = m.vocab, F = m.ffn;
  const double NH = m.heads, KV = m.kv_heads, hd = m.resolved_head_dim();
  const double ch = NH * hd, ckv = KV * hd;
  const double B = in.batch, T = in.seq_len, N = B * T;
  ModelFigures f;
  const double layer = 2 * ch * C + 2 * ckv * C + 3 * F * C + 2 * C;
  f.block = layer;
  f.psi = V * C * (m.tie_word_embeddings ? 1 : 2) + L * layer + C;
  f.largest = std::max({V * C, ch * C, F * C});
  const int checkpointed =
      in.activation_checkpointing.CheckpointedBlocks(static_cast<int>(L));
  const double slots = L - checkpointed + (checkpointed > 0 ? 1 : 0);
  const double threads = std::max(1, in.threads_per_rank);
  const double slot =
      3 * N * C + 2 * N + 3 * N * ch + B * NH * T * T + N * ch + 3 * N * F;
  const double grads = std::max({V * C, (NH + 2 * KV) * hd * C, 2 * F * C});
  const double widened = in.dtype == DType::kF32    ? 0
                         : in.dtype == DType::kBF16 ? V * C
                                                    : grads;
  const double attention_scratch =
      in.gpu ? B * NH * T * T + 3 * N * ch
             : std::min(threads, B * NH) * (T * T + 3 * T * hd);
  f.floats = L * N * C + slots * slot + (2 * N * C + N) + N * V + T * hd +
             N * (ch + 2 * ckv) + 3 * N * C + N * F + N * ch +
             attention_scratch + grads + widened +
             (m.tie_word_embeddings ? V * C : 0);
  return f;
}

// models/gpt2/gpt_model.cc's buffers, in floats, exactly: per block its
// output N C, and per activation slot 15 N C + 4 N + B NH T^2 (a slot for
// each block kept, one for all checkpointed blocks to recompute into);
// embeddings and the final LayerNorm 2 N C + 2 N; the N x V
// probabilities. Backward's scratch: dresidual and dln, 2 N C, and the
// attention's: on the CPU a T^2 + 3 T C / NH block per thread (for at
// most B NH heads), its dqkv and datty in place; on a GPU 4 N C for
// those and B NH T^2. The grad buffer holds the largest group's grads
// (c_fc's weight and bias, or wte and wpe); the widened weights the
// largest 16-bit group that is not read as bf16 bits (none for f32; with
// bf16 products only the embedding's wte and wpe). The fused attention
// keeps B NH T (a log-sum-exp per query row, and as much backward
// scratch) where the batched one keeps B NH T^2.
ModelFigures GptFigures(const TrainMemoryInput& in) {
  const double L = in.model.layers, C = in.model.d_model, H = in.model.heads;
  const double V = in.model.vocab, P = in.model.seq_len, T = in.seq_len;
  const double B = in.batch, N = B * T;
  ModelFigures f;
  f.block = 12 * C * C + 13 * C;
  f.psi = V * C + P * C + L * f.block + 2 * C;
  f.largest = std::max({V * C, P * C, 4 * C * C});
  const double attention = in.fused_attention ? B * H * T : B * H * T * T;
  const int checkpointed =
      in.activation_checkpointing.CheckpointedBlocks(static_cast<int>(L));
  const double slots = L - checkpointed + (checkpointed > 0 ? 1 : 0);
  const double threads = std::max(1, in.threads_per_rank);
  const double scratch = 2 * N * C + (in.gpu ? 4 * N * C + attention
                                             : std::min(threads, B * H) *
                                                   (T * T + 3 * T * (C / H)));
  const double fc_pair = 4 * C * C + 4 * C;
  const double embedding = (V + P) * C;
  const double grads = std::max(fc_pair, embedding);
  const double widened = in.dtype == DType::kF32    ? 0
                         : in.dtype == DType::kBF16 ? embedding
                                                    : grads;
  // The tied wte's grads from the output layer, which ZeroDdp sums in f32
  // until the embedding's come (its weights are still needed).
  const double tied_grad = V * C;
  f.floats = L * N * C + slots * (15 * N * C + 4 * N + attention) +
             (2 * N * C + 2 * N) + N * V + scratch + grads + widened +
             tied_grad;
  return f;
}

// The engine's part (engine/cost_model.h) and the model's buffers, plus
// the batch: tokens and targets (int32) and the row losses (f64).
TrainMemoryEstimate EstimateWithFigures(const TrainMemoryInput& in,
                                        const ModelFigures& f) {
  const double psi = f.psi, largest = f.largest, block = f.block;
  const double N = static_cast<double>(in.batch) * in.seq_len;
  TrainMemoryEstimate e;
  e.ranks_in_process = in.ranks_in_process;
  e.model_init = 12 * largest;

  // The engine's chunks, masters and states (engine/cost_model.h). A size
  // still to be searched is at least the largest tensor (the caller checks
  // again with the size found).
  EngineOptions engine;
  engine.layout = in.layout;
  engine.precision = in.dtype;
  engine.max_prefetch = in.max_prefetch;
  engine.optimizer.kind = in.optimizer;
  engine.offload = in.offload;
  engine.activation_checkpointing = in.activation_checkpointing;
  if (in.chunk_size > 0) engine.chunk_size = in.chunk_size;
  if (in.chunk_size < 0) engine.chunk_size = static_cast<int64_t>(largest);
  ParameterPacking packing;
  packing.parameters = psi;
  packing.largest_tensor = largest;
  packing.block_parameters = block;
  if (in.chunk_size > 0) packing.num_chunks = in.num_chunks;
  const ChunkMemory chunks =
      EstimateChunkMemory(engine, packing, in.world_size, in.grad_accum);
  e.chunks = chunks.chunks;
  e.chunks_at_rest = chunks.chunks_at_rest;
  e.reduce_scratch = chunks.reduce_scratch;
  e.in_flight = chunks.in_flight;
  e.in_flight_shards = chunks.in_flight_shards;
  e.optimizer = chunks.optimizer;
  e.disk = chunks.disk;
  e.rest_per_chunk = chunks.rest_per_chunk;
  if (in.offload == OffloadPolicy::kNvme) {
    // A master or state chunk, f32, while registration or the first step
    // fills it.
    e.model_init += 4 * chunks.rest_per_chunk / ElementSize(in.dtype);
  }

  e.activations = 4 * f.floats + 4 * (2 * N) + 8 * N;

  // The file's bytes, read whole, and the int32 ids made of them.
  const double bytes = static_cast<double>(in.data_bytes);
  e.data = bytes + 4 * bytes / std::max(1, in.data_token_bytes);
  return e;
}

}  // namespace

absl::StatusOr<TrainMemoryEstimate> EstimateTrainMemory(
    const TrainMemoryInput& in) {
  if (in.llama.has_value()) {
    const LlamaConfig& m = *in.llama;
    if (m.layers < 1 || m.d_model < 1 || m.heads < 1 || m.kv_heads < 1 ||
        m.ffn < 1 || m.vocab < 1 || m.seq_len < 1 || in.seq_len < 1 ||
        in.batch < 1 || in.world_size < 1 || in.ranks_in_process < 1 ||
        in.grad_accum < 1 || in.max_prefetch < 0 || in.num_chunks < 0 ||
        in.data_bytes < 0) {
      return absl::InvalidArgumentError(
          "EstimateTrainMemory: every size must be positive");
    }
    const double N = static_cast<double>(in.batch) * in.seq_len;
    if (N > kMaxInt) return TooLarge("--batch x --seq_len", "rows", N, kMaxInt);
    const double hd = m.resolved_head_dim();
    if (3.0 * m.heads * hd > kMaxInt || 1.0 * m.ffn > kMaxInt) {
      return TooLarge("--heads, --ffn", "a row of q, k, v or the MLP",
                      std::max(3.0 * m.heads * hd, 1.0 * m.ffn), kMaxInt);
    }
    const ModelFigures f = LlamaFigures(in, m);
    if (f.largest > kMaxElements || f.psi > kMaxElements) {
      return TooLarge("--vocab, --d_model, --layers", "parameters", f.psi,
                      kMaxElements);
    }
    return EstimateWithFigures(in, f);
  }
  const double L = in.model.layers, C = in.model.d_model, H = in.model.heads;
  const double V = in.model.vocab, P = in.model.seq_len, T = in.seq_len;
  const double B = in.batch, W = in.world_size;
  if (L < 1 || C < 1 || H < 1 || V < 1 || P < 1 || T < 1 || B < 1 || W < 1 ||
      in.ranks_in_process < 1 || in.grad_accum < 1 || in.max_prefetch < 0 ||
      in.num_chunks < 0 || in.data_bytes < 0) {
    return absl::InvalidArgumentError(
        "EstimateTrainMemory: every size must be positive");
  }
  const double N = B * T;  // Rows of one micro-batch.
  if (N > kMaxInt) return TooLarge("--batch x --seq_len", "rows", N, kMaxInt);
  if (4 * C > kMaxInt)
    return TooLarge("--d_model", "4 x d_model", 4 * C, kMaxInt);
  if (B * H > kMaxInt)
    return TooLarge("--batch x --heads", "heads", B * H, kMaxInt);
  const ModelFigures f = GptFigures(in);
  if (f.largest > kMaxElements || f.psi > kMaxElements) {
    return TooLarge("--vocab, --d_model, --layers", "parameters", f.psi,
                    kMaxElements);
  }
  return EstimateWithFigures(in, f);
}

}  // namespace chunkzero
