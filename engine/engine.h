// Engine: trains any model with chunked ZeRO on one rank of a process
// group. It builds and owns the ChunkManager, the ZeroDdp and the
// ZeroOptimizer, places their memory from one offload policy
// (engine_options.h), and runs the step.
//
//   MyModel model(...);                         // a Module (ddp/parameter.h)
//   CZ_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
//                       Engine::Create(group, model, options));
//   for (int step = 0; step < steps; ++step) {
//     CZ_ASSIGN_OR_RETURN(
//         StepMetrics m,
//         engine->Step(
//             micro_batches,
//             [&](ParamHooks& hooks, int micro) -> absl::StatusOr<double> {
//               return model.Forward(hooks, batch(step, micro));
//             },
//             [&](ParamHooks& hooks, int micro, float loss_scale) {
//               return model.Backward(hooks, loss_scale);
//             }));
//   }
//
// The model contract is ddp/param_hooks.h's: the model lists its
// parameters (Module::Parameters, in declaration order), wraps every use of
// a parameter in forward and backward in the hooks it is handed, and hands
// each use's f32 gradient over with HandGrad, its loss seeded with
// `loss_scale`. Nothing here knows what the model computes.
//
// Activation checkpointing (EngineOptions::activation_checkpointing) is
// the model's to apply: Create hands the option to a model that implements
// ActivationCheckpointable (engine/activation_checkpointing.h), whose
// recomputed forward then runs through the same hooks inside backward; the
// ZeroDdp gathers the chunks again for it and, from step 2, prefetches by
// the schedule step 1 ran (ddp/zero_ddp.h).
//
// Create is collective: every rank calls it with the same options and a
// model with the same parameters; rank 0's values win (they are broadcast).
// Load any starting weights into the model before Create. From then on the
// parameters' data() are views of this rank's chunks, materialised only
// between the hooks.
//
// Thread-safety: one Engine per rank, used by that rank's thread. The
// group, the model and the tracker passed to Create must outlive it; a
// model that counts its working buffers in the tracker (see memory())
// must be destroyed after the engine and before the tracker.
#ifndef CHUNKZERO_ENGINE_ENGINE_H_
#define CHUNKZERO_ENGINE_ENGINE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "checkpoint/sharded_checkpoint.h"
#include "chunk/chunk_disk_tier.h"
#include "chunk/chunk_manager.h"
#include "comm/process_group.h"
#include "comm/recording_process_group.h"
#include "ddp/param_hooks.h"
#include "ddp/parameter.h"
#include "ddp/zero_ddp.h"
#include "engine/engine_options.h"
#include "engine/step_stats.h"
#include "optim/zero_optimizer.h"
#include "tensor/memory/memory_tracker.h"
#include "tensor/tensor.h"

namespace chunkzero {

class Engine {
 public:
  // Runs this rank's forward of micro-batch `micro` through `hooks` and
  // returns its loss.
  using ForwardFn =
      std::function<absl::StatusOr<double>(ParamHooks& hooks, int micro)>;
  // Runs the backward of the forward just run, seeding d(loss) with
  // `loss_scale`, handing every grad to `hooks`.
  using BackwardFn = std::function<absl::Status(ParamHooks& hooks, int micro,
                                                float loss_scale)>;

  // Builds this rank's engine (collective). `tracker` counts what the
  // engine's chunks (and a model that reports to it) hold, and carries the
  // device memory limit; null: the engine keeps its own. InvalidArgument
  // for options PlaceMemory refuses or ZeroDdp/ZeroOptimizer refuse (an
  // empty model, duplicate parameter names, bad optimizer options) and for
  // activation checkpointing the model cannot apply,
  // ResourceExhausted when the chunks do not fit the device limit.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Engine>> Create(
      comm::ProcessGroup& group, Module& model, const EngineOptions& options,
      MemoryTracker* tracker = nullptr);

  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // One optimizer step over `micro_batches` micro-batches (collective):
  // for each, `forward`, then `backward`, then the chunk-wise reduction of
  // its grads (FinishBackward) and, but for the last, their accumulation;
  // then the optimizer step. Returns the step's figures on every rank: the
  // loss is the mean over micro-batches and ranks; `ranks` holds every
  // rank's memory and traffic (gathered on the uncounted group). The
  // times are this rank's. FailedPrecondition when the loss is not finite
  // (the weights diverged); the forward's, backward's and optimizer's
  // errors as they come, prefixed with the micro-batch.
  [[nodiscard]] absl::StatusOr<StepMetrics> Step(int micro_batches,
                                                 const ForwardFn& forward,
                                                 const BackwardFn& backward);

  // A forward-only pass over `micro_batches` micro-batches (collective), to
  // evaluate between steps: `forward` runs through the hooks as in Step,
  // its chunks gathered and freed as there, but it counts no use, takes no
  // grad and runs no optimizer (ZeroDdp::BeginEvaluation); the next Step
  // is bit for bit the Step without it, in every layout, precision,
  // offload mode and tier. Returns the mean loss over micro-batches and
  // ranks, as Step does. FailedPrecondition inside a Step, for a backward
  // hook or HandGrad in `forward`, or a loss that is not finite; the
  // forward's errors (on every rank: the ranks agree on the outcome).
  // Anywhere but in Step and Evaluate the hooks refuse every call, naming
  // the parameter: a forward of one's own between steps would count as a
  // use the next step's backward never pays back.
  [[nodiscard]] absl::StatusOr<double> Evaluate(int micro_batches,
                                                const ForwardFn& forward);

  // Saves a checkpoint of every rank's optimizer shard and a manifest with
  // `config` and the engine's step count into `dir` (collective;
  // checkpoint/sharded_checkpoint.h): a save that fails anywhere fails on
  // every rank and leaves the previous checkpoint whole.
  [[nodiscard]] absl::Status Save(
      const std::string& dir, const std::map<std::string, std::string>& config);

  // Loads the checkpoint committed in `dir` (any world size or layout) and
  // continues from its step (collective). Its manifest's config must agree
  // with `config` on every key both have: InvalidArgument naming the key
  // otherwise. An f16 engine refuses a checkpoint without a loss scale
  // (DataLoss). Another job may be committing into `dir`: the ranks compare
  // what they loaded and read again when it differs, up to three times
  // (then Aborted). `source` names the checkpoint in errors (e.g. the flag
  // that gave it); empty: `dir`.
  [[nodiscard]] absl::StatusOr<CheckpointMeta> Resume(
      const std::string& dir, const std::map<std::string, std::string>& config,
      absl::string_view source = "");

  // The full f32 parameters by name, on rank 0 (empty elsewhere), or on
  // every rank with `all_ranks` (collective).
  [[nodiscard]] absl::StatusOr<std::map<std::string, Tensor>> GatherWeights(
      bool all_ranks = false);

  // All ranks go on or fail together (comm/agree.h): `mine` everywhere it
  // failed, else `others` on the ranks where it did not.
  [[nodiscard]] absl::Status Agree(const absl::Status& mine,
                                   absl::string_view others);

  // Payload bytes the engine holds between steps (every chunk at rest:
  // shards, masters, states, buffers), without the model's working buffers.
  int64_t AtRestBytes() const;

  int rank() const { return group_.rank(); }
  int world_size() const { return group_.size(); }
  // Optimizer steps done, those of a resumed checkpoint included.
  int64_t step() const { return step_; }
  const EngineOptions& options() const { return options_; }
  const Placement& placement() const { return placement_; }
  // The process group as given: collectives on it are not counted in the
  // step's traffic (the engine's own go through a recording wrapper).
  comm::ProcessGroup& group() const { return group_; }
  // What the engine's memory is counted in, with the device limit. A model
  // may count its working buffers here (category kActivation).
  MemoryTracker& memory() const { return *tracker_; }
  // The parts, for what the step does not cover.
  ChunkManager& chunks() const { return *chunks_; }
  ZeroDdp& ddp() const { return *ddp_; }
  ZeroOptimizer& optimizer() const { return *optimizer_; }
  // The disk the masters and states rest on (OffloadPolicy::kNvme), or
  // null.
  const ChunkDiskTier* disk() const { return disk_.get(); }

 private:
  Engine(comm::ProcessGroup& group, const EngineOptions& options,
         const Placement& placement, MemoryTracker* tracker);

  comm::ProcessGroup& group_;
  const EngineOptions options_;
  const Placement placement_;
  // Declared before the parts that use them, so destroyed after them.
  std::unique_ptr<MemoryTracker> own_tracker_;
  MemoryTracker* tracker_;
  comm::RecordingProcessGroup recorded_;
  // Outlives the chunks that rest on it.
  std::unique_ptr<ChunkDiskTier> disk_;
  std::unique_ptr<ChunkManager> chunks_;
  std::unique_ptr<ZeroDdp> ddp_;
  std::unique_ptr<ZeroOptimizer> optimizer_;
  // The chunks' host-device copies and the disk's traffic up to the last
  // step, for its figures.
  ChunkManager::Transfers transfers_;
  DiskTierStats disk_stats_;
  int64_t step_ = 0;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_ENGINE_ENGINE_H_
