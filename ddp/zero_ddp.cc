// ZeroDdp's hooks and the step they schedule: access, prefetch and lazy
// release of chunks, grads written into their slices, reduction in one
// order, and FinishBackward. Registration and the state dict live in
// zero_ddp_registration.cc and zero_ddp_state_dict.cc.
#include "ddp/zero_ddp.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "comm/agree.h"
#include "comm/process_group.h"
#include "ddp/zero_ddp_internal.h"
#include "tensor/ops/axpy_tensor.h"

namespace chunkzero {

absl::Status ZeroDdp::Use(absl::Span<Parameter* const> params) {
  for (Parameter* p : params) {
    CZ_ASSIGN_OR_RETURN(ParamInfo * info, Info(*p));
    if (!info->registered) {
      return absl::FailedPreconditionError(absl::StrCat(
          "parameter '", p->name(),
          "' was used by no rank in the first step, so it is not in any "
          "chunk; the model must use the same parameters every step"));
    }
    Chunk* chunk = info->where.chunk;
    if (auto it = prefetching_.find(chunk); it != prefetching_.end()) {
      // Prefetched: a hit if the gather is already done.
      if (it->second->IsCompleted()) ++counters_.prefetch_hits;
      if (schedule_.recomputing()) ++counters_.recompute_accesses;
      absl::Status done = chunk->WaitBeforeCompute(*it->second);
      prefetching_.erase(it);
      CZ_RETURN_IF_ERROR(done, "prefetching chunk ", chunk->name());
    } else if (!chunk->is_accessed()) {
      ++counters_.chunk_accesses;
      if (schedule_.recomputing()) ++counters_.recompute_accesses;
      CZ_RETURN_IF_ERROR(chunks_->AccessChunk(chunk));
    }
    CZ_RETURN_IF_ERROR(
        chunk->SetTensorState(info->where.index, TensorState::kCompute));
  }
  return absl::OkStatus();
}

int ZeroDdp::Edge(absl::Span<Parameter* const> params, int direction) const {
  int edge = direction > 0 ? -1 : static_cast<int>(order_.size());
  for (Parameter* p : params) {
    const ParamInfo& info = params_[index_of_.at(p)];
    edge =
        direction > 0 ? std::max(edge, info.order) : std::min(edge, info.order);
  }
  return edge;
}

std::vector<Chunk*> ZeroDdp::ChunksAhead(absl::Span<Parameter* const> params,
                                         int direction, int count) {
  std::vector<Chunk*> ahead;
  if (count <= 0 || order_.empty()) return ahead;
  const int edge = Edge(params, direction);
  const Chunk* current = edge >= 0 && edge < static_cast<int>(order_.size())
                             ? params_[order_[edge]].where.chunk
                             : nullptr;
  for (int k = edge + direction;
       k >= 0 && k < static_cast<int>(order_.size()) &&
       static_cast<int>(ahead.size()) < count;
       k += direction) {
    Chunk* chunk = params_[order_[k]].where.chunk;
    if (chunk != current &&
        std::find(ahead.begin(), ahead.end(), chunk) == ahead.end()) {
      ahead.push_back(chunk);
    }
  }
  return ahead;
}

std::vector<Chunk*> ZeroDdp::ScheduledChunksAhead(
    absl::Span<Parameter* const> params, int count) const {
  std::vector<Chunk*> current, ahead;
  for (Parameter* p : params) {
    current.push_back(params_[index_of_.at(p)].where.chunk);
  }
  for (const StepSchedule::Op& op : schedule_.Ahead()) {
    for (int i : op.params) {
      if (static_cast<int>(ahead.size()) >= count) return ahead;
      Chunk* chunk = params_[i].where.chunk;
      if (!params_[i].registered ||
          std::find(current.begin(), current.end(), chunk) != current.end() ||
          std::find(ahead.begin(), ahead.end(), chunk) != ahead.end()) {
        continue;
      }
      ahead.push_back(chunk);
    }
  }
  return ahead;
}

absl::StatusOr<std::vector<int>> ZeroDdp::Indices(
    absl::Span<Parameter* const> params) {
  std::vector<int> indices;
  indices.reserve(params.size());
  for (Parameter* p : params) {
    CZ_ASSIGN_OR_RETURN(ParamInfo * info, Info(*p));
    indices.push_back(static_cast<int>(info - params_.data()));
  }
  return indices;
}

bool ZeroDdp::AnyConditional(absl::Span<Parameter* const> params) const {
  for (Parameter* p : params) {
    if (params_[index_of_.at(p)].conditional) return true;
  }
  return false;
}

absl::Status ZeroDdp::Prefetch(absl::Span<Parameter* const> params,
                               int direction) {
  // An op that only some ranks run must not start collectives (prefetch)
  // or change what is materialised (release): the others would diverge.
  if (AnyConditional(params)) return absl::OkStatus();
  std::vector<Chunk*> ahead;
  if (schedule_.following()) {
    ahead = ScheduledChunksAhead(params, options_.max_prefetch);
  } else if (schedule_.recomputing()) {
    // Without a schedule nothing says which scope comes next.
    return absl::OkStatus();
  } else {
    ahead = ChunksAhead(params, direction, options_.max_prefetch);
  }
  for (Chunk* chunk : ahead) {
    if (chunk->is_accessed()) continue;
    // In backward, a chunk already reduced this step needs no gather.
    if (in_backward_ && reduced_[ChunkIndex(chunk)]) continue;
    CZ_ASSIGN_OR_RETURN(std::unique_ptr<comm::Work> work,
                        chunks_->StartAccessChunk(chunk));
    ++counters_.chunk_accesses;
    ++counters_.prefetches;
    prefetching_[chunk] = std::move(work);
  }
  return absl::OkStatus();
}

absl::Status ZeroDdp::AccessPinned() {
  for (Chunk* chunk : pinned_) {
    if (chunk->is_accessed()) continue;
    ++counters_.chunk_accesses;
    CZ_RETURN_IF_ERROR(chunks_->AccessChunk(chunk),
                       "accessing a chunk of conditionally used parameters");
  }
  return absl::OkStatus();
}

int ZeroDdp::ChunkIndex(const Chunk* chunk) const {
  auto it = chunk_index_.find(chunk);
  return it == chunk_index_.end() ? -1 : it->second;
}

absl::Status ZeroDdp::FirstStepRound(absl::Span<Parameter* const> params,
                                     bool done, bool* all_done) {
  ++counters_.agreement_rounds;
  comm::ProcessGroup& group = chunks_->process_group();
  const int world = group.size();
  const int n = chunks_->num_chunks(param_group_);
  // One flag per chunk (needed by this rank's current op or in use here),
  // then whether this rank's forward has ended.
  std::vector<int32_t> mine(n + 1, 0), all(static_cast<size_t>(n + 1) * world);
  for (Parameter* p : params) {
    mine[ChunkIndex(params_[index_of_.at(p)].where.chunk)] = 1;
  }
  for (int c = 0; c < n; ++c) {
    const Chunk* chunk = chunks_->chunk(param_group_, c);
    if (chunk->is_accessed() && !chunk->CanRelease()) mine[c] = 1;
  }
  mine[n] = done ? 1 : 0;
  comm::AllGatherOptions options;
  options.timeout = chunks_->options().comm_timeout;
  options.tag = "step-1 chunk agreement";
  CZ_RETURN_IF_ERROR(comm::AllGather(group, comm::ConstBuffer::Of(mine),
                                     comm::MutableBuffer::Of(all), options),
                     "agreeing on the chunks step 1 gathers");
  std::vector<Chunk*> needed;
  *all_done = true;
  for (int c = 0; c <= n; ++c) {
    bool any = false, every = true;
    for (int r = 0; r < world; ++r) {
      any |= all[static_cast<size_t>(r) * (n + 1) + c] != 0;
      every &= all[static_cast<size_t>(r) * (n + 1) + c] != 0;
    }
    if (c == n) {
      *all_done = every;
    } else if (any) {
      needed.push_back(chunks_->chunk(param_group_, c));
    }
  }
  // Every rank had the same chunks materialised before the round and makes
  // the same decisions from the same flags, so they stay in step.
  CZ_RETURN_IF_ERROR(chunks_->ReleaseAccessedExcept(needed).status());
  std::vector<std::pair<Chunk*, std::unique_ptr<comm::Work>>> gathers;
  for (Chunk* chunk : needed) {
    if (chunk->is_accessed()) continue;
    ++counters_.chunk_accesses;
    CZ_ASSIGN_OR_RETURN(std::unique_ptr<comm::Work> work,
                        chunks_->StartAccessChunk(chunk));
    gathers.emplace_back(chunk, std::move(work));
  }
  absl::Status status = absl::OkStatus();
  for (auto& [chunk, work] : gathers) {
    absl::Status done_gathering = chunk->WaitBeforeCompute(*work);
    if (status.ok() && !done_gathering.ok()) status = done_gathering;
  }
  return status;
}

absl::Status ZeroDdp::StreamFirstStep(absl::Span<Parameter* const> params) {
  for (Parameter* p : params) {
    if (!params_[index_of_.at(p)].where.chunk->is_accessed()) {
      bool all_done = false;
      return FirstStepRound(params, /*done=*/false, &all_done);
    }
  }
  return absl::OkStatus();
}

absl::Status ZeroDdp::EndFirstForward() {
  bool all_done = false;
  while (!all_done) {
    CZ_RETURN_IF_ERROR(FirstStepRound({}, /*done=*/true, &all_done));
  }
  return absl::OkStatus();
}

absl::Status ZeroDdp::ReleaseLazily(absl::Span<Parameter* const> params,
                                    int direction) {
  if (AnyConditional(params)) return absl::OkStatus();  // See Prefetch.
  std::vector<Chunk*> keep;
  if (schedule_.following()) {
    // The next scope's chunks and the prefetch window; in backward, also
    // the chunks the last recomputation used that the scopes up to the
    // next one use again: a recomputed block's chunks stay from its
    // recomputed forward through its backward (one block's, as without a
    // schedule), and no other chunk stays longer than without recompute.
    absl::Span<const StepSchedule::Op> ahead = schedule_.Ahead();
    if (!ahead.empty()) {
      for (int i : ahead.front().params) {
        keep.push_back(params_[i].where.chunk);
      }
    }
    if (in_backward_) {
      const size_t span = StepSchedule::UntilNextRecompute(ahead);
      for (const StepSchedule::Op& op : ahead.first(span)) {
        for (int i : op.params) {
          Chunk* chunk = params_[i].where.chunk;
          if (std::find(recomputed_.begin(), recomputed_.end(), chunk) !=
              recomputed_.end()) {
            keep.push_back(chunk);
          }
        }
      }
    }
    std::vector<Chunk*> window =
        ScheduledChunksAhead(params, options_.max_prefetch);
    keep.insert(keep.end(), window.begin(), window.end());
  } else if (schedule_.recomputing()) {
    // Without a schedule: a recomputed block's chunks stay for its
    // backward, whose scopes release them.
    return absl::OkStatus();
  } else {
    // Keep the chunk of the parameter that follows this op in the
    // direction of travel (often this op's own chunk: the next layer most
    // likely needs it), the chunks in the prefetch window and any still
    // being gathered.
    const int edge = Edge(params, direction);
    keep = ChunksAhead(params, direction, options_.max_prefetch);
    const int next = edge + direction;
    if (next >= 0 && next < static_cast<int>(order_.size())) {
      keep.push_back(params_[order_[next]].where.chunk);
    }
  }
  for (const auto& [chunk, work] : prefetching_) keep.push_back(chunk);
  keep.insert(keep.end(), pinned_.begin(), pinned_.end());
  return chunks_->ReleaseAccessedExcept(keep).status();
}

absl::Status ZeroDdp::CheckWindow(absl::Span<Parameter* const> params,
                                  const char* call) const {
  if (window_ == HookWindow::kAnytime || window_ == HookWindow::kTraining) {
    return absl::OkStatus();
  }
  const std::string name =
      params.empty() ? std::string("(none)") : params.front()->name();
  if (window_ == HookWindow::kIdle) {
    return absl::FailedPreconditionError(absl::StrCat(
        call, " on parameter '", name,
        "' outside Engine::Step and Engine::Evaluate: a forward between "
        "steps (to evaluate) runs through Engine::Evaluate, which counts "
        "no use and takes no grad; any other use would corrupt the next "
        "update"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      call, " on parameter '", name,
      "' in a forward-only pass (Engine::Evaluate): it runs no backward "
      "and takes no grad"));
}

absl::Status ZeroDdp::BeginEvaluation() {
  if (window_ == HookWindow::kEvaluating) {
    return absl::FailedPreconditionError(
        "BeginEvaluation inside a forward-only pass: end it first");
  }
  if (step_started_ || in_backward_) {
    return absl::FailedPreconditionError(
        "BeginEvaluation inside a step (after its first forward hook, "
        "before FinishBackward): evaluate between steps");
  }
  window_before_evaluation_ = window_;
  window_ = HookWindow::kEvaluating;
  evaluation_started_ = false;
  clocks_before_evaluation_ = chunks_->SaveUseClocks();
  return absl::OkStatus();
}

absl::Status ZeroDdp::EvaluationPreForward(
    absl::Span<Parameter* const> params) {
  CZ_RETURN_IF_ERROR(Indices(params).status());
  CZ_RETURN_IF_ERROR(evaluation_order_.PreForward(params));
  if (!evaluation_started_) {
    evaluation_started_ = true;
    // As a step's first forward hook: the same point on every rank.
    if (registered_) CZ_RETURN_IF_ERROR(AccessPinned());
  }
  if (!registered_) CZ_RETURN_IF_ERROR(StreamFirstStep(params));
  CZ_RETURN_IF_ERROR(Use(params));
  return registered_ ? Prefetch(params, +1) : absl::OkStatus();
}

absl::Status ZeroDdp::EvaluationPostForward(
    absl::Span<Parameter* const> params) {
  CZ_RETURN_IF_ERROR(evaluation_order_.PostForward(params));
  for (Parameter* p : params) {
    CZ_ASSIGN_OR_RETURN(ParamInfo * info, Info(*p));
    CZ_RETURN_IF_ERROR(info->where.chunk->SetTensorState(info->where.index,
                                                         TensorState::kHold));
  }
  return registered_ ? ReleaseLazily(params, +1) : absl::OkStatus();
}

absl::Status ZeroDdp::EndEvaluation() {
  if (window_ != HookWindow::kEvaluating) {
    return absl::FailedPreconditionError(
        "EndEvaluation without BeginEvaluation");
  }
  absl::Status status = evaluation_order_.EndStep();
  // Gathers nobody used: finished, so that nothing is left in flight.
  for (auto& [chunk, work] : prefetching_) {
    absl::Status done = work->Wait();
    if (status.ok() && !done.ok()) status = done;
  }
  prefetching_.clear();
  // Before the first step the ranks end their passes together (rounds).
  if (!registered_ && evaluation_started_) {
    absl::Status ended = EndFirstForward();
    if (status.ok()) status = ended;
  }
  absl::Status released = chunks_->ReleaseAccessedExcept({}).status();
  if (status.ok()) status = released;
  chunks_->RestoreUseClocks(clocks_before_evaluation_);
  if (status.ok() && !deferred_.empty()) status = deferred_.front();
  deferred_.clear();
  window_ = window_before_evaluation_;
  evaluation_started_ = false;
  return status;
}

absl::Status ZeroDdp::PreForward(absl::Span<Parameter* const> params) {
  if (window_ == HookWindow::kEvaluating) return EvaluationPreForward(params);
  CZ_RETURN_IF_ERROR(CheckWindow(params, "PreForward"));
  CZ_ASSIGN_OR_RETURN(std::vector<int> indices, Indices(params));
  for (int i : indices) {
    if (params_[i].grad_in_slice) {
      return absl::FailedPreconditionError(absl::StrCat(
          "parameter '", params_[i].param->name(),
          "' is used by a forward scope after its grad was written into its "
          "chunk slice in this step (grad reuse: the slice holds the grad, "
          "not the weights); a recomputed forward must run before the "
          "backward scopes that hand its grads"));
    }
  }
  CZ_RETURN_IF_ERROR(hook_order_.PreForward(params));
  schedule_.Begin(StepSchedule::kForward, std::move(indices));
  if (schedule_.recomputing()) {
    // A recomputation after backward scopes starts afresh.
    if (!recomputing_before_) recomputed_.clear();
    for (Parameter* p : params) {
      Chunk* chunk = params_[index_of_.at(p)].where.chunk;
      if (std::find(recomputed_.begin(), recomputed_.end(), chunk) ==
          recomputed_.end()) {
        recomputed_.push_back(chunk);
      }
    }
  }
  recomputing_before_ = schedule_.recomputing();
  for (Parameter* p : params) {
    CZ_ASSIGN_OR_RETURN(ParamInfo * info, Info(*p));
    if (!in_backward_) ++info->forward_uses;
    if (!registered_ && info->first_use < 0) info->first_use = uses_seen_++;
  }
  if (!step_started_) {
    step_started_ = true;
    // Pinned chunks are gathered at one point, the same on every rank.
    if (registered_) CZ_RETURN_IF_ERROR(AccessPinned());
  }
  if (!registered_) CZ_RETURN_IF_ERROR(StreamFirstStep(params));
  CZ_RETURN_IF_ERROR(Use(params));
  return registered_ ? Prefetch(params, +1) : absl::OkStatus();
}

absl::Status ZeroDdp::PostForward(absl::Span<Parameter* const> params) {
  if (window_ == HookWindow::kEvaluating) return EvaluationPostForward(params);
  CZ_RETURN_IF_ERROR(CheckWindow(params, "PostForward"));
  CZ_RETURN_IF_ERROR(hook_order_.PostForward(params));
  for (Parameter* p : params) {
    CZ_ASSIGN_OR_RETURN(ParamInfo * info, Info(*p));
    CZ_RETURN_IF_ERROR(info->where.chunk->SetTensorState(info->where.index,
                                                         TensorState::kHold));
  }
  // In step 1 only the agreement rounds release (FirstStepRound).
  return registered_ ? ReleaseLazily(params, +1) : absl::OkStatus();
}

absl::Status ZeroDdp::PreBackward(absl::Span<Parameter* const> params) {
  CZ_RETURN_IF_ERROR(CheckWindow(params, "PreBackward"));
  CZ_ASSIGN_OR_RETURN(std::vector<int> indices, Indices(params));
  for (int i : indices) {
    const ParamInfo& info = params_[i];
    if (info.grad_in_slice) {
      return absl::FailedPreconditionError(absl::StrCat(
          "parameter '", info.param->name(),
          "' is used by a backward scope after its grad was written into its "
          "chunk slice in this step (its ",
          info.forward_uses,
          info.forward_uses == 1 ? " forward use has " : " forward uses have ",
          "had their grads; grad reuse: the slice holds the grad, not the "
          "weights): one backward scope and one HandGrad per forward use"));
    }
  }
  CZ_RETURN_IF_ERROR(hook_order_.PreBackward(params));
  schedule_.Begin(StepSchedule::kBackward, std::move(indices));
  recomputing_before_ = false;
  if (!in_backward_) {
    in_backward_ = true;
    if (!registered_) {
      CZ_RETURN_IF_ERROR(EndFirstForward());
      CZ_RETURN_IF_ERROR(Register(), "registering chunks");
      CZ_RETURN_IF_ERROR(AccessPinned());
    }
    // Reduction order: unpinned chunks last first (eagerly, as they become
    // ready), then pinned chunks (in FinishBackward: their readiness
    // depends on the rank).
    reduce_order_.clear();
    const int num = chunks_->num_chunks(param_group_);
    for (int i = num - 1; i >= 0; --i) {
      if (!IsPinned(i)) reduce_order_.push_back(i);
    }
    eager_reductions_ = static_cast<int>(reduce_order_.size());
    for (int i = 0; i < num; ++i) {
      if (IsPinned(i)) reduce_order_.push_back(i);
    }
    reduce_pos_ = 0;
    reduced_.assign(num, false);
  }
  CZ_RETURN_IF_ERROR(Use(params));
  return Prefetch(params, -1);
}

absl::Status ZeroDdp::PostBackward(absl::Span<Parameter* const> params) {
  CZ_RETURN_IF_ERROR(CheckWindow(params, "PostBackward"));
  CZ_RETURN_IF_ERROR(hook_order_.PostBackward(params));
  for (Parameter* p : params) {
    CZ_ASSIGN_OR_RETURN(ParamInfo * info, Info(*p));
    // A parameter whose grad is complete is READY_FOR_REDUCE (where ->
    // HOLD_AFTER_BWD is the documented no-op) or already reduced with its
    // chunk (HOLD or FREE): nothing to do. Otherwise it waits for more
    // grads.
    Chunk& chunk = *info->where.chunk;
    if (chunk.tensor(info->where.index).state == TensorState::kCompute) {
      CZ_RETURN_IF_ERROR(
          chunk.SetTensorState(info->where.index, TensorState::kHoldAfterBwd));
    }
  }
  CZ_RETURN_IF_ERROR(ReduceReady());
  return ReleaseLazily(params, -1);
}

absl::Status ZeroDdp::HandGrad(Parameter& param, const Tensor& grad) {
  Parameter* const one[] = {&param};
  CZ_RETURN_IF_ERROR(CheckWindow(one, "HandGrad"));
  CZ_ASSIGN_OR_RETURN(ParamInfo * info, Info(param));
  if (grad.dtype() != DType::kF32 || grad.shape() != param.shape() ||
      !grad.is_materialized()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grad of parameter '", param.name(), "' is ", grad.DebugString(),
        ", expected f32", ShapeToString(param.shape())));
  }
  CZ_RETURN_IF_ERROR(hook_order_.Grad(param));
  ++info->grads;
  info->had_grad = true;
  if (info->forward_uses > 1 && info->grads < info->forward_uses) {
    // Not the last use: the weights are still needed; keep the sum in f32.
    if (!info->pending.defined()) {
      CZ_ASSIGN_OR_RETURN(info->pending, grad.Clone());
    } else {
      CZ_RETURN_IF_ERROR(AxpyTensor(info->pending, 1.0f, grad));
    }
    return absl::OkStatus();
  }
  if (info->pending.defined()) {
    CZ_RETURN_IF_ERROR(AxpyTensor(info->pending, 1.0f, grad));
    Tensor sum = std::move(info->pending);
    info->pending = Tensor();
    CZ_RETURN_IF_ERROR(WriteGrad(*info, sum));
  } else {
    CZ_RETURN_IF_ERROR(WriteGrad(*info, grad));
  }
  return ReduceReady();
}

absl::Status ZeroDdp::WriteGrad(ParamInfo& info, const Tensor& grad32) {
  // Average over ranks: each rank contributes grad / world_size.
  const float scale = 1.0f / chunks_->process_group().size();
  Chunk& chunk = *info.where.chunk;
  const TensorState state = chunk.tensor(info.where.index).state;
  if (state == TensorState::kHold || state == TensorState::kFree) {
    // Grad for a parameter outside its backward scope: make it legal.
    CZ_RETURN_IF_ERROR(
        chunk.SetTensorState(info.where.index, TensorState::kCompute));
  }
  CZ_RETURN_IF_ERROR(chunk.WriteTensorScaled(info.where.index, grad32, scale),
                     "writing the grad of '", info.param->name(), "'");
  info.grad_in_slice = true;
  info.param->set_holds_grad(true);
  return chunk.SetTensorState(info.where.index, TensorState::kReadyForReduce);
}

absl::Status ZeroDdp::ReduceChunk(int index) {
  reduced_[index] = true;
  return chunks_->ReduceChunk(chunks_->chunk(param_group_, index));
}

bool ZeroDdp::IsPinned(int index) const {
  return std::find(pinned_.begin(), pinned_.end(),
                   chunks_->chunk(param_group_, index)) != pinned_.end();
}

absl::Status ZeroDdp::ReduceReady() {
  while (
      reduce_pos_ < eager_reductions_ &&
      chunks_->chunk(param_group_, reduce_order_[reduce_pos_])->CanReduce()) {
    CZ_RETURN_IF_ERROR(ReduceChunk(reduce_order_[reduce_pos_]));
    ++reduce_pos_;
  }
  return absl::OkStatus();
}

void ZeroDdp::RecordDeferredError(absl::Status status) {
  deferred_.push_back(std::move(status));
}

absl::Status ZeroDdp::LocalStepProblems(const absl::Status& order) {
  for (int i : order_) {
    const ParamInfo& info = params_[i];
    if (info.forward_uses > 0 && info.grads != info.forward_uses) {
      return absl::FailedPreconditionError(absl::StrCat(
          "parameter '", info.param->name(), "' was used ", info.forward_uses,
          info.forward_uses == 1 ? " time" : " times",
          " in this step's forward but handed ", info.grads,
          info.grads == 1 ? " grad" : " grads",
          ": every forward use needs its HandGrad (one per use, "
          "ddp/param_hooks.h); a missing one would train as a zero grad"));
    }
  }
  if (!deferred_.empty()) return deferred_.front();
  return order;
}

absl::Status ZeroDdp::CheckUnusedAgreement(const absl::Status& local) {
  comm::ProcessGroup& group = chunks_->process_group();
  const size_t n = order_.size();
  // How many ranks had each parameter's grad: one i32 sum says both
  // "somewhere" (> 0) and "everywhere" (== world size). One more entry
  // counts the ranks whose step broke the contract.
  std::vector<int32_t> ranks_with_grad(n + 1);
  for (size_t k = 0; k < n; ++k) {
    ranks_with_grad[k] = params_[order_[k]].had_grad ? 1 : 0;
  }
  ranks_with_grad[n] = local.ok() ? 0 : 1;
  comm::AllReduceOptions sum;
  sum.timeout = chunks_->options().comm_timeout;
  CZ_RETURN_IF_ERROR(
      comm::AllReduce(group, comm::MutableBuffer::Of(ranks_with_grad), sum));
  if (ranks_with_grad[n] > 0) {
    // Every rank saw the same count: all of them enter the agreement, and
    // all of them fail, the rank at fault with its own error.
    return comm::AgreeOnStatus(
        group, local,
        "another rank's step broke the model contract (ddp/param_hooks.h)",
        chunks_->options().comm_timeout);
  }
  std::vector<std::string> partial;
  for (size_t k = 0; k < n; ++k) {
    const bool somewhere = ranks_with_grad[k] > 0;
    const bool everywhere = ranks_with_grad[k] == group.size();
    if (somewhere && !everywhere) {
      partial.push_back(
          absl::StrCat("'", params_[order_[k]].param->name(), "'"));
    }
  }
  if (partial.empty() || options_.find_unused_parameters) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "parameters with grads on some ranks but not others in step ", steps_ + 1,
      ": ", absl::StrJoin(partial, ", "),
      "; set find_unused_parameters to reduce the missing grads as zeros"));
}

absl::Status ZeroDdp::AdoptSchedule(std::vector<StepSchedule::Op> ran) {
  // Every rank must follow the same schedule, or their prefetches would
  // issue different collectives: adopt it only where all ranks ran alike.
  // A step without recomputation keeps the order rules, which already
  // foresee it; the agreement runs anyway, as no rank knows alone whether
  // another recomputed.
  comm::ProcessGroup& group = chunks_->process_group();
  const std::vector<int64_t> mine = {
      static_cast<int64_t>(StepSchedule::Fingerprint(ran))};
  std::vector<int64_t> all(group.size());
  comm::AllGatherOptions options;
  options.timeout = chunks_->options().comm_timeout;
  options.tag = "step schedule agreement";
  CZ_RETURN_IF_ERROR(comm::AllGather(group, comm::ConstBuffer::Of(mine),
                                     comm::MutableBuffer::Of(all), options),
                     "agreeing on the schedule of step 1");
  for (int64_t theirs : all) {
    if (theirs != mine[0]) return absl::OkStatus();
  }
  if (!StepSchedule::Recomputes(ran)) return absl::OkStatus();
  schedule_.Adopt(std::move(ran));
  SetUseSchedule();
  return absl::OkStatus();
}

void ZeroDdp::ClearGrads() {
  for (ParamInfo& info : params_) {
    info.param->set_grad(Tensor());
    // The optimizer puts the weights back from here on.
    info.param->set_holds_grad(false);
  }
}

absl::Status ZeroDdp::FinishBackward() {
  absl::Status status = absl::OkStatus();
  if (!registered_) {
    status = absl::FailedPreconditionError(
        "FinishBackward before any backward hook: nothing to reduce");
  }
  // Reduce what is left, in the same global order on every rank; grads that
  // never arrived here are zeros.
  for (; status.ok() && reduce_pos_ < static_cast<int>(reduce_order_.size());
       ++reduce_pos_) {
    Chunk* chunk = chunks_->chunk(param_group_, reduce_order_[reduce_pos_]);
    status = chunk->MaterialiseZeros();
    for (int i = 0; status.ok() && i < chunk->num_tensors(); ++i) {
      const TensorState state = chunk->tensor(i).state;
      if (state == TensorState::kReadyForReduce) continue;
      if (state != TensorState::kCompute) {
        status = chunk->SetTensorState(i, TensorState::kCompute);
      }
      if (!status.ok()) break;
      CZ_ASSIGN_OR_RETURN(Tensor zeros, Tensor::Zeros(chunk->tensor(i).shape,
                                                      options_.compute_dtype));
      status = chunk->CopyTensorToChunkSlice(i, zeros);
      if (status.ok()) {
        status = chunk->SetTensorState(i, TensorState::kReadyForReduce);
      }
    }
    if (status.ok()) status = ReduceChunk(reduce_order_[reduce_pos_]);
  }
  // Prefetches nobody used (a model that skipped layers): finish them so
  // that no collective is left in flight.
  for (auto& [chunk, work] : prefetching_) {
    absl::Status done = work->Wait();
    if (status.ok() && !done.ok()) status = done;
  }
  prefetching_.clear();
  const absl::Status order = hook_order_.EndStep();
  if (status.ok()) status = CheckUnusedAgreement(LocalStepProblems(order));
  std::vector<StepSchedule::Op> ran = schedule_.EndStep();
  if (status.ok() && steps_ == 0) status = AdoptSchedule(std::move(ran));
  // Grads are views of what this rank holds of the reduced chunks; every
  // slice holds its grad now (zeros where none came), not the weights.
  for (ParamInfo& info : params_) {
    if (info.registered) {
      info.param->set_grad(info.where.chunk->ShardView(info.where.index));
      info.param->set_holds_grad(true);
    }
    info.forward_uses = 0;
    info.grads = 0;
    info.had_grad = false;
    info.grad_in_slice = false;
    info.pending = Tensor();
  }
  deferred_.clear();
  recomputed_.clear();
  recomputing_before_ = false;
  in_backward_ = false;
  step_started_ = false;
  ++steps_;
  last_counters_ = counters_;
  counters_ = StepCounters();
  return status;
}

}  // namespace chunkzero
