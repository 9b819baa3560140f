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

absl::StatusOr<TrainMemoryEstimate> EstimateTrainMemory(
    const TrainMemoryInput& in) {
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
  const double block = 12 * C * C + 13 * C;
  const double psi = V * C + P * C + L * block + 2 * C;
  const double largest = std::max({V * C, P * C, 4 * C * C});
  if (largest > kMaxElements || psi > kMaxElements) {
    return TooLarge("--vocab, --d_model, --layers", "parameters", psi,
                    kMaxElements);
  }

  TrainMemoryEstimate e;
  e.ranks_in_process = in.ranks_in_process;
  e.model_init = 4 * psi;

  // The engine's chunks, masters and states (engine/cost_model.h). A size
  // still to be searched is at least the largest tensor (the caller checks
  // again with the size found).
  EngineOptions engine;
  engine.layout = in.layout;
  engine.precision = in.dtype;
  engine.max_prefetch = in.max_prefetch;
  engine.optimizer.kind = in.optimizer;
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
  // bf16 products only the embedding's wte and wpe). Plus the batch:
  // tokens and targets (int32) and the row losses (f64). The fused
  // attention keeps B NH T (a log-sum-exp per query row, and as much
  // backward scratch) where the batched one keeps B NH T^2.
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
  const double floats = L * N * C + slots * (15 * N * C + 4 * N + attention) +
                        (2 * N * C + 2 * N) + N * V + scratch + grads +
                        widened + tied_grad;
  e.activations = 4 * floats + 4 * (2 * N) + 8 * N;

  // The file's bytes, read whole, and the int32 ids made of them.
  const double bytes = static_cast<double>(in.data_bytes);
  e.data = in.data_is_uint16 ? bytes + 2 * bytes : bytes + 4 * bytes;
  return e;
}

}  // namespace chunkzero
