// What an engine holds and moves, worked out before anything is allocated
// (docs/DESIGN.md §7): bytes per parameter, the chunks' memory per rank,
// and the bus bytes of a step. Every figure depends only on the engine's
// options, the world, the micro-batches and how the parameters pack; what
// a model holds besides (its activations) is the model's to add.
//
//   ParameterPacking packing{/*parameters=*/psi, /*largest_tensor=*/v * c};
//   ChunkMemory m = EstimateChunkMemory(options, packing, world, micro);
//   double bus = ExpectedCommBytesPerStep(options, world, micro, psi);
#ifndef CHUNKZERO_ENGINE_COST_MODEL_H_
#define CHUNKZERO_ENGINE_COST_MODEL_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "engine/engine_options.h"

namespace chunkzero {

// Model-data bytes per parameter the engine keeps over all ranks: the
// compute-dtype chunk (grads reuse it) + the f32 master + the optimizer's
// states (none for SGD without momentum, as PyTorch's default) + the f32
// accumulation buffer with more than one micro-batch. 14 for f16 AdamW.
int64_t ModelBytesPerParameter(const EngineOptions& options, int micro_batches);
// The same for replicated data parallelism without grad reuse: a separate
// compute-dtype grad too (16 for f16 AdamW).
int64_t ReplicatedBytesPerParameter(const EngineOptions& options,
                                    int micro_batches);
// §7's bus bytes per rank and step for `parameters` (Ψ): replicated
// 2 c Ψ (N-1)/N, sharded 3 c Ψ (N-1)/N, owner 3 c Ψ (two broadcasts and a
// reduce, bus factor 1; 0 on one rank), for c the compute dtype's size;
// times the micro-batches.
double ExpectedCommBytesPerStep(const EngineOptions& options, int world_size,
                                int micro_batches, int64_t parameters);

// How the parameters pack into chunks.
struct ParameterPacking {
  double parameters = 0;      // Ψ, elements.
  double largest_tensor = 0;  // Elements of the largest parameter.
  // Chunks of options.chunk_size the parameters fill when packed in their
  // order (chunk/chunk_packing.h); 0: not known, counted as one chunk more
  // than the parameters fill (a packing of tensors that do not divide the
  // chunk size can exceed that by far).
  int64_t num_chunks = 0;
  // The parameters of the largest block a recomputation uses again
  // (options.activation_checkpointing): its chunks stay from the
  // recomputed forward to the block's backward.
  double block_parameters = 0;
};

// One rank's chunk-related bytes.
struct ChunkMemory {
  double chunks = 0;  // Compute-dtype chunks at rest and in flight.
  // Of `chunks`: what is held between uses, and the host scratch the
  // collectives reduce 16-bit grads in (never on the compute device).
  double chunks_at_rest = 0;
  double reduce_scratch = 0;
  // The chunks gathered (or brought from the host) for use at once, at
  // most 2 max_prefetch + 3 (and never more than there are): the one
  // computing, a tied weight's, one being reduced, the chunks gathered
  // ahead for the next ops and those the previous ops gathered ahead and
  // have not released yet. Part of `chunks` beyond those at rest, except
  // for the replicated layout, whose chunks are all at rest where they
  // compute.
  double in_flight = 0;
  // This rank's shards of the chunks in flight (sharded layout): what a
  // device holds on top of the gathered chunks when those chunks also rest
  // there (offload kAuto), since a chunk's shard cannot move while it is
  // being gathered or used.
  double in_flight_shards = 0;
  double optimizer = 0;  // f32 masters, optimizer states, accumulation.
  // OffloadPolicy::kNvme: the masters and states on disk instead (each
  // chunk's padded to the disk's 4 KiB blocks); `optimizer` then holds the
  // accumulation, the update's staging (three pieces of each of the master
  // and states, optim/internal/disk_staging.h) and the tier's bounce
  // buffer.
  double disk = 0;
  // What one compute chunk holds at rest on this rank (its shard, or a
  // holder's whole chunk): the unit the host tier moves to disk and back.
  double rest_per_chunk = 0;
};

// REQUIRES: world_size, micro_batches >= 1; parameters, largest_tensor > 0.
// Without a chunk size (one chunk per tensor) the chunk is the largest
// tensor and nothing is padded.
ChunkMemory EstimateChunkMemory(const EngineOptions& options,
                                const ParameterPacking& packing, int world_size,
                                int micro_batches);

// Of `m`, the bytes on the compute device when the parameter chunks rest
// as `placement` says: every compute chunk but the host's reduce scratch;
// with kParams only those in use; with kAuto also their shards (the least
// it holds, every resting chunk sent back to the host).
double DeviceChunkBytes(const ChunkMemory& m, OffloadPolicy placement);
// DeviceChunkBytes, plus the masters and optimizer states unless offloaded
// (kNone): the model data a step keeps on the device at its peak.
double DeviceModelDataBytes(const ChunkMemory& m, OffloadPolicy placement);

// How much of the model data an offload policy keeps on the device, as an
// order: none 3 (most), optimizer and nvme 2, auto 1, params 0 (least).
int OffloadDeviceWeight(OffloadPolicy offload);

// How the parameter chunks rest under `options`: the offload policy, but
// kAuto's placement for three tiers (kNvme with a host limit, computing
// on a device).
OffloadPolicy ParamPlacement(const EngineOptions& options);

// Refuses, before anything is allocated, a device_memory_limit that cannot
// hold a step's peak on the device: the compute chunks at rest and in
// flight, the masters and the optimizer states unless offloaded (the
// states are made at the first update, so a limit they do not fit would
// fail only then), plus `model_bytes` (the model's buffers, counted in the
// engine's tracker). ResourceExhausted naming the parts and the first
// lighter layout that fits (EngineOptions::layout, EngineOptions::offload),
// or saying that none does. Sizes: the parameters' elements in the order
// they pack. OK without a limit.
[[nodiscard]] absl::Status CheckDeviceLimit(const EngineOptions& options,
                                            const std::vector<int64_t>& sizes,
                                            int world_size,
                                            int64_t model_bytes);

}  // namespace chunkzero

#endif  // CHUNKZERO_ENGINE_COST_MODEL_H_
