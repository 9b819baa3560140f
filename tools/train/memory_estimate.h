// What a train job will hold in memory, worked out from its flags before
// anything is allocated, so that an impossible configuration is refused up
// front with the numbers instead of dying of std::bad_alloc (or the OOM
// killer) after minutes of work.
//
//   TrainMemoryInput in;   // shape, batch, ranks, layout, ...
//   CZ_ASSIGN_OR_RETURN(TrainMemoryEstimate need, EstimateTrainMemory(in));
//   if (need.total() > available) ... need.Describe() ...
//
// The arithmetic is in double, so no size can overflow; a shape whose
// tensors or row counts do not fit the kernels' integer types is
// InvalidArgument naming the flags. Figures are upper bounds within a few
// percent for the train job (GPT-2 in models/gpt2, chunked by ZeroDdp).
#ifndef CHUNKZERO_TOOLS_TRAIN_MEMORY_ESTIMATE_H_
#define CHUNKZERO_TOOLS_TRAIN_MEMORY_ESTIMATE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "chunk/chunk_layout.h"
#include "engine/activation_checkpointing.h"
#include "models/gpt2/gpt_model.h"
#include "models/llama/llama_model.h"
#include "optim/zero_optimizer.h"
#include "tensor/dtype.h"

namespace chunkzero {

struct TrainMemoryInput {
  GptConfig model;  // seq_len here is P, the learned positions.
  // A Llama-family model instead (its own sizes; `model` is not read).
  std::optional<LlamaConfig> llama;
  int seq_len = 0;  // T, the context trained on (<= P).
  int batch = 1;    // Sequences per rank per micro-batch.
  int world_size = 1;
  int ranks_in_process = 1;  // world_size for ranks as threads, else 1.
  int grad_accum = 1;
  DType dtype = DType::kF16;
  ChunkLayout layout = ChunkLayout::kSharded;
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  // kNvme puts the masters and states on disk (TrainMemoryEstimate::disk);
  // the other policies move memory but hold the same bytes.
  OffloadPolicy offload = OffloadPolicy::kNone;
  // Elements per chunk: > 0 as given, 0 one chunk per tensor, -1 not yet
  // searched (counted as the smallest candidate, the largest tensor: check
  // again once the search has picked one).
  int64_t chunk_size = -1;
  int max_prefetch = 1;
  // How many chunks of chunk_size (> 0) the parameters pack into, when the
  // packing is known (PlanTraining packs them in their order); 0: at most
  // one chunk more than the parameters fill, which a packing of tensors
  // that do not divide the chunk size can exceed by far.
  int64_t num_chunks = 0;
  // The fused attention (--fused_attention): B NH T floats per block where
  // the batched one keeps B NH T^2.
  bool fused_attention = false;
  // Checkpointed blocks keep only their output (--activation_checkpointing)
  // and share one buffer their activations are recomputed into.
  ActivationCheckpointing activation_checkpointing;
  // The threads each rank computes on (ParallelThreadsShare), and whether
  // the model computes on a GPU: the CPU's attention backward keeps a
  // scratch block per thread and works in place, a GPU's keeps B NH T^2
  // (or B NH T fused) and its own dqkv and datty.
  int threads_per_rank = 1;
  bool gpu = false;
  int64_t data_bytes = 0;  // The token file's size (built-in text: 0).
  // Bytes per token of the data file: 1 (--data), 2 or 4 (--tokens of
  // u16 or u32).
  int data_token_bytes = 1;
};

// Bytes, by what holds them.
struct TrainMemoryEstimate {
  // Per rank:
  // While ZeroDdp registers the model, beside the chunks: the largest
  // parameter's deferred values, its f32 master and its compute copy (12
  // bytes an element), and with --offload=nvme the master or state chunk
  // being filled before it goes to disk.
  double model_init = 0;
  double chunks = 0;  // Compute-dtype chunks at rest and in flight.
  // Of `chunks`: what is held between uses, and the host scratch the
  // collectives reduce 16-bit grads in (never on the compute device).
  double chunks_at_rest = 0;
  double reduce_scratch = 0;
  // The chunks gathered (or brought from the host) for use at once, at
  // most 2 max_prefetch + 3 (and never more than there are): the one
  // computing, the tied weight's, one being reduced, the chunks gathered
  // ahead for the next ops and those the previous ops gathered ahead and
  // have not released yet. Part of `chunks` beyond those at rest, except
  // for the replicated layout, whose chunks are all at rest where they
  // compute.
  double in_flight = 0;
  // This rank's shards of the chunks in flight (sharded layout): what a
  // device holds on top of the gathered chunks when those chunks also rest
  // there (--offload=auto), since a chunk's shard cannot move while it is
  // being gathered or used.
  double in_flight_shards = 0;
  double optimizer = 0;    // fp32 masters, optimizer states, accumulation.
  double activations = 0;  // Forward activations, backward scratch, grads.
  // --offload=nvme: the masters and states on disk (then not in
  // `optimizer`, which keeps the accumulation and the update's staging).
  double disk = 0;
  // What one compute chunk holds at rest on a rank (ChunkMemory).
  double rest_per_chunk = 0;
  // Per process:
  double data = 0;  // The token stream (shared by the ranks as threads).
  int ranks_in_process = 1;

  double per_rank() const {
    return model_init + chunks + optimizer + activations;
  }
  double total() const { return per_rank() * ranks_in_process + data; }
  // With the compute on a GPU, what one rank keeps in host memory: the
  // model's initial weights, the reduce scratch, the masters and optimizer
  // states when offloaded (any --offload but none), the chunks at rest when
  // the parameters rest on the host (params, auto), and, when the ranks'
  // collectives are staged through pinned host memory (`staged`: not
  // NCCL), a pinned copy of the chunks in flight. The rest is on the GPU
  // (DeviceMemoryNeeded in train_plan.h).
  double HostBytesPerRank(OffloadPolicy offload, bool staged) const;
  // HostBytesPerRank for every rank of the process, plus the data.
  double HostTotal(OffloadPolicy offload, bool staged) const {
    return HostBytesPerRank(offload, staged) * ranks_in_process + data;
  }
  // "2 ranks x 1.20 GiB on the host (model init ..., offloaded optimizer
  // ...) + data 12 MiB = 2.41 GiB", for a GPU job's host check.
  std::string DescribeHost(OffloadPolicy offload, bool staged) const;
  // "4 ranks x 1.20 GiB (chunks 0.50 GiB, ...) + data 12 MiB = 4.81 GiB".
  std::string Describe() const;
  // The flags that drive the largest part, for advice: e.g. "--batch,
  // --seq_len, --vocab" for activations.
  std::string LargestPartFlags() const;
};

// InvalidArgument, naming the flags, when a size does not fit the integer
// types the model and kernels index with (B * T rows, 4 * d_model, vocab
// rows, elements of one tensor) or a field is out of range.
[[nodiscard]] absl::StatusOr<TrainMemoryEstimate> EstimateTrainMemory(
    const TrainMemoryInput& in);

}  // namespace chunkzero

#endif  // CHUNKZERO_TOOLS_TRAIN_MEMORY_ESTIMATE_H_
