// ZeroOptimizer: the fp16/fp32 mixed-precision optimizer over a ZeroDdp
// (docs/DESIGN.md §5, step 5).
//
//   ZeroOptimizerOptions options;                  // AdamW, lr 1e-3
//   options.max_grad_norm = 1.0;
//   CZ_ASSIGN_OR_RETURN(std::unique_ptr<ZeroOptimizer> opt,
//                       ZeroOptimizer::Create(ddp.get(), options));
//   for (int step = 0; step < steps; ++step) {
//     for (int m = 0; m < micro_batches; ++m) {
//       model.Forward(*ddp, batch[m]);
//       model.Backward(*ddp, /*loss_grad=*/opt->loss_scale());
//       CZ_RETURN_IF_ERROR(ddp->FinishBackward());
//       if (m + 1 < micro_batches) CZ_RETURN_IF_ERROR(opt->AccumulateGrads());
//     }
//     CZ_ASSIGN_OR_RETURN(StepResult r, opt->Step());   // r.skipped,
//     r.grad_norm
//   }
//
// Where things live. The fp32 masters are ZeroDdp's master group, paired with
// the compute-dtype chunks; the optimizer states (Adam's exp_avg and
// exp_avg_sq, SGD's momentum_buffer) are further groups paired with the
// masters, created at the first step: chunk-aligned and sharded exactly like
// the parameters, so each rank updates only what it holds (its shard; the
// whole chunk where it holds the whole chunk; nothing for an owner-layout
// chunk it does not own).
//
// A step (Step):
//  1. Each rank sums the squares of its part of the grads (for the
//     replicated layout, where every rank holds everything, each rank takes
//     a 1/world_size slice of every chunk), and one all-reduce of that sum
//     gives both the global norm and the overflow verdict: the sum is Inf or
//     NaN on every rank exactly when some grad is.
//  2. Overflow: the step is skipped on every rank, the compute-dtype weights
//     are restored from the masters (grad reuse overwrote them), and the loss
//     scale backs off.
//  3. Otherwise one fused pass per chunk unscales (1 / loss scale), averages
//     the micro-batches, clips (max_grad_norm / (norm + 1e-6) when the norm
//     exceeds it, as torch.nn.utils.clip_grad_norm_), updates masters and
//     states, and writes the new weights, rounded to the compute dtype, over
//     the grads in the compute-dtype chunks (optim/fused_kernels.h).
// After Step every parameter's grad() is empty. Non-finite grads with no
// scale left to lower mean the run has diverged (or its data or weights
// are not finite): in f32 and bf16 Step then fails at once, and in f16 after
// max_overflows_at_min_scale overflows in a row at the minimum scale; the
// weights are restored from the masters first, and nothing is updated
// (ZeroOptimizerOptions::skip_nonfinite_without_scaler keeps the old
// behaviour of skipping).
//
// Algorithms follow PyTorch (torch.optim.SGD / Adam / AdamW) with its
// defaults: betas (0.9, 0.999), eps 1e-8 outside the square root, bias
// correction, L2 decay added to the grad for Adam and SGD, decoupled decay
// (p *= 1 - lr * wd) for AdamW, weight decay 0.01 for AdamW and 0 otherwise;
// SGD momentum with dampening and Nesterov. The learning rate of a step is
// lr.At(iterations) (Step calls so far, skipped ones included, as a
// scheduler stepped every iteration); Adam's t counts updates taken.
//
// Gradient accumulation. Grad reuse leaves a micro-batch's grads where the
// weights were, so the next micro-batch could not run. AccumulateGrads adds
// this rank's part of the reduced grads to an fp32 buffer paired with the
// masters ("grad_accum", kGradAccum) and restores the weights from the
// masters in the same pass; Step folds the last micro-batch in and uses the
// mean over the micro-batches, so k micro-batches equal one batch k times
// larger (each micro-batch's loss being a mean over its rows).
//
// NVMe. With OffloadPolicy::kNvme the masters and states also leave host
// memory at the first step: the masters spill to the disk tier, then each
// state group as it is made (so that host memory never holds more than
// one of them). Update reads chunk k+1's masters and states while chunk k
// updates and writes chunk k-1's back (optim/internal/disk_staging.h);
// every other path (checkpoints, the accumulator's restore, the overflow
// restore, gathering) reads and writes them through the chunk, which
// brings them from disk and back (chunk/chunk.h).
//
// Offload. With OffloadPolicy::kOptimizer the states and the accumulation
// buffer are created in host memory and the masters move there at the first
// step (ZeRO-Offload; ZeroDdpOptions::master_device = Device::Cpu() creates
// them there from the start), while the compute-dtype chunks stay where the
// ChunkManager put them; MoveStates moves them at any step boundary. A
// parameter's data() and grad() are views of its chunk and follow every move.
// Kernels run on host-accessible memory; a compute-dtype chunk on a CUDA device
// is staged through host memory.
//
// Thread-safety: one optimizer per rank, used by that rank's thread, after
// FinishBackward. Step and GatherState are collective: every rank calls them
// in the same order. A compute-dtype chunk on a CUDA device is staged
// through host memory (HostRange in the .cc); that path has not run on a GPU
// yet.
#ifndef CHUNKZERO_OPTIM_ZERO_OPTIMIZER_H_
#define CHUNKZERO_OPTIM_ZERO_OPTIMIZER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "chunk/chunk_disk_tier.h"
#include "chunk/chunk_manager.h"
#include "ddp/zero_ddp.h"
#include "optim/fused_step.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer_state.h"
#include "tensor/device.h"
#include "tensor/memory/allocator.h"
#include "tensor/memory/async_copier.h"
#include "tensor/memory/caching_allocator.h"

namespace chunkzero {

enum class OptimizerKind { kSgd, kAdam, kAdamW };
// "sgd", "adam", "adamw".
absl::string_view OptimizerKindName(OptimizerKind kind);
[[nodiscard]] absl::StatusOr<OptimizerKind> ParseOptimizerKind(
    absl::string_view name);

enum class OffloadPolicy {
  kNone,       // Masters and states live with the compute-dtype chunks.
  kOptimizer,  // Masters and states on the CPU (ZeRO-Offload).
  // kOptimizer, and the compute-dtype parameter chunks rest on the CPU too
  // between uses (ChunkManagerOptions::rest_device; ZeRO-Infinity's
  // parameter offload): the device holds only the chunks being accessed.
  kParams,
  // kParams, but parameter chunks rest on the device while its memory
  // allows, the one used farthest ahead going back to the host when room is
  // needed (ChunkManagerOptions::auto_residency).
  kAuto,
  // kOptimizer, with the masters and states resting on disk between steps
  // (ZeroOptimizerOptions::disk; ZeRO-Infinity's offload_optimizer to
  // nvme): each chunk's are read ahead of its update and written back
  // while the next one updates. The accumulation buffer stays in host
  // memory.
  kNvme,
};

// "none", "optimizer", "params", "auto", "nvme" (the train job's --offload
// spells them so).
absl::string_view OffloadPolicyName(OffloadPolicy offload);

// True when the parameter chunks rest in host memory by default (kParams,
// kAuto).
inline bool OffloadsParams(OffloadPolicy offload) {
  return offload == OffloadPolicy::kParams || offload == OffloadPolicy::kAuto;
}

// What makes a set of rates unusable for `kind`: the option to blame ("lr",
// "min_lr" or "weight_decay"), its value and why. nullopt when they can be
// used. Checked: each finite and >= 0 and finite in f32 (what the update
// computes in: 1e39 is Inf there); min_lr <= lr; and with decoupled (AdamW) or
// SGD weight decay, lr x weight_decay < 2, else the decay factor 1 - lr x
// weight_decay is <= -1 and the weights grow without bound. `weight_decay`
// nullopt: the kind's default (AdamW 0.01, else 0).
struct OptimizerRateProblem {
  std::string option;
  double value = 0;
  std::string why;  // "is above lr (0.001): ..."
};
std::optional<OptimizerRateProblem> CheckOptimizerRates(
    OptimizerKind kind, double lr, double min_lr,
    std::optional<double> weight_decay);

struct ZeroOptimizerOptions {
  OptimizerKind kind = OptimizerKind::kAdamW;
  LrSchedule lr = LrSchedule::Constant(1e-3);
  double beta1 = 0.9;  // Adam, AdamW.
  double beta2 = 0.999;
  double eps = 1e-8;
  // std::nullopt: PyTorch's default for the kind (AdamW 0.01, else 0).
  std::optional<double> weight_decay;
  double momentum = 0;  // SGD.
  double dampening = 0;
  bool nesterov = false;
  // Clip the global L2 norm of the grads to this; 0 disables clipping.
  double max_grad_norm = 0;
  // The dynamic loss scale, used when the compute dtype is f16.
  LossScalerOptions loss_scaler;
  // Grads that are Inf or NaN on some rank, where no loss scale explains
  // them, end the run instead of being skipped for ever (see Step):
  //  - without a loss scaler (f32, bf16 compute), Step fails at once unless
  //    skip_nonfinite_without_scaler is set (then the step is skipped);
  //  - with one (f16), Step fails when this many overflows in a row came
  //    with the scale already at loss_scaler.min_scale. 0: never give up.
  bool skip_nonfinite_without_scaler = false;
  int max_overflows_at_min_scale = 8;
  OffloadPolicy offload = OffloadPolicy::kNone;
  // OffloadPolicy::kNvme: this rank's disk tier (the caller's; it must
  // outlive the optimizer), and the elements of a chunk the update reads,
  // updates and writes at a time (a multiple of 1024: whole 4 KiB disk
  // blocks of f32, so that two pieces never share a block). Host memory
  // holds three pieces' masters and states.
  ChunkDiskTier* disk = nullptr;
  int64_t disk_piece_elements = int64_t{8} << 20;
};

struct StepResult {
  bool skipped = false;   // Inf/NaN in the grads: nothing was updated.
  double grad_norm = 0;   // Global L2 norm of the mean grads, unscaled and
                          // before clipping (Inf or NaN when skipped).
  double loss_scale = 1;  // The scale the grads of this step carried.
  double lr = 0;          // The rate applied (or that would have been).
  int micro_batches = 1;  // Micro-batches folded into this step.
};

class ZeroOptimizer {
 public:
  // InvalidArgument for options PyTorch refuses (a negative rate, betas
  // outside [0, 1), negative eps, weight decay, momentum, dampening or
  // max_grad_norm, Nesterov without momentum or with dampening), or a null
  // `ddp`. The optimizer keeps its masters and states in ddp's chunk
  // manager; `ddp` (and so that manager) must outlive it.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ZeroOptimizer>> Create(
      ZeroDdp* ddp, const ZeroOptimizerOptions& options);

  // The factor to multiply the loss (its gradient seed) by before backward:
  // the dynamic loss scale in f16, 1 otherwise.
  double loss_scale() const;

  // Ends a micro-batch that is not the step's last (see above). Collective
  // only in that it must follow FinishBackward on every rank. Errors:
  // FailedPrecondition without a FinishBackward since the last call.
  [[nodiscard]] absl::Status AccumulateGrads();

  // One optimizer step over the grads of the last FinishBackward (plus the
  // accumulated micro-batches). Collective: one all-reduce. Errors:
  // FailedPrecondition without a FinishBackward since the last
  // AccumulateGrads or Step, and (on every rank alike) for grads that are
  // not finite where no loss scale is left to lower (see
  // ZeroOptimizerOptions::max_overflows_at_min_scale).
  [[nodiscard]] absl::StatusOr<StepResult> Step();

  // Moves the masters, the optimizer states and the accumulation buffer to
  // `device` (every view follows). Between steps only. FailedPrecondition
  // with OffloadPolicy::kNvme once they rest on disk.
  [[nodiscard]] absl::Status MoveStates(Device device);

  // This rank's part of the state: pieces of the masters and states it
  // holds (for the replicated layout, a 1/world_size slice of each chunk, so
  // that the ranks' pieces together cover everything once). Not collective.
  [[nodiscard]] absl::StatusOr<OptimizerState> SaveShard();
  // Every parameter's whole state, gathered one chunk at a time: on rank 0
  // (other ranks get the scalars and no pieces) or on every rank.
  // Collective.
  [[nodiscard]] absl::StatusOr<OptimizerState> GatherState(bool all_ranks);
  // Loads pieces (from SaveShard of any ranks, or GatherState) covering the
  // elements this rank holds, masters included: the compute-dtype weights
  // are rewritten from the loaded masters. Before the first step the states
  // do not exist yet: the masters load at once, the other pieces are kept
  // and load when the states are created. Every piece is checked before
  // anything is written: NotFound naming a parameter and state whose
  // elements here no piece covers, InvalidArgument for a piece of an unknown
  // parameter or state, a wrong shape or dtype, or a range outside the
  // tensor. Not collective.
  [[nodiscard]] absl::Status LoadState(const OptimizerState& state);

  // True if this rank holds any of elements [begin, begin + numel) of the
  // parameter's master (so a checkpoint reader can skip pieces it does not
  // need). False for a name not in the chunks.
  bool HoldsAny(const std::string& param, int64_t begin, int64_t numel) const;

  int64_t updates() const { return updates_; }
  int64_t iterations() const { return iterations_; }
  // True if the grads carry a dynamic loss scale (f16 compute), whose
  // state (options().loss_scaler bounds it) LoadState restores.
  bool has_loss_scaler() const { return scaler_.has_value(); }
  const ZeroOptimizerOptions& options() const { return options_; }
  // The state groups: {"exp_avg", "exp_avg_sq"}, {"momentum_buffer"} or {}.
  const std::vector<std::string>& state_names() const { return state_names_; }

 private:
  ZeroOptimizer(ZeroDdp* ddp, ChunkManager* chunks,
                const ZeroOptimizerOptions& options,
                std::optional<DynamicLossScaler> scaler);

  // A FinishBackward happened since the last AccumulateGrads/Step.
  [[nodiscard]] absl::Status ConsumeBackward(absl::string_view operation);
  // Creates the state groups at the first step (and loads pending pieces).
  [[nodiscard]] absl::Status EnsureStates();
  [[nodiscard]] absl::Status EnsureAccumulator();
  // Chunks of the parameter group (and so of every group paired with it).
  int num_chunks() const;
  Chunk* ParamChunk(int i) const;
  Chunk* GroupChunk(const std::string& group, int i) const;
  // The elements of chunk i this rank holds at rest and are in use, as
  // [begin, end) of the full chunk (empty for a non-owner).
  std::pair<int64_t, int64_t> HeldRange(int i) const;
  static std::pair<int64_t, int64_t> HeldRangeOf(const Chunk* c);
  // The elements this rank accounts for in sums and saved state: HeldRange,
  // or for the replicated layout a 1/world_size slice of it.
  std::pair<int64_t, int64_t> AccountedRange(int i) const;
  // updates/iterations and the loss scaler's state, without pieces.
  OptimizerState Scalars() const;
  // (state name, chunk group) of the masters and/or the states that exist.
  std::vector<std::pair<std::string, std::string>> StateGroups(
      bool masters, bool states) const;
  [[nodiscard]] absl::StatusOr<double> LocalSumOfSquares(bool from_accumulator);
  [[nodiscard]] absl::Status FoldIntoAccumulator(bool restore_weights);
  [[nodiscard]] absl::Status Update(float grad_scale, double lr,
                                    bool from_accumulator);
  // The copier and host staging memory for params that travel between
  // `device` and the host for the update (made on first use).
  struct OffloadCopies {
    AsyncCopier* copier;
    Allocator* host_memory;
  };
  [[nodiscard]] absl::StatusOr<OffloadCopies> OffloadCopiesFor(Device device);
  // Runs chunk i's update on the GPU, on the payloads, when the chunk, its
  // master, states (and accumulator) all rest on one GPU; false (nothing
  // done) otherwise.
  [[nodiscard]] absl::StatusOr<bool> UpdateOnGpu(const AdamStep& adam,
                                                 const SgdStep& sgd, int i,
                                                 int64_t begin, int64_t end,
                                                 bool from_accumulator);
  // Writes the pieces into the masters (then the compute-dtype weights
  // from them) and/or the states. REQUIRES: CheckPieces passed.
  [[nodiscard]] absl::Status LoadPieces(const OptimizerState& state,
                                        bool masters_too, bool states_too);
  [[nodiscard]] absl::Status CheckPieces(const OptimizerState& state,
                                         bool states_too);

  ZeroDdp* const ddp_;
  ChunkManager* const chunks_;
  const ZeroOptimizerOptions options_;
  const double weight_decay_;
  std::optional<DynamicLossScaler> scaler_;  // f16 only.
  std::vector<std::string> state_names_;
  bool states_created_ = false;
  bool accumulator_created_ = false;
  std::optional<Device> states_device_;  // Where MoveStates put them.
  // ZeRO-Offload's copies (OffloadCopiesFor). The caches are declared after
  // what they allocate from, so they empty into it first.
  std::map<Device, std::unique_ptr<AsyncCopier>> copiers_;
  PinnedHostAllocator pinned_;
  HostAllocator host_{Device::Cpu()};
  std::unique_ptr<CachingAllocator> pinned_cache_;
  std::unique_ptr<CachingAllocator> host_cache_;
  int backwards_seen_ = 0;  // ddp_->steps_finished() consumed.
  int micro_batches_ = 0;   // Accumulated since the last Step.
  int64_t updates_ = 0;
  int64_t iterations_ = 0;
  // Overflowed steps in a row taken with the scale at its minimum.
  int overflows_at_min_scale_ = 0;
  std::optional<OptimizerState> pending_;  // Loaded before the first step.
};

}  // namespace chunkzero

#endif  // CHUNKZERO_OPTIM_ZERO_OPTIMIZER_H_
