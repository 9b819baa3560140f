// ZeroDdp: drives a model's parameters through chunks in forward and
// backward (docs/DESIGN.md §5).
//
//   ZeroDdpOptions options;                       // f16 chunks
//   CZ_ASSIGN_OR_RETURN(std::unique_ptr<ZeroDdp> ddp,
//                       ZeroDdp::Create(&model, &chunk_manager, options));
//   for (int step = 0; step < steps; ++step) {
//     CZ_RETURN_IF_ERROR(model.Forward(*ddp, batch));    // calls the hooks
//     CZ_RETURN_IF_ERROR(model.Backward(*ddp));
//     CZ_RETURN_IF_ERROR(ddp->FinishBackward());         // grads reduced
//   }
//
// Construction broadcasts every parameter from rank 0, so all ranks start
// equal, and rounds each to the compute dtype.
//
// Registration with a known order (ZeroDdpOptions::first_use_order): Create
// packs the parameters into the groups "<dtype>_param" (the compute copy:
// "f16_param", "bf16_param" or "f32_param") / "f32_master" in that order and
// every step, step 1 included, gathers only the chunks in flight. No
// parameter is left out or pinned then: every rank must use every
// parameter (FinishBackward names any that got no grad).
//
// Registration. Otherwise, Create puts every parameter into compute-dtype
// chunks in declaration order (group "<dtype>_param.decl"), with its f32 master
// (rank 0's value) in the paired group "f32_master.decl" (in f32 mode too: grad
// reuse overwrites the compute copy); data() becomes a view of its slice
// and the model's own tensors are dropped, so memory is sharded from the
// start. Step 1's forward streams like every later step: each op's chunks
// are gathered when it needs them and released when no op needs them, and
// each rank records the order of first use. Because ranks may take
// different branches, the ranks agree on what is materialised: a rank that
// needs a chunk it has not gathered starts a round, a small all-gather of
// which chunks each rank's current op needs; every rank then releases the
// chunks no rank needs and gathers, in chunk order, the ones any rank needs
// (so every rank issues the same collectives in the same order, whatever
// it computes). A rank whose forward has ended joins the others' rounds
// until every rank's has. At the first PreBackward the ranks agree on one
// order (rank 0's first-use order, then parameters used only on other ranks,
// in declaration order) and the parameters are repacked into groups
// "<dtype>_param" / "f32_master" in that order, from the masters, one
// declaration chunk at a time; the declaration-order groups are freed as
// they are read. Parameters no rank used are left out (keeping a copy of
// their own) and reported by unused_parameters().
//
// Every later step follows DESIGN.md §5: PreForward/PreBackward access the
// chunks (materialise) and mark the tensors COMPUTE; PostForward marks them
// HOLD and releases accessed chunks except those the next op needs (in the
// recorded order); a grad handed over is divided by the world size, cast to
// the compute dtype and written into the parameter's own slice (grad
// reuse: no second buffer), after which the tensor is READY_FOR_REDUCE; a
// parameter used k times in forward is ready after its k-th grad (earlier
// grads wait in an f32 buffer, since the weights are still needed).
// Chunks are reduced in one global order, last chunk first, as soon as the
// next one in that order is ready, so every rank issues the same
// collectives in the same order; pinned chunks (below) are reduced last, in
// FinishBackward.
//
// Parameters that step 1 used on some ranks but not all (a rank-dependent
// branch) live in pinned chunks: every rank gathers those at the step's
// first forward hook and keeps them until they are reduced, so using them
// on some ranks issues no collective the others miss. A branch that step 1
// took on every rank but a later step does not is not pinned: the step then
// fails on every rank (the grads check, or a mismatch of the chunk-tagged
// collectives), never hangs and never exchanges the wrong chunk.
//
// Activation recomputation: a model may run forward scopes again inside
// backward (a checkpointed block's forward, right before its backward
// scopes). Such a scope accesses its chunks again (gathered again when
// sharded, brought back when offloaded) and marks its tensors COMPUTE, then
// HOLD, as the first forward did; it counts as no forward use, so grads
// are still written once per backward use. A forward scope on a parameter
// whose grad is already in its slice (grad reuse: the slice no longer
// holds the weights) fails the step, naming the parameter.
//
// The schedule: each step records its scopes in the order they ran
// (ddp/step_schedule.h), recomputed ones included. At the end of step 1
// the ranks compare their recordings (one i64 all-gather, once per job);
// if every rank ran the same scopes and they recompute, later steps follow
// that schedule: a scope gathers ahead the chunks of the scopes that come
// next, lazy release keeps the next scope's chunks, and the auto residency
// plans with the chunk uses it implies. Without a schedule (step 1, no
// recomputation, ranks that ran different scopes, or a step that leaves
// the schedule) the rules above apply: forward in registration order,
// backward in reverse, and a recomputed scope neither gathers ahead nor
// releases (its chunks wait for the block's backward).
//
// A forward-only pass (BeginEvaluation .. EndEvaluation, what
// Engine::Evaluate runs) gathers and releases chunks as a forward does but
// counts no use and takes no grad; the step after it is bit for bit the
// step without it.
//
// The contract, checked: a parameter is read (data()) only before its
// grad for the step is written into its slice, so a backward computes
// with the weights first and hands the grad after; a read after it, until
// the optimizer has put the weights back, fails the step naming the
// parameter (as does a backward scope opened on it then). Every forward
// use gets its HandGrad: at the end of the step a parameter used k times
// in forward must have had k grads on this rank, else the step fails on
// every rank, naming it with both counts (with or without
// find_unused_parameters, which is about parameters no forward used).
//
// FinishBackward reduces the chunks left: grads that never arrived on this
// rank are zeros. Then the ranks compare which parameters had grads: one
// that had grads on some ranks but not others fails the step on every rank,
// naming it, unless find_unused_parameters is set (then its missing grads
// are the zeros already reduced). Nothing waits on a rank that skipped a
// parameter: it joins the same reductions in the same order. After it,
// every parameter's grad() is a flat view of the part of its reduced
// gradient this rank holds (empty where it holds none).
//
// Thread-safety: one ZeroDdp per rank, used by that rank's thread. The
// model and the ChunkManager must outlive it.
#ifndef CHUNKZERO_DDP_ZERO_DDP_H_
#define CHUNKZERO_DDP_ZERO_DDP_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "chunk/chunk_manager.h"
#include "comm/work.h"
#include "ddp/hook_order.h"
#include "ddp/param_hooks.h"
#include "ddp/parameter.h"
#include "ddp/step_schedule.h"

namespace chunkzero {

struct ZeroDdpOptions {
  // Dtype of the parameter chunks: kF16, kBF16, or kF32 (exact parity).
  DType compute_dtype = DType::kF16;
  // Reduce grads missing on some ranks as zeros instead of failing.
  bool find_unused_parameters = false;
  // Chunks to gather ahead, asynchronously, in the recorded order while
  // the current op computes (0: none). Bounds the chunks in flight, and so
  // the memory, to max_prefetch + the chunks in use.
  int max_prefetch = 1;
  // Where the fp32 master chunks live; default: the ChunkManager's device.
  // ZeRO-Offload puts them in host memory (Device::Cpu()) while the
  // compute-dtype chunks live on the accelerator.
  std::optional<Device> master_device;
  // Where the masters rest, when on disk (the NVMe tier; null: in memory on
  // master_device, host memory). Each master chunk goes there as soon as
  // registration has filled it, so that the masters never all sit in host
  // memory at once (4 bytes per parameter).
  ChunkDiskTier* master_disk = nullptr;
  // The order in which forward first uses the parameters, when the caller
  // knows it (a static graph, like a transformer's layer order): every
  // parameter's name once, the same list on every rank. Create then packs
  // the chunks in this order at once, and step 1 runs like every other step
  // instead of gathering the whole model to record the order. Empty: record
  // it in step 1 (see above).
  std::vector<std::string> first_use_order;
};

// What one step did, for reports.
struct StepCounters {
  int chunk_accesses = 0;  // Chunks materialised (prefetched ones too).
  int prefetches = 0;      // Of those, started ahead of use.
  int prefetch_hits = 0;   // Prefetches complete when their op came.
  // Step 1 without a given order: rounds of the agreement on which
  // declaration-order chunks are materialised (see above).
  int agreement_rounds = 0;
  // Chunks materialised again for forward scopes inside backward
  // (activation recomputation): accessed there, or gathered ahead for one.
  int recompute_accesses = 0;
};

class ZeroDdp final : public ParamHooks {
 public:
  // When the hooks may run. On its own a ZeroDdp takes every hook for the
  // step being run (kAnytime). An Engine narrows that: nothing between
  // steps (kIdle: a hook is FailedPrecondition naming the parameter), the
  // forward and backward of a step (kTraining), or a forward-only pass
  // (kEvaluating, BeginEvaluation to EndEvaluation).
  enum class HookWindow { kAnytime, kIdle, kTraining, kEvaluating };

  // Broadcasts the parameters from rank 0 (a collective: every rank calls
  // Create). InvalidArgument for an empty model, duplicate names or a
  // compute dtype the process group cannot reduce.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ZeroDdp>> Create(
      Module* model, ChunkManager* chunks, const ZeroDdpOptions& options);
  // A model outlives its ZeroDdp: its parameters forget the read guard.
  ~ZeroDdp() override;

  [[nodiscard]] absl::Status PreForward(
      absl::Span<Parameter* const> params) override;
  [[nodiscard]] absl::Status PostForward(
      absl::Span<Parameter* const> params) override;
  [[nodiscard]] absl::Status PreBackward(
      absl::Span<Parameter* const> params) override;
  [[nodiscard]] absl::Status PostBackward(
      absl::Span<Parameter* const> params) override;
  [[nodiscard]] absl::Status HandGrad(Parameter& param,
                                      const Tensor& grad) override;
  void RecordDeferredError(absl::Status status) override;

  // Ends the step's backward (see above). Collective.
  [[nodiscard]] absl::Status FinishBackward();

  // Who may run hooks now (HookWindow); the Engine sets kIdle once and
  // kTraining around each step.
  void set_hook_window(HookWindow window) { window_ = window; }
  HookWindow hook_window() const { return window_; }

  // A forward-only pass (an evaluation between steps): forward scopes
  // gather and release chunks as a step's forward does (prefetch and lazy
  // release in the registration order; before the first step, the
  // agreement rounds), but count no use, record nothing for the schedule
  // or the first-use order, and take no backward scope or grad
  // (FailedPrecondition naming the parameter). EndEvaluation releases
  // every chunk it gathered, puts the residencies' use clocks back, and
  // returns the pass's first error (a scope left open, a deferred one);
  // collective when it ends before the first step (its rounds). The step
  // after it runs as if it had not happened. FailedPrecondition for a
  // BeginEvaluation inside a step or a second one.
  [[nodiscard]] absl::Status BeginEvaluation();
  [[nodiscard]] absl::Status EndEvaluation();

  // The full fp32 value of every parameter (masters; parameters kept out of
  // chunks give their own data), one chunk at a time: `fn` sees each
  // parameter once, in registration order (then the unused ones), on rank 0
  // only unless `all_ranks`, as a copy in host memory wherever the chunks
  // are. Peak extra memory is one materialised master chunk plus what `fn`
  // keeps. Collective.
  [[nodiscard]] absl::Status VisitFullParameters(
      bool all_ranks,
      const std::function<absl::Status(const std::string& name,
                                       const Tensor& value)>& fn);
  // VisitFullParameters collected into a map (on rank 0, or everywhere).
  [[nodiscard]] absl::StatusOr<std::map<std::string, Tensor>> GatherStateDict(
      bool all_ranks);
  // Loads full values (any float dtype, the parameters' shapes, on any
  // device) into the
  // masters and the compute-dtype chunks (or, before registration, into the
  // parameters). Every rank passes the same dict. NotFound naming a missing
  // parameter, InvalidArgument for a wrong shape; nothing is written then.
  [[nodiscard]] absl::Status LoadStateDict(
      const std::map<std::string, Tensor>& values);

  // Writes the fp32 masters this rank holds back into the compute-dtype
  // chunks (cast), replacing the grads that grad reuse left there. The
  // optimizer does this after its update; also used to skip a step.
  [[nodiscard]] absl::Status RestoreParamsFromMasters();

  // Sets every parameter's grad() to an empty tensor: after an optimizer
  // step the slices the grads viewed hold weights again.
  void ClearGrads();

  DType compute_dtype() const { return options_.compute_dtype; }
  // The manager holding this model's chunks (given to Create).
  ChunkManager& chunks() const { return *chunks_; }
  // The current chunk groups of the compute-dtype parameters and of their
  // fp32 masters (paired: same tensors, offsets and shards). Declaration
  // order until step 1's backward, first-use order from then on.
  const std::string& param_group() const { return param_group_; }
  const std::string& master_group() const { return master_group_; }

  // True once step 1 has put the parameters into chunks.
  bool registered() const { return registered_; }
  // Parameters no rank used in step 1 (kept out of chunks), declaration
  // order.
  const std::vector<std::string>& unused_parameters() const { return unused_; }
  // The chunk order: parameter names in the order they were registered.
  std::vector<std::string> registration_order() const;
  int steps_finished() const { return steps_; }
  // The counters of the last finished step.
  const StepCounters& last_step_counters() const { return last_counters_; }

 private:
  struct ParamInfo {
    Parameter* param = nullptr;
    int declaration_index = 0;
    int first_use = -1;  // Position of first use in step 1, this rank.
    bool registered = false;
    int order = -1;            // Position in the registration order.
    TensorLocation where;      // In the compute-dtype group.
    int forward_uses = 0;      // This step, before backward began.
    int grads = 0;             // This step.
    Tensor pending;            // f32 sum of early grads of a multi-use param.
    Tensor initial;            // f32 values from rank 0, until registration.
    bool had_grad = false;     // This step.
    bool conditional = false;  // Step 1 used it on some ranks only.
    // This step's grad is in the slice (grad reuse): no weights there.
    bool grad_in_slice = false;
  };

  ZeroDdp(ChunkManager* chunks, const ZeroDdpOptions& options,
          std::vector<Parameter*> params);

  [[nodiscard]] absl::StatusOr<ParamInfo*> Info(const Parameter& param);
  // Indices into params_ of `names` (a permutation of the parameters' names),
  // or InvalidArgument naming an unknown, repeated or missing one.
  [[nodiscard]] absl::StatusOr<std::vector<int>> OrderFromNames(
      const std::vector<std::string>& names) const;
  // Creates a compute-dtype group and its paired fp32 master group holding
  // params_[order...] in that order (master values from `master_value`),
  // makes each data() a view of it, and sets order_ and the locations.
  [[nodiscard]] absl::Status BuildGroups(
      const std::string& param_group, const std::string& master_group,
      const std::vector<int>& order,
      const std::function<absl::StatusOr<Tensor>(ParamInfo&)>& master_value);
  // RestoreParamsFromMasters for one chunk whose payload is in memory.
  [[nodiscard]] absl::Status RestoreChunk(Chunk* param, Chunk* master);
  // Step 1 without a given order: makes sure the declaration-order chunks
  // of `params` are materialised, through a round if one is not.
  [[nodiscard]] absl::Status StreamFirstStep(
      absl::Span<Parameter* const> params);
  // One round of step 1's agreement: every rank says which chunks its
  // current op (`params`, plus any chunk with a tensor in use) needs and
  // whether its forward has ended (`done`); every rank then releases what
  // no rank needs and gathers what any rank needs. Sets `*all_done` when
  // every rank's forward has ended.
  [[nodiscard]] absl::Status FirstStepRound(absl::Span<Parameter* const> params,
                                            bool done, bool* all_done);
  // Joins rounds until every rank's step-1 forward has ended.
  [[nodiscard]] absl::Status EndFirstForward();
  // Agrees on the first-use order and repacks the parameters into it.
  [[nodiscard]] absl::Status Register();
  // Moves the parameters from the declaration-order groups into new ones in
  // `order` (indices into params_); `unused` get copies of their own.
  [[nodiscard]] absl::Status Repack(const std::vector<int>& order,
                                    const std::vector<int>& unused);
  // Tells the ChunkManager the order of one step's chunk uses, for its auto
  // residency: the schedule's, or without one forward in registration
  // order and backward in reverse.
  void SetUseSchedule();
  // Accesses the chunks of `params` and moves them to COMPUTE.
  [[nodiscard]] absl::Status Use(absl::Span<Parameter* const> params);
  // Releases accessed chunks that can be released, except the chunk of
  // the parameter that follows `params` in `direction` (+1 forward, -1
  // backward) of the registration order.
  [[nodiscard]] absl::Status ReleaseLazily(absl::Span<Parameter* const> params,
                                           int direction);
  // The registration position of the last of `params` in the direction of
  // travel (+1 forward: the highest, -1 backward: the lowest).
  // REQUIRES: every parameter is the model's (the hooks checked it).
  int Edge(absl::Span<Parameter* const> params, int direction) const;
  // Up to `count` distinct chunks after `params` in the registration order
  // (direction +1 forward, -1 backward), excluding the current one.
  std::vector<Chunk*> ChunksAhead(absl::Span<Parameter* const> params,
                                  int direction, int count);
  [[nodiscard]] absl::Status Prefetch(absl::Span<Parameter* const> params,
                                      int direction);
  // Following the schedule: up to `count` distinct chunks of the scopes
  // after the current one, in the order they are used, except the chunks
  // of `params`.
  std::vector<Chunk*> ScheduledChunksAhead(absl::Span<Parameter* const> params,
                                           int count) const;
  // Indices into params_ of `params`; InvalidArgument naming one that is
  // not the model's.
  [[nodiscard]] absl::StatusOr<std::vector<int>> Indices(
      absl::Span<Parameter* const> params);
  // End of step 1: adopts the scopes it ran as the schedule if every rank
  // ran the same (collective).
  [[nodiscard]] absl::Status AdoptSchedule(std::vector<StepSchedule::Op> ran);
  int ChunkIndex(const Chunk* chunk) const;
  bool IsPinned(int chunk_index) const;
  // True if any of `params` is conditional: such an op neither prefetches
  // nor releases, so that every rank's collectives stay in step.
  bool AnyConditional(absl::Span<Parameter* const> params) const;
  // Accesses every pinned chunk not accessed yet, in chunk order.
  [[nodiscard]] absl::Status AccessPinned();
  [[nodiscard]] absl::Status WriteGrad(ParamInfo& info, const Tensor& grad32);
  // Reduces chunks in reduce_order_ while the next eager one can reduce.
  [[nodiscard]] absl::Status ReduceReady();
  [[nodiscard]] absl::Status ReduceChunk(int index);
  // The hooks' gate: OK when `call` on `params` may run in this window,
  // else FailedPrecondition naming the first parameter.
  [[nodiscard]] absl::Status CheckWindow(absl::Span<Parameter* const> params,
                                         const char* call) const;
  // What this rank's step broke of the contract, found at its end: a
  // forward use without its grad (or a grad too many), a weight read after
  // its grad was written, an error deferred by a scope, a scope left open.
  [[nodiscard]] absl::Status LocalStepProblems(const absl::Status& order);
  // `local` is this rank's LocalStepProblems: when any rank has one, every
  // rank fails with it (AgreeOnStatus); then the unused-parameter check.
  [[nodiscard]] absl::Status CheckUnusedAgreement(const absl::Status& local);
  // The forward hooks of a forward-only pass.
  [[nodiscard]] absl::Status EvaluationPreForward(
      absl::Span<Parameter* const> params);
  [[nodiscard]] absl::Status EvaluationPostForward(
      absl::Span<Parameter* const> params);

  ChunkManager* const chunks_;
  const ZeroDdpOptions options_;
  std::vector<ParamInfo> params_;  // Declaration order.
  absl::flat_hash_map<const Parameter*, int> index_of_;
  std::vector<int> order_;  // Registration order: indices into params_.
  // Position of each chunk of the current compute-dtype group.
  absl::flat_hash_map<const Chunk*, int> chunk_index_;
  HookOrder hook_order_;
  std::vector<absl::Status> deferred_;
  HookWindow window_ = HookWindow::kAnytime;
  // The window before BeginEvaluation, the pass's own scope pairing, and
  // the use clocks it puts back.
  HookWindow window_before_evaluation_ = HookWindow::kAnytime;
  HookOrder evaluation_order_;
  bool evaluation_started_ = false;  // A forward hook ran in the pass.
  ChunkManager::UseClocks clocks_before_evaluation_;
  bool registered_ = false;
  bool in_backward_ = false;
  bool step_started_ = false;  // A forward hook ran in this step.
  // Chunks holding parameters that step 1 used on some ranks only: all
  // ranks gather them at one fixed point (the step's first forward hook;
  // in step 1 right after registration) and keep them until they are
  // reduced, so a rank-dependent branch issues no collective of its own.
  std::vector<Chunk*> pinned_;
  int uses_seen_ = 0;  // First-use counter of step 1.
  // This step's reduction order (chunk indices), how many of its first
  // entries reduce eagerly, the next position, and what is done.
  std::vector<int> reduce_order_;
  int eager_reductions_ = 0;
  int reduce_pos_ = 0;
  std::vector<bool> reduced_;
  int steps_ = 0;
  std::vector<std::string> unused_;
  // The current groups: declaration order until step 1's backward, then
  // first-use order.
  std::string param_group_;
  std::string master_group_;
  // Chunks whose access was started ahead of use, and its handle.
  std::map<Chunk*, std::unique_ptr<comm::Work>> prefetching_;
  StepCounters counters_;
  StepCounters last_counters_;
  // The scopes of this step, and the schedule adopted after step 1.
  StepSchedule schedule_;
  // The chunks of the latest run of recomputed scopes (kept for the
  // backward after it), and whether the latest scope was recomputed.
  std::vector<Chunk*> recomputed_;
  bool recomputing_before_ = false;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_DDP_ZERO_DDP_H_
