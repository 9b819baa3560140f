#include "ddp/zero_ddp.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "comm/process_group.h"
#include "tensor/cast_kernels.h"
#include "tensor/elementwise_kernels.h"

namespace chunkzero {
namespace {

// Groups are named for what they hold: the compute copy ("f16_param",
// "bf16_param" or "f32_param") and the f32 masters ("f32_master"). Until
// step 1 has shown the order of first use they are the ".decl" groups, in
// declaration order.
std::string ParamGroupName(DType compute_dtype) {
  return absl::StrCat(DTypeName(compute_dtype), "_param");
}
constexpr char kMasterGroup[] = "f32_master";
constexpr char kDeclSuffix[] = ".decl";

// `t` converted to `dtype` in new CPU storage.
absl::StatusOr<Tensor> CastTo(const Tensor& t, DType dtype) {
  CZ_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(t.shape(), dtype));
  CZ_RETURN_IF_ERROR(
      Cast(out.raw_data(), dtype, t.raw_data(), t.dtype(), t.numel()));
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ZeroDdp>> ZeroDdp::Create(
    Module* model, ChunkManager* chunks, const ZeroDdpOptions& options) {
  // The model is only listed here; it is driven through the hooks.
  std::vector<Parameter*> params = model->Parameters();
  if (params.empty()) {
    return absl::InvalidArgumentError("ZeroDdp: the model has no parameters");
  }
  absl::flat_hash_set<std::string> names;
  for (Parameter* p : params) {
    if (!names.insert(p->name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("ZeroDdp: two parameters are named '", p->name(), "'"));
    }
    if (!p->data().is_materialized() ||
        !p->data().device().is_host_accessible()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ZeroDdp: parameter '", p->name(), "' must start in host memory, is ",
          p->data().DebugString()));
    }
  }
  comm::ProcessGroup& group = chunks->process_group();
  if (!group.SupportsDType(options.compute_dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ZeroDdp: backend ", group.backend_name(),
                     " cannot reduce ", DTypeName(options.compute_dtype)));
  }
  // Everyone starts from rank 0's values, rounded to the compute dtype.
  for (Parameter* p : params) {
    Tensor& data = p->mutable_data();
    CZ_RETURN_IF_ERROR(
        comm::Broadcast(group,
                        comm::MutableBuffer{data.raw_data(),
                                            static_cast<size_t>(data.numel()),
                                            data.dtype()}),
        "broadcasting parameter '", p->name(), "' from rank 0");
  }
  auto ddp =
      std::unique_ptr<ZeroDdp>(new ZeroDdp(chunks, options, std::move(params)));
  auto to_f32 = [&](ParamInfo& info) -> absl::StatusOr<Tensor> {
    return CastTo(info.param->data(), DType::kF32);
  };
  if (!options.first_use_order.empty()) {
    CZ_ASSIGN_OR_RETURN(std::vector<int> order,
                        ddp->OrderFromNames(options.first_use_order));
    CZ_RETURN_IF_ERROR(ddp->BuildGroups(ParamGroupName(options.compute_dtype),
                                        kMasterGroup, order, to_f32));
    ddp->registered_ = true;
    return ddp;
  }
  // Until step 1 has shown the order of first use, the parameters sit in
  // chunks in declaration order: sharded from the start, with rank 0's f32
  // values as masters. The model's own tensors are dropped here.
  std::vector<int> declaration(ddp->params_.size());
  for (size_t i = 0; i < declaration.size(); ++i) declaration[i] = i;
  CZ_RETURN_IF_ERROR(ddp->BuildGroups(
      absl::StrCat(ParamGroupName(options.compute_dtype), kDeclSuffix),
      absl::StrCat(kMasterGroup, kDeclSuffix), declaration, to_f32));
  return ddp;
}

absl::StatusOr<std::vector<int>> ZeroDdp::OrderFromNames(
    const std::vector<std::string>& names) const {
  absl::flat_hash_map<std::string, int> by_name;
  for (size_t i = 0; i < params_.size(); ++i) {
    by_name[params_[i].param->name()] = static_cast<int>(i);
  }
  std::vector<int> order;
  std::vector<bool> seen(params_.size(), false);
  for (const std::string& name : names) {
    auto it = by_name.find(name);
    if (it == by_name.end() || seen[it->second]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ZeroDdp: first_use_order names '", name, "' ",
          it == by_name.end() ? "which is not a parameter of the model"
                              : "twice"));
    }
    seen[it->second] = true;
    order.push_back(it->second);
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!seen[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("ZeroDdp: first_use_order leaves out parameter '",
                       params_[i].param->name(), "'"));
    }
  }
  return order;
}

ZeroDdp::ZeroDdp(ChunkManager* chunks, const ZeroDdpOptions& options,
                 std::vector<Parameter*> params)
    : chunks_(chunks), options_(options) {
  params_.resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    params_[i].param = params[i];
    params_[i].declaration_index = static_cast<int>(i);
    index_of_[params[i]] = static_cast<int>(i);
  }
}

absl::StatusOr<ZeroDdp::ParamInfo*> ZeroDdp::Info(const Parameter& param) {
  auto it = index_of_.find(&param);
  if (it == index_of_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameter '", param.name(), "' is not one of the model's"));
  }
  return &params_[it->second];
}

std::vector<std::string> ZeroDdp::registration_order() const {
  std::vector<std::string> names;
  for (int i : order_) names.push_back(params_[i].param->name());
  return names;
}

absl::Status ZeroDdp::BuildGroups(
    const std::string& param_group, const std::string& master_group,
    const std::vector<int>& order,
    const std::function<absl::StatusOr<Tensor>(ParamInfo&)>& master_value) {
  CZ_RETURN_IF_ERROR(chunks_->CreateGroup(param_group, options_.compute_dtype,
                                          MemoryCategory::kParam));
  // Masters exist in f32 mode too: grad reuse overwrites the compute copy,
  // so the weights must live somewhere else until the optimizer writes them
  // back.
  CZ_RETURN_IF_ERROR(chunks_->CreatePairedGroup(
      master_group, param_group, DType::kF32, MemoryCategory::kMaster,
      options_.master_device));
  order_.clear();
  for (ParamInfo& info : params_) info.registered = false;
  for (int i : order) {
    ParamInfo& info = params_[i];
    Parameter& p = *info.param;
    CZ_ASSIGN_OR_RETURN(Tensor master, master_value(info));
    CZ_ASSIGN_OR_RETURN(Tensor compute,
                        CastTo(p.data(), options_.compute_dtype));
    CZ_ASSIGN_OR_RETURN(Tensor view,
                        chunks_->AppendTensor(param_group, p.name(), compute));
    p.set_data(std::move(view));
    CZ_RETURN_IF_ERROR(
        chunks_->AppendTensor(master_group, p.name(), master).status());
    CZ_ASSIGN_OR_RETURN(info.where, chunks_->Locate(param_group, p.name()));
    info.registered = true;
    info.order = static_cast<int>(order_.size());
    order_.push_back(i);
  }
  CZ_RETURN_IF_ERROR(chunks_->CloseGroup(param_group));
  CZ_RETURN_IF_ERROR(chunks_->CloseGroup(master_group));
  param_group_ = param_group;
  master_group_ = master_group;
  return absl::OkStatus();
}

absl::Status ZeroDdp::AccessAll() {
  for (int c = 0; c < chunks_->num_chunks(param_group_); ++c) {
    Chunk* chunk = chunks_->chunk(param_group_, c);
    if (chunk->is_accessed()) continue;
    ++counters_.chunk_accesses;
    CZ_RETURN_IF_ERROR(chunks_->AccessChunk(chunk));
  }
  return absl::OkStatus();
}

absl::Status ZeroDdp::Register() {
  comm::ProcessGroup& group = chunks_->process_group();
  const int world = group.size();
  const size_t n = params_.size();
  // Every rank's first-use positions (-1: unused).
  std::vector<int32_t> mine(n), all(n * world);
  for (size_t i = 0; i < n; ++i) mine[i] = params_[i].first_use;
  CZ_RETURN_IF_ERROR(comm::AllGather(group, comm::ConstBuffer::Of(mine),
                                     comm::MutableBuffer::Of(all)),
                     "agreeing on the first-use order");
  // Rank 0's first-use order, then parameters used only elsewhere, in
  // declaration order.
  std::vector<std::pair<std::pair<int, int32_t>, int>> keyed;
  std::vector<int> unused;
  for (size_t i = 0; i < n; ++i) {
    bool used_elsewhere = false;
    int users = all[i] >= 0 ? 1 : 0;
    for (int r = 1; r < world; ++r) {
      used_elsewhere |= all[r * n + i] >= 0;
      users += all[r * n + i] >= 0 ? 1 : 0;
    }
    params_[i].conditional = users > 0 && users < world;
    if (all[i] >= 0) {
      keyed.push_back({{0, all[i]}, static_cast<int>(i)});
    } else if (used_elsewhere) {
      keyed.push_back({{1, static_cast<int32_t>(i)}, static_cast<int>(i)});
    } else {
      unused.push_back(static_cast<int>(i));
      unused_.push_back(params_[i].param->name());
    }
  }
  std::sort(keyed.begin(), keyed.end());
  std::vector<int> order;
  for (const auto& [key, i] : keyed) order.push_back(i);

  // Repack from the declaration-order chunks, which step 1's forward left
  // materialised. Masters are gathered on demand in the new order (the same
  // sequence on every rank) and released once all their tensors moved.
  CZ_RETURN_IF_ERROR(AccessAll());
  const std::string decl_param_group = param_group_;
  const std::string decl_master_group = master_group_;
  absl::flat_hash_map<Chunk*, int> left;
  for (int i : order) {
    CZ_ASSIGN_OR_RETURN(
        TensorLocation m,
        chunks_->Locate(decl_master_group, params_[i].param->name()));
    ++left[m.chunk];
  }
  // Parameters no rank used keep a copy of their own.
  for (int i : unused) {
    Parameter& p = *params_[i].param;
    CZ_ASSIGN_OR_RETURN(Tensor copy, CastTo(p.data(), options_.compute_dtype));
    p.set_data(std::move(copy));
  }
  CZ_RETURN_IF_ERROR(BuildGroups(
      ParamGroupName(options_.compute_dtype), kMasterGroup, order,
      [&](ParamInfo& info) -> absl::StatusOr<Tensor> {
        CZ_ASSIGN_OR_RETURN(
            TensorLocation m,
            chunks_->Locate(decl_master_group, info.param->name()));
        CZ_RETURN_IF_ERROR(chunks_->AccessChunk(m.chunk));
        CZ_ASSIGN_OR_RETURN(Tensor value, m.chunk->TensorView(m.index).Clone());
        if (--left[m.chunk] == 0)
          CZ_RETURN_IF_ERROR(chunks_->ReleaseChunk(m.chunk));
        return value;
      }));
  for (int i : unused) params_[i].registered = false;
  CZ_RETURN_IF_ERROR(chunks_->RemoveGroup(decl_master_group));
  CZ_RETURN_IF_ERROR(chunks_->RemoveGroup(decl_param_group));

  for (ParamInfo& info : params_) {
    if (info.registered && info.conditional &&
        std::find(pinned_.begin(), pinned_.end(), info.where.chunk) ==
            pinned_.end()) {
      pinned_.push_back(info.where.chunk);
    }
  }
  std::sort(pinned_.begin(), pinned_.end(),
            [&](Chunk* a, Chunk* b) { return ChunkIndex(a) < ChunkIndex(b); });
  registered_ = true;
  return absl::OkStatus();
}

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
      absl::Status done = it->second->Wait();
      prefetching_.erase(it);
      CZ_RETURN_IF_ERROR(done, "prefetching chunk ", chunk->name());
    } else if (!chunk->is_accessed()) {
      ++counters_.chunk_accesses;
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
  for (Chunk* chunk : ChunksAhead(params, direction, options_.max_prefetch)) {
    if (chunk->is_accessed()) continue;
    // In backward, a chunk already reduced this step needs no gather.
    if (direction < 0 && reduced_[ChunkIndex(chunk)]) {
      continue;
    }
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
  for (int i = 0; i < chunks_->num_chunks(param_group_); ++i) {
    if (chunks_->chunk(param_group_, i) == chunk) return i;
  }
  return -1;
}

absl::Status ZeroDdp::ReleaseLazily(absl::Span<Parameter* const> params,
                                    int direction) {
  if (AnyConditional(params)) return absl::OkStatus();  // See Prefetch.
  // Keep the chunk of the parameter that follows this op in the direction
  // of travel (often this op's own chunk: the next layer most likely needs
  // it), the chunks in the prefetch window and any still being gathered.
  const int edge = Edge(params, direction);
  std::vector<Chunk*> keep =
      ChunksAhead(params, direction, options_.max_prefetch);
  const int next = edge + direction;
  if (next >= 0 && next < static_cast<int>(order_.size())) {
    keep.push_back(params_[order_[next]].where.chunk);
  }
  for (const auto& [chunk, work] : prefetching_) keep.push_back(chunk);
  keep.insert(keep.end(), pinned_.begin(), pinned_.end());
  return chunks_->ReleaseAccessedExcept(keep).status();
}

absl::Status ZeroDdp::PreForward(absl::Span<Parameter* const> params) {
  CZ_RETURN_IF_ERROR(hook_order_.PreForward(params));
  for (Parameter* p : params) {
    CZ_ASSIGN_OR_RETURN(ParamInfo * info, Info(*p));
    if (!in_backward_) ++info->forward_uses;
    if (!registered_ && info->first_use < 0) info->first_use = uses_seen_++;
  }
  if (!step_started_) {
    step_started_ = true;
    // Step 1 (declaration-order chunks): every rank gathers every chunk at
    // this one point, so ranks that use different parameters issue the
    // same collectives. Later steps gather only the pinned chunks here.
    CZ_RETURN_IF_ERROR(registered_ ? AccessPinned() : AccessAll());
  }
  CZ_RETURN_IF_ERROR(Use(params));
  return registered_ ? Prefetch(params, +1) : absl::OkStatus();
}

absl::Status ZeroDdp::PostForward(absl::Span<Parameter* const> params) {
  CZ_RETURN_IF_ERROR(hook_order_.PostForward(params));
  for (Parameter* p : params) {
    CZ_ASSIGN_OR_RETURN(ParamInfo * info, Info(*p));
    CZ_RETURN_IF_ERROR(info->where.chunk->SetTensorState(info->where.index,
                                                         TensorState::kHold));
  }
  // Step 1 keeps everything until the repack.
  return registered_ ? ReleaseLazily(params, +1) : absl::OkStatus();
}

absl::Status ZeroDdp::PreBackward(absl::Span<Parameter* const> params) {
  CZ_RETURN_IF_ERROR(hook_order_.PreBackward(params));
  if (!in_backward_) {
    in_backward_ = true;
    if (!registered_) {
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
      AxpyF32(info->pending.data<float>(), 1.0f, grad.data<float>(),
              grad.numel());
    }
    return absl::OkStatus();
  }
  if (info->pending.defined()) {
    AxpyF32(info->pending.data<float>(), 1.0f, grad.data<float>(),
            grad.numel());
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
  CZ_ASSIGN_OR_RETURN(Tensor scaled, grad32.Clone());
  ScaleF32(scaled.data<float>(), scale, scaled.numel());
  CZ_ASSIGN_OR_RETURN(Tensor cast, CastTo(scaled, options_.compute_dtype));
  Chunk& chunk = *info.where.chunk;
  const TensorState state = chunk.tensor(info.where.index).state;
  if (state == TensorState::kHold || state == TensorState::kFree) {
    // Grad for a parameter outside its backward scope: make it legal.
    CZ_RETURN_IF_ERROR(
        chunk.SetTensorState(info.where.index, TensorState::kCompute));
  }
  CZ_RETURN_IF_ERROR(chunk.CopyTensorToChunkSlice(info.where.index, cast),
                     "writing the grad of '", info.param->name(), "'");
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

absl::Status ZeroDdp::CheckUnusedAgreement() {
  comm::ProcessGroup& group = chunks_->process_group();
  const size_t n = order_.size();
  // How many ranks had each parameter's grad: one i32 sum says both
  // "somewhere" (> 0) and "everywhere" (== world size).
  std::vector<int32_t> ranks_with_grad(n);
  for (size_t k = 0; k < n; ++k) {
    ranks_with_grad[k] = params_[order_[k]].had_grad ? 1 : 0;
  }
  comm::AllReduceOptions sum;
  sum.timeout = chunks_->options().comm_timeout;
  CZ_RETURN_IF_ERROR(
      comm::AllReduce(group, comm::MutableBuffer::Of(ranks_with_grad), sum));
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

absl::Status ZeroDdp::VisitFullParameters(
    bool all_ranks,
    const std::function<absl::Status(const std::string&, const Tensor&)>& fn) {
  const bool visit = all_ranks || chunks_->process_group().rank() == 0;
  for (int c = 0; c < chunks_->num_chunks(master_group_); ++c) {
    Chunk* chunk = chunks_->chunk(master_group_, c);
    CZ_RETURN_IF_ERROR(chunks_->AccessChunk(chunk));
    for (int i = 0; visit && i < chunk->num_tensors(); ++i) {
      CZ_ASSIGN_OR_RETURN(Tensor value, chunk->TensorView(i).Clone());
      CZ_RETURN_IF_ERROR(fn(chunk->tensor(i).name, value));
    }
    CZ_RETURN_IF_ERROR(chunks_->ReleaseChunk(chunk));
  }
  for (ParamInfo& info : params_) {
    if (info.registered || !visit) continue;
    CZ_ASSIGN_OR_RETURN(Tensor value, CastTo(info.param->data(), DType::kF32));
    CZ_RETURN_IF_ERROR(fn(info.param->name(), value));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, Tensor>> ZeroDdp::GatherStateDict(
    bool all_ranks) {
  std::map<std::string, Tensor> dict;
  CZ_RETURN_IF_ERROR(VisitFullParameters(
      all_ranks, [&](const std::string& name, const Tensor& value) {
        dict[name] = value;
        return absl::OkStatus();
      }));
  return dict;
}

absl::Status ZeroDdp::LoadStateDict(
    const std::map<std::string, Tensor>& values) {
  // Check everything before writing anything.
  for (const ParamInfo& info : params_) {
    auto it = values.find(info.param->name());
    if (it == values.end()) {
      return absl::NotFoundError(absl::StrCat("state dict has no parameter '",
                                              info.param->name(), "'"));
    }
    if (it->second.shape() != info.param->shape()) {
      return absl::InvalidArgumentError(
          absl::StrCat("state dict value of '", info.param->name(), "' is ",
                       it->second.DebugString(), ", the parameter is ",
                       ShapeToString(info.param->shape())));
    }
  }
  for (ParamInfo& info : params_) {
    const Tensor& value = values.at(info.param->name());
    CZ_ASSIGN_OR_RETURN(Tensor f32, CastTo(value, DType::kF32));
    CZ_ASSIGN_OR_RETURN(Tensor compute, CastTo(value, options_.compute_dtype));
    if (!info.registered) {  // Kept out of chunks: no rank uses it.
      info.param->set_data(std::move(compute));
      continue;
    }
    CZ_RETURN_IF_ERROR(chunks_->CopyTensorToChunkSlice(
        master_group_, info.param->name(), f32));
    CZ_RETURN_IF_ERROR(chunks_->CopyTensorToChunkSlice(
        param_group_, info.param->name(), compute));
  }
  return absl::OkStatus();
}

absl::Status ZeroDdp::RestoreParamsFromMasters() {
  for (int i = 0; i < chunks_->num_chunks(param_group_); ++i) {
    Chunk* param = chunks_->chunk(param_group_, i);
    Chunk* master = chunks_->chunk(master_group_, i);
    if (param->layout() == ChunkLayout::kOwner && !param->is_holder()) continue;
    // The payload each rank keeps at rest: the shard, or the whole chunk.
    Tensor to = param->ShardStorageView();
    Tensor from = master->ShardStorageView();
    if (!to.is_materialized() || !from.is_materialized()) continue;
    CZ_RETURN_IF_ERROR(Cast(to.raw_data(), to.dtype(), from.raw_data(),
                            from.dtype(), to.numel()),
                       "restoring chunk ", param->name(), " from its masters");
  }
  return absl::OkStatus();
}

void ZeroDdp::ClearGrads() {
  for (ParamInfo& info : params_) info.param->set_grad(Tensor());
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
  if (status.ok()) status = CheckUnusedAgreement();
  absl::Status order = hook_order_.EndStep();
  if (status.ok() && !deferred_.empty()) status = deferred_.front();
  if (status.ok()) status = order;
  // Grads are views of what this rank holds of the reduced chunks.
  for (ParamInfo& info : params_) {
    if (info.registered) {
      info.param->set_grad(info.where.chunk->ShardView(info.where.index));
    }
    info.forward_uses = 0;
    info.grads = 0;
    info.had_grad = false;
    info.pending = Tensor();
  }
  deferred_.clear();
  in_backward_ = false;
  step_started_ = false;
  ++steps_;
  last_counters_ = counters_;
  counters_ = StepCounters();
  return status;
}

}  // namespace chunkzero
