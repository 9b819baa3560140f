// What the engine measures per step (Engine::Step returns it), and the
// fixed list of integers one rank's figures travel in to the others. The
// train job's metrics JSON (tools/train/step_metrics.h) is one encoding.
//
//   std::vector<int64_t> v =
//       EncodeRankStepMetrics(MeasureRankStep(tracker, recording.Snapshot()));
//   RankStepMetrics back = DecodeRankStepMetrics(v);   // equal to the input
#ifndef CHUNKZERO_ENGINE_STEP_STATS_H_
#define CHUNKZERO_ENGINE_STEP_STATS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "comm/recording_process_group.h"
#include "tensor/memory/memory_tracker.h"

namespace chunkzero {

// One rank's figures for one step.
struct RankStepMetrics {
  // Peak payload bytes since the start, by category ("param", "master",
  // "optim_state", "grad_accum", "comm", ...), summed over devices.
  std::map<std::string, int64_t> peak_bytes;
  // The peak of all categories on all devices together
  // (MemoryTracker::PeakAll).
  int64_t peak_total_bytes = 0;
  // The peaks on the compute device and in host memory (device_peak_bytes
  // and host_peak_bytes in the JSON).
  int64_t peak_device_bytes = 0;
  int64_t peak_host_bytes = 0;
  // What this rank's chunks copied in this step from host memory to the
  // device and back (h2d_bytes, d2h_bytes; ChunkManager::TransferredBytes):
  // 0 unless the parameters rest on the host.
  int64_t h2d_bytes = 0;
  int64_t d2h_bytes = 0;
  // With the masters and states on disk (OffloadPolicy::kNvme): the bytes
  // this rank read and wrote there in this step, the time it waited for
  // the disk, and the time the disk had its I/O in flight (DiskTierStats;
  // the travel encoding keeps microseconds).
  bool disk = false;
  int64_t disk_read_bytes = 0;
  int64_t disk_written_bytes = 0;
  double disk_wait_s = 0;
  double disk_busy_s = 0;
  // The disk's time hidden behind this rank's compute: busy, not waited.
  double disk_hidden_s() const {
    return disk_busy_s > disk_wait_s ? disk_busy_s - disk_wait_s : 0;
  }
  // Bus bytes (DESIGN.md §7) this rank sent and received in this step, by
  // collective ("all_gather", "reduce_scatter", ...).
  std::map<std::string, int64_t> comm_bytes;
};

// One step of the whole job (Engine::Step): the same on every rank.
struct StepMetrics {
  int64_t step = 0;   // 1-based: the number of steps done after this one.
  int64_t steps = 0;  // The steps the caller plans (Engine::Step leaves 0).
  double loss = 0;
  double lr = 0;
  double loss_scale = 1;
  bool skipped = false;
  double grad_norm = 0;
  double step_time_s = 0;
  // What a sample is, only the caller knows: Engine::Step leaves 0.
  double tokens_per_s = 0;
  // Rank 0's time in forward, backward (FinishBackward included), the
  // optimizer (AccumulateGrads included) and blocked in collectives.
  double forward_s = 0, backward_s = 0, optimizer_s = 0, comm_wait_s = 0;
  // Rank 0's chunks materialised again for recomputed forward scopes
  // (activation checkpointing), over the step's micro-batches.
  int recompute_accesses = 0;
  // The model's activations of one micro-batch: kept from forward to
  // backward, and produced again in backward. Only the model knows them:
  // Engine::Step leaves 0.
  int64_t activation_kept_bytes = 0;
  int64_t activation_recomputed_bytes = 0;
  std::vector<RankStepMetrics> ranks;
};

// The devices a rank's figures sum over: the host, and `device` when it is
// another one (each once).
std::vector<Device> MeasuredDevices(Device device);

// This rank's figures: peak payload bytes by category (host, plus `device`,
// the rank's compute device, where it held something; host memory once
// when `device` is the host), the bus bytes of `comm` by collective, and
// the step's host-device copies.
RankStepMetrics MeasureRankStep(const MemoryTracker& tracker,
                                const comm::RecordingSnapshot& comm,
                                int64_t h2d_bytes = 0, int64_t d2h_bytes = 0,
                                Device device = Device::Simulated(0));

// `m` as a fixed-length list of integers (the same length on every rank,
// for an all-gather): the peak of every category, the two totals, then
// (present, bytes) per collective kind.
std::vector<int64_t> EncodeRankStepMetrics(const RankStepMetrics& m);

// The inverse of EncodeRankStepMetrics. REQUIRES: `v` came from it.
RankStepMetrics DecodeRankStepMetrics(const std::vector<int64_t>& v);

}  // namespace chunkzero

#endif  // CHUNKZERO_ENGINE_STEP_STATS_H_
