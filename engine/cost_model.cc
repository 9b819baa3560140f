#include "engine/cost_model.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/system_memory.h"
#include "chunk/chunk_layout.h"
#include "chunk/chunk_packing.h"

namespace chunkzero {
namespace {

int64_t ComputeBytes(const EngineOptions& o) {
  return static_cast<int64_t>(ElementSize(o.precision));
}

// f32 states per parameter: SGD without momentum keeps none; Adam and AdamW
// keep exp_avg and exp_avg_sq.
int64_t StateCount(const EngineOptions& o) {
  if (o.optimizer.kind == OptimizerKind::kSgd) {
    return o.optimizer.momentum > 0 ? 1 : 0;
  }
  return 2;
}

// OffloadPolicy::kNvme moves the masters and states of `held` elements
// (a rank's at rest, `held_per_chunk` of each chunk) from `optimizer` to
// `disk`, padding each chunk's to 4 KiB, and leaves the staging of three
// chunks' in host memory.
void PutStatesOnDisk(const EngineOptions& o, const ParameterPacking& packing,
                     double chunk, double held, double held_per_chunk,
                     int micro_batches, ChunkMemory* m) {
  if (o.offload != OffloadPolicy::kNvme) return;
  const double groups = 1.0 + static_cast<double>(StateCount(o));
  const double chunks = packing.num_chunks > 0
                            ? static_cast<double>(packing.num_chunks)
                            : std::ceil(std::max(packing.parameters, 1.0) /
                                        std::max(chunk, 1.0)) +
                                  1;
  const double accumulation = micro_batches > 1 ? 4.0 : 0.0;
  m->disk = 4.0 * groups * held + 4096.0 * groups * chunks;
  // The update stages three pieces of each group (a chunk's held part, or
  // less); the tier's bounce buffer takes a region, at most 32 MiB.
  const double staging_sets = 3;
  const double piece = std::min(
      held_per_chunk, static_cast<double>(o.optimizer.disk_piece_elements));
  const double region = std::ceil(4.0 * held_per_chunk / 4096.0) * 4096.0;
  const double bounce = std::min(region, 32.0 * 1024 * 1024);
  m->optimizer = accumulation * held +
                 staging_sets * groups * (4.0 * piece + 4096.0) + bounce;
}

}  // namespace

int64_t ModelBytesPerParameter(const EngineOptions& o, int micro_batches) {
  return ComputeBytes(o) + 4 + 4 * StateCount(o) + (micro_batches > 1 ? 4 : 0);
}

int64_t ReplicatedBytesPerParameter(const EngineOptions& o, int micro_batches) {
  return ComputeBytes(o) + ModelBytesPerParameter(o, micro_batches);
}

double ExpectedCommBytesPerStep(const EngineOptions& o, int world_size,
                                int micro_batches, int64_t parameters) {
  // DESIGN.md §7.2: each element crosses the bus BusFactorPerStep times
  // per pass, in the compute dtype.
  const double per_pass = BusFactorPerStep(o.layout, world_size) *
                          static_cast<double>(ComputeBytes(o)) *
                          static_cast<double>(parameters);
  return per_pass * micro_batches;
}

ChunkMemory EstimateChunkMemory(const EngineOptions& o,
                                const ParameterPacking& packing, int world_size,
                                int micro_batches) {
  const double psi = packing.parameters;
  double chunk = packing.largest_tensor;
  double padded = psi;
  if (o.chunk_size.has_value()) {
    chunk = static_cast<double>(*o.chunk_size);
    // A packing wastes less than one chunk's worth of elements.
    padded = packing.num_chunks > 0
                 ? static_cast<double>(packing.num_chunks) * chunk
                 : psi + chunk;
  }
  const double element = static_cast<double>(ElementSize(o.precision));
  const double optimizer_bytes = static_cast<double>(
      ModelBytesPerParameter(o, micro_batches) - ComputeBytes(o));
  ChunkMemory m;
  // ZeroDdp's peak in chunks gathered at once, as measured for every
  // max_prefetch from 0 to 6 (tools/train's memory_estimate_test and
  // estimate_bound_test check the bound against the train job's own
  // accounting). Recomputation keeps a checkpointed block's chunks from its
  // forward again to its backward: the chunks a block spans, plus
  // max_prefetch + 2, then.
  double most_in_flight = 2.0 * o.max_prefetch + 3;
  const double block_chunks =
      std::ceil(std::max(packing.block_parameters, 1.0) / chunk);
  if (o.activation_checkpointing.enabled()) {
    most_in_flight =
        std::max(most_in_flight, o.max_prefetch + 2.0 + block_chunks);
  }
  m.in_flight = std::min(padded, most_in_flight * chunk) * element;
  if (o.layout == ChunkLayout::kReplicated) {
    m.chunks = element * padded;
    m.chunks_at_rest = m.chunks;
    m.optimizer = optimizer_bytes * padded;
    m.rest_per_chunk = element * chunk;
    PutStatesOnDisk(o, packing, chunk, padded, chunk, micro_batches, &m);
    return m;
  }
  // This rank's share at rest, plus the chunks in flight, plus the reduce
  // buffers.
  // Owners are given whole chunks, least loaded first: with a known packing
  // of equal chunks the busiest rank owns ceil(chunks / ranks) of them,
  // else at most one chunk more than its share.
  double owner_slack = o.layout == ChunkLayout::kOwner ? chunk : 0;
  double at_rest = padded * MeanRestFraction(o.layout, world_size);
  if (o.layout == ChunkLayout::kOwner && o.chunk_size.has_value() &&
      packing.num_chunks > 0) {
    owner_slack = 0;
    at_rest =
        std::ceil(static_cast<double>(packing.num_chunks) / world_size) * chunk;
  }
  m.chunks_at_rest = element * (at_rest + owner_slack);
  m.reduce_scratch = 2 * 4 * std::min(padded, chunk);
  // What is gathered on top of the chunks at rest. An owner computes on
  // its own chunks where they rest, so only the others' count; with
  // round-robin owners of equal chunks (a known packing) a rank owns at
  // least floor(m / ranks) of any m consecutive chunks. The chunks in
  // flight are consecutive in use order: 2 max_prefetch + 2 of them plus
  // the tied weight's chunk (the first) around the output layer, and a
  // checkpointed block's chunks with max_prefetch + 2 more while it is
  // computed again.
  double gathered = m.in_flight;
  if (o.layout == ChunkLayout::kOwner && o.chunk_size.has_value() &&
      packing.num_chunks > 0) {
    const double n = static_cast<double>(packing.num_chunks);
    const auto others = [&](double consecutive) {
      consecutive = std::min(consecutive, n);
      return consecutive - std::floor(consecutive / world_size);
    };
    const double tied = world_size > 1 ? 1 : 0;  // Rank 0 owns it.
    double chunks_gathered = others(2.0 * o.max_prefetch + 2) + tied;
    if (o.activation_checkpointing.enabled()) {
      chunks_gathered = std::max(chunks_gathered,
                                 others(o.max_prefetch + 2.0 + block_chunks));
    }
    gathered = std::min({most_in_flight, chunks_gathered, others(n)}) * chunk *
               element;
  }
  m.chunks = m.chunks_at_rest + gathered + m.reduce_scratch;
  if (o.layout == ChunkLayout::kSharded) {
    m.in_flight_shards = m.in_flight * MeanRestFraction(o.layout, world_size);
  }
  m.optimizer = optimizer_bytes * (at_rest + owner_slack);
  m.rest_per_chunk =
      element *
      (o.layout == ChunkLayout::kSharded ? chunk / world_size : chunk);
  PutStatesOnDisk(
      o, packing, chunk, at_rest + owner_slack,
      o.layout == ChunkLayout::kSharded ? chunk / world_size : chunk,
      micro_batches, &m);
  return m;
}

double DeviceChunkBytes(const ChunkMemory& m, OffloadPolicy placement) {
  switch (placement) {
    case OffloadPolicy::kParams:
      return m.in_flight;
    case OffloadPolicy::kAuto:
      return m.in_flight + m.in_flight_shards;
    default:
      return m.chunks - m.reduce_scratch;
  }
}

double DeviceModelDataBytes(const ChunkMemory& m, OffloadPolicy placement) {
  const double chunks = DeviceChunkBytes(m, placement);
  return placement == OffloadPolicy::kNone ? chunks + m.optimizer : chunks;
}

OffloadPolicy ParamPlacement(const EngineOptions& o) {
  const bool three_tiers = o.offload == OffloadPolicy::kNvme &&
                           o.host_memory_limit > 0 && o.device != Device::Cpu();
  return three_tiers ? OffloadPolicy::kAuto : o.offload;
}

int OffloadDeviceWeight(OffloadPolicy offload) {
  switch (offload) {
    case OffloadPolicy::kNone:
      return 3;
    case OffloadPolicy::kOptimizer:
    case OffloadPolicy::kNvme:
      return 2;
    case OffloadPolicy::kAuto:
      return 1;
    case OffloadPolicy::kParams:
      return 0;
  }
  return 3;
}

namespace {

// The placement whose device bytes `o` needs at least: auto placement may
// always fall back to params' (every chunk resting on the host).
OffloadPolicy LeastPlacement(const EngineOptions& o) {
  const OffloadPolicy placement = ParamPlacement(o);
  return placement == OffloadPolicy::kAuto ? OffloadPolicy::kParams : placement;
}

// The device bytes `o` needs at least, the model's buffers left out.
double LeastDeviceBytes(const EngineOptions& o, const ParameterPacking& packing,
                        int world_size) {
  return DeviceModelDataBytes(EstimateChunkMemory(o, packing, world_size, 1),
                              LeastPlacement(o));
}

}  // namespace

absl::Status CheckDeviceLimit(const EngineOptions& o,
                              const std::vector<int64_t>& sizes, int world_size,
                              int64_t model_bytes) {
  if (o.device_memory_limit <= 0 || sizes.empty()) return absl::OkStatus();
  ParameterPacking packing;
  for (int64_t n : sizes) {
    packing.parameters += static_cast<double>(n);
    packing.largest_tensor =
        std::max(packing.largest_tensor, static_cast<double>(n));
  }
  if (o.chunk_size.has_value() && *o.chunk_size > 0) {
    absl::StatusOr<ChunkPlan> plan = PlanChunks(sizes, *o.chunk_size);
    // A tensor past the chunk size: the chunk manager says so, naming it.
    if (!plan.ok()) return absl::OkStatus();
    packing.num_chunks = static_cast<int64_t>(plan->capacities.size());
  }
  const double limit = static_cast<double>(o.device_memory_limit);
  const double model = static_cast<double>(model_bytes);
  const ChunkMemory m = EstimateChunkMemory(o, packing, world_size, 1);
  const OffloadPolicy least = LeastPlacement(o);
  const double need = DeviceModelDataBytes(m, least) + model;
  if (need <= limit) return absl::OkStatus();
  std::string advice =
      "no layout fits: raise the limit or make the model's "
      "buffers smaller (a smaller batch)";
  const struct {
    ChunkLayout layout;
    OffloadPolicy offload;
  } lighter[] = {{ChunkLayout::kSharded, o.offload},
                 {o.layout, OffloadPolicy::kOptimizer},
                 {ChunkLayout::kSharded, OffloadPolicy::kOptimizer},
                 {o.layout, OffloadPolicy::kParams},
                 {ChunkLayout::kSharded, OffloadPolicy::kParams}};
  for (const auto& [layout, offload] : lighter) {
    if (layout == o.layout && offload == o.offload) continue;
    // Only lighter: never advise bringing offloaded state back.
    if (OffloadDeviceWeight(offload) > OffloadDeviceWeight(o.offload)) continue;
    EngineOptions other = o;
    other.layout = layout;
    other.offload = offload;
    if (LeastDeviceBytes(other, packing, world_size) + model > limit) continue;
    advice = "try";
    if (layout != o.layout) {
      absl::StrAppend(&advice,
                      " EngineOptions::layout=", ChunkLayoutName(layout));
    }
    if (offload != o.offload) {
      absl::StrAppend(&advice,
                      " EngineOptions::offload=", OffloadPolicyName(offload));
    }
    break;
  }
  const bool states_on_device = least == OffloadPolicy::kNone;
  return absl::ResourceExhaustedError(absl::StrCat(
      "EngineOptions::device_memory_limit is ", FormatBytes(limit),
      ", but a step needs about ", FormatBytes(need), " on ",
      o.device.ToString(), " (compute chunks ",
      FormatBytes(DeviceChunkBytes(m, least)),
      states_on_device ? absl::StrCat(", masters and optimizer states ",
                                      FormatBytes(m.optimizer),
                                      " (the states made at the first update)")
                       : "",
      ", the model's buffers ", FormatBytes(model), "); ", advice));
}

}  // namespace chunkzero
