#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "comm/agree.h"
#include "comm/gather.h"
#include "comm/types.h"
#include "engine/cost_model.h"

namespace chunkzero {

namespace {

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

}  // namespace

Engine::Engine(comm::ProcessGroup& group, const EngineOptions& options,
               const Placement& placement, MemoryTracker* tracker)
    : group_(group),
      options_(options),
      placement_(placement),
      own_tracker_(tracker == nullptr ? std::make_unique<MemoryTracker>()
                                      : nullptr),
      tracker_(tracker == nullptr ? own_tracker_.get() : tracker),
      recorded_(group) {}

Engine::~Engine() = default;

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(
    comm::ProcessGroup& group, Module& model, const EngineOptions& options,
    MemoryTracker* tracker) {
  CZ_ASSIGN_OR_RETURN(const Placement placement, PlaceMemory(options));
  // The model learns which blocks recompute before its first forward; one
  // that cannot recompute is refused only when asked to.
  if (auto* checkpointable = dynamic_cast<ActivationCheckpointable*>(&model)) {
    CZ_RETURN_IF_ERROR(checkpointable->SetActivationCheckpointing(
                           options.activation_checkpointing),
                       "EngineOptions::activation_checkpointing");
  } else if (options.activation_checkpointing.enabled()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "EngineOptions::activation_checkpointing is ",
        options.activation_checkpointing.ToString(),
        ", but the model does not recompute its blocks (it does not "
        "implement ActivationCheckpointable)"));
  }
  std::unique_ptr<Engine> engine(
      new Engine(group, options, placement, tracker));
  if (placement.limited.has_value()) {
    // Before anything is allocated: the chunks, masters and states (made
    // at the first update) and the model's buffers counted so far must fit.
    std::vector<int64_t> sizes;
    const std::vector<Parameter*> params = model.Parameters();
    if (options.first_use_order.size() == params.size()) {
      std::map<std::string, int64_t> by_name;
      for (Parameter* p : params) by_name[p->name()] = p->numel();
      for (const std::string& name : options.first_use_order) {
        sizes.push_back(by_name.count(name) ? by_name[name] : 0);
      }
    } else {
      for (Parameter* p : params) sizes.push_back(p->numel());
    }
    CZ_RETURN_IF_ERROR(
        CheckDeviceLimit(options, sizes, group.size(),
                         engine->tracker_->CurrentTotal(*placement.limited)));
    engine->tracker_->SetLimit(*placement.limited, options.device_memory_limit);
  }
  if (placement.host_limited) {
    engine->tracker_->SetLimit(Device::Cpu(), options.host_memory_limit);
  }
  ChunkManagerOptions chunk_options = placement.chunks;
  if (options.offload == OffloadPolicy::kNvme) {
    absl::StatusOr<std::unique_ptr<ChunkDiskTier>> disk =
        ChunkDiskTier::Create(options.nvme_path, options.nvme_io);
    CZ_RETURN_IF_ERROR(disk.status(), "EngineOptions::nvme_path");
    engine->disk_ = *std::move(disk);
    engine->disk_->set_memory_tracker(engine->tracker_);
    chunk_options.disk = engine->disk_.get();
  }
  engine->chunks_ = std::make_unique<ChunkManager>(
      &engine->recorded_, chunk_options, engine->tracker_);
  ZeroDdpOptions ddp_options;
  ddp_options.compute_dtype = options.precision;
  ddp_options.max_prefetch = options.max_prefetch;
  ddp_options.first_use_order = options.first_use_order;
  ddp_options.find_unused_parameters = options.find_unused_parameters;
  ddp_options.master_device = placement.masters;
  ddp_options.master_disk = engine->disk_.get();
  CZ_ASSIGN_OR_RETURN(
      engine->ddp_,
      ZeroDdp::Create(&model, engine->chunks_.get(), ddp_options));
  ZeroOptimizerOptions optimizer_options = options.optimizer;
  optimizer_options.offload = options.offload;
  optimizer_options.disk = engine->disk_.get();
  CZ_ASSIGN_OR_RETURN(
      engine->optimizer_,
      ZeroOptimizer::Create(engine->ddp_.get(), optimizer_options));
  // From here on the hooks run only inside Step and Evaluate.
  engine->ddp_->set_hook_window(ZeroDdp::HookWindow::kIdle);
  // Step 1's traffic starts here: the broadcast of the initial weights is
  // not a step's.
  engine->recorded_.Reset();
  return engine;
}

absl::StatusOr<double> Engine::Evaluate(int micro_batches,
                                        const ForwardFn& forward) {
  if (micro_batches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Engine::Evaluate: ", micro_batches,
                     " micro-batches; a pass runs at least one"));
  }
  CZ_RETURN_IF_ERROR(ddp_->BeginEvaluation());
  // What it moves is not a step's traffic.
  const comm::RecordingSnapshot before = recorded_.SnapshotAndReset();
  double loss = 0;
  absl::Status status;
  for (int m = 0; m < micro_batches && status.ok(); ++m) {
    absl::StatusOr<double> l = forward(*ddp_, m);
    if (l.ok()) {
      loss += *l;
    } else {
      status = absl::Status(
          l.status().code(),
          absl::StrCat(l.status().message(), "; evaluation micro-batch ", m));
    }
  }
  const absl::Status ended = ddp_->EndEvaluation();
  if (status.ok()) status = ended;
  recorded_.Restore(before);
  CZ_RETURN_IF_ERROR(Agree(status, "another rank's evaluation failed"));
  std::vector<float> sum = {static_cast<float>(loss / micro_batches)};
  comm::AllReduceOptions sum_options;
  sum_options.timeout = options_.comm_timeout;
  CZ_RETURN_IF_ERROR(
      comm::AllReduce(group_, comm::MutableBuffer::Of(sum), sum_options));
  if (!std::isfinite(sum[0])) {
    return absl::FailedPreconditionError(
        absl::StrCat("the evaluation loss is ", sum[0] / world_size(),
                     ": the weights or the data are not finite"));
  }
  return sum[0] / world_size();
}

absl::StatusOr<StepMetrics> Engine::Step(int micro_batches,
                                         const ForwardFn& forward,
                                         const BackwardFn& backward) {
  if (micro_batches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Engine::Step: ", micro_batches,
                     " micro-batches; a step runs at least one"));
  }
  // The hooks are open for this step only.
  struct Window {
    ZeroDdp& ddp;
    explicit Window(ZeroDdp& d) : ddp(d) {
      ddp.set_hook_window(ZeroDdp::HookWindow::kTraining);
    }
    ~Window() { ddp.set_hook_window(ZeroDdp::HookWindow::kIdle); }
  } window(*ddp_);
  const absl::Time start = absl::Now();
  absl::Duration forward_time, backward_time, optimizer_time;
  double loss = 0;
  int recompute_accesses = 0;
  for (int m = 0; m < micro_batches; ++m) {
    absl::Time t = absl::Now();
    CZ_ASSIGN_OR_RETURN(const double l, forward(*ddp_, m));
    loss += l;
    forward_time += absl::Now() - t;
    t = absl::Now();
    CZ_RETURN_IF_ERROR(
        backward(*ddp_, m, static_cast<float>(optimizer_->loss_scale())));
    CZ_RETURN_IF_ERROR(ddp_->FinishBackward());
    recompute_accesses += ddp_->last_step_counters().recompute_accesses;
    backward_time += absl::Now() - t;
    if (m + 1 < micro_batches) {
      t = absl::Now();
      CZ_RETURN_IF_ERROR(optimizer_->AccumulateGrads());
      optimizer_time += absl::Now() - t;
    }
  }
  absl::Time t = absl::Now();
  CZ_ASSIGN_OR_RETURN(const StepResult result, optimizer_->Step());
  optimizer_time += absl::Now() - t;
  ++step_;
  const absl::Duration step_time = absl::Now() - start;
  const comm::RecordingSnapshot comm = recorded_.SnapshotAndReset();

  // The global loss, and every rank's figures to every rank: on the raw
  // group, so this bookkeeping is not counted as training traffic.
  std::vector<float> sum = {static_cast<float>(loss / micro_batches)};
  comm::AllReduceOptions sum_options;
  sum_options.timeout = options_.comm_timeout;
  CZ_RETURN_IF_ERROR(
      comm::AllReduce(group_, comm::MutableBuffer::Of(sum), sum_options));
  // Every rank sees the same sum. A loss that is not finite cannot come
  // back (the forward does not depend on the loss scale): the weights or
  // the data are not finite any more.
  if (!std::isfinite(sum[0])) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the loss is ", sum[0] / world_size(),
        ": the weights are no longer finite (the run diverged; a lower "
        "learning rate may help)"));
  }
  const ChunkManager::Transfers moved = chunks_->TransferredBytes();
  const int64_t h2d = moved.rest_to_device - transfers_.rest_to_device;
  const int64_t d2h = moved.device_to_rest - transfers_.device_to_rest;
  transfers_ = moved;
  RankStepMetrics mine =
      MeasureRankStep(*tracker_, comm, h2d, d2h, options_.device);
  if (disk_ != nullptr) {
    const DiskTierStats now = disk_->stats();
    mine.disk = true;
    mine.disk_read_bytes = now.bytes_read - disk_stats_.bytes_read;
    mine.disk_written_bytes = now.bytes_written - disk_stats_.bytes_written;
    mine.disk_wait_s = now.seconds_waited - disk_stats_.seconds_waited;
    mine.disk_busy_s = now.seconds_busy - disk_stats_.seconds_busy;
    disk_stats_ = now;
  }
  CZ_ASSIGN_OR_RETURN(const std::vector<std::vector<int64_t>> figures,
                      comm::AllGatherInt64(group_, EncodeRankStepMetrics(mine),
                                           options_.comm_timeout));
  StepMetrics m;
  m.step = step_;
  m.loss = sum[0] / world_size();
  m.lr = result.lr;
  m.loss_scale = result.loss_scale;
  m.skipped = result.skipped;
  m.grad_norm = result.grad_norm;
  m.step_time_s = Seconds(step_time);
  m.forward_s = Seconds(forward_time);
  m.backward_s = Seconds(backward_time);
  m.optimizer_s = Seconds(optimizer_time);
  m.comm_wait_s = Seconds(comm.blocked);
  m.recompute_accesses = recompute_accesses;
  for (const std::vector<int64_t>& f : figures) {
    m.ranks.push_back(DecodeRankStepMetrics(f));
  }
  return m;
}

absl::Status Engine::Save(const std::string& dir,
                          const std::map<std::string, std::string>& config) {
  return SaveShardedCheckpoint(group_, *ddp_, *optimizer_, dir, step_, config,
                               options_.comm_timeout);
}

absl::StatusOr<CheckpointMeta> Engine::Resume(
    const std::string& dir, const std::map<std::string, std::string>& config,
    absl::string_view source) {
  const std::string named = source.empty() ? dir : std::string(source);
  // Another job may be saving into `dir` (checkpoint/checkpoint.h): each
  // rank's read is whole, but the ranks, reading one after the other, may
  // read different commits. So every rank checks what it loaded, the ranks
  // compare which commit that was, and if they differ all read again (the
  // saver commits every few steps, so a second read agrees).
  constexpr int kReads = 3;
  for (int read = 1;; ++read) {
    absl::StatusOr<CheckpointMeta> meta =
        LoadShardedCheckpoint(dir, *optimizer_, options_.comm_timeout);
    absl::Status mine = meta.status();
    if (!mine.ok()) {
      mine =
          absl::Status(mine.code(), absl::StrCat(mine.message(), "; ", named));
    } else {
      for (const auto& [key, value] : config) {
        const auto it = meta->config.find(key);
        if (it != meta->config.end() && it->second != value) {
          mine = absl::InvalidArgumentError(
              absl::StrCat(named, " was saved with ", key, "=", it->second,
                           ", this run has ", key, "=", value));
          break;
        }
      }
      // An f16 engine saves its loss scale; 0 (what f32 and bf16 engines
      // save) would leave the scaler at its initial scale without a word.
      if (mine.ok() && options_.precision == DType::kF16 &&
          meta->loss_scale == 0) {
        mine = absl::DataLossError(absl::StrCat(
            named, ": checkpoint ", dir,
            ": manifest field loss_scale = 0 says no loss scaler saved it, "
            "but an f16 run keeps one"));
      }
    }
    CZ_RETURN_IF_ERROR(Agree(
        mine, absl::StrCat("another rank could not resume from ", named)));
    CZ_ASSIGN_OR_RETURN(
        const std::vector<std::vector<int64_t>> loaded,
        comm::AllGatherInt64(group_, {meta->step, meta->manifest_crc32c},
                             options_.comm_timeout));
    if (std::all_of(loaded.begin(), loaded.end(),
                    [&](const auto& l) { return l == loaded[0]; })) {
      step_ = meta->step;
      // What the load moved is not a step's traffic.
      recorded_.Reset();
      return meta;
    }
    if (read == kReads) {
      std::vector<std::string> steps;
      for (size_t r = 0; r < loaded.size(); ++r) {
        steps.push_back(absl::StrCat("rank ", r, " step ", loaded[r][0]));
      }
      return absl::AbortedError(absl::StrCat(
          named, ": the ranks read different checkpoints ", kReads,
          " times in a row (the last time ", absl::StrJoin(steps, ", "),
          "): another job keeps committing into it; resume from a copy of "
          "it, or once that job has stopped"));
    }
  }
}

absl::StatusOr<std::map<std::string, Tensor>> Engine::GatherWeights(
    bool all_ranks) {
  return ddp_->GatherStateDict(all_ranks);
}

absl::Status Engine::Agree(const absl::Status& mine, absl::string_view others) {
  return comm::AgreeOnStatus(group_, mine, others, options_.comm_timeout);
}

int64_t Engine::AtRestBytes() const {
  int64_t at_rest = 0;
  for (Device d : MeasuredDevices(options_.device)) {
    at_rest += tracker_->CurrentTotal(d) -
               tracker_->Current(d, MemoryCategory::kActivation);
  }
  return at_rest;
}

}  // namespace chunkzero
