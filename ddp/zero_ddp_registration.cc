// ZeroDdp's registration: Create, packing the parameters into their chunk
// groups, and the agreement on the first-use order after step 1.
#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "comm/process_group.h"
#include "ddp/zero_ddp.h"
#include "ddp/zero_ddp_internal.h"
#include "tensor/ops/cast_tensor.h"

namespace chunkzero {
namespace zero_ddp_internal {

absl::StatusOr<Tensor> CastTo(const Tensor& t, DType dtype) {
  CZ_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(t.shape(), dtype));
  CZ_RETURN_IF_ERROR(CastTensor(out, t));
  return out;
}

}  // namespace zero_ddp_internal

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

}  // namespace

using zero_ddp_internal::CastTo;

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
    if (!p->is_deferred() && (!p->data().is_materialized() ||
                              !p->data().device().is_host_accessible())) {
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
  // Everyone starts from rank 0's values, rounded to the compute dtype. A
  // deferred parameter is made, broadcast and registered one at a time
  // (to_f32), so only one parameter's values exist beside the chunks.
  auto broadcast = [&](Parameter& p) -> absl::Status {
    Tensor& data = p.mutable_data();
    if (!data.device().is_host_accessible()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ZeroDdp: parameter '", p.name(),
                       "' must start in host memory, is ", data.DebugString()));
    }
    CZ_RETURN_IF_ERROR(
        comm::Broadcast(group,
                        comm::MutableBuffer{data.raw_data(),
                                            static_cast<size_t>(data.numel()),
                                            data.dtype()}),
        "broadcasting parameter '", p.name(), "' from rank 0");
    return absl::OkStatus();
  };
  for (Parameter* p : params) {
    if (!p->is_deferred()) CZ_RETURN_IF_ERROR(broadcast(*p));
  }
  auto ddp =
      std::unique_ptr<ZeroDdp>(new ZeroDdp(chunks, options, std::move(params)));
  auto to_f32 = [&](ParamInfo& info) -> absl::StatusOr<Tensor> {
    Parameter& p = *info.param;
    if (p.is_deferred()) {
      CZ_RETURN_IF_ERROR(p.Materialize(), "ZeroDdp");
      CZ_RETURN_IF_ERROR(broadcast(p));
    }
    return CastTo(p.data(), DType::kF32);
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

void ZeroDdp::SetUseSchedule() {
  std::vector<Chunk*> uses;
  if (!schedule_.adopted().empty()) {
    // The scopes as they ran, recomputed ones included.
    for (const StepSchedule::Op& op : schedule_.adopted()) {
      for (int i : op.params) {
        Chunk* chunk = params_[i].where.chunk;
        if (chunk != nullptr && (uses.empty() || uses.back() != chunk)) {
          uses.push_back(chunk);
        }
      }
    }
    chunks_->SetUseSchedule(std::move(uses));
    return;
  }
  // Forward uses the chunks in registration order, backward in reverse.
  for (int i : order_) {
    Chunk* chunk = params_[i].where.chunk;
    if (uses.empty() || uses.back() != chunk) uses.push_back(chunk);
  }
  const size_t forward = uses.size();
  for (size_t k = forward; k > 0; --k) uses.push_back(uses[k - 1]);
  chunks_->SetUseSchedule(std::move(uses));
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
    // A weight read while its slice holds the grad fails the step (the
    // first few reads are kept; one is enough to name the parameter).
    params[i]->set_holds_grad(false);
    params[i]->set_read_guard([this](const Parameter& p) {
      if (deferred_.size() >= 8) return;
      deferred_.push_back(absl::FailedPreconditionError(absl::StrCat(
          "parameter '", p.name(),
          "' was read (data()) after its grad was written into its chunk "
          "slice in this step: the slice holds the grad, not the weights "
          "(grad reuse), until the optimizer step puts them back; a "
          "backward reads the weights before its HandGrad "
          "(ddp/param_hooks.h)")));
    });
  }
}

ZeroDdp::~ZeroDdp() {
  for (ParamInfo& info : params_) {
    info.param->set_read_guard(nullptr);
    info.param->set_holds_grad(false);
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
  // Each master chunk goes to disk as soon as it is complete, before the
  // next one is allocated.
  if (options_.master_disk != nullptr) {
    CZ_RETURN_IF_ERROR(
        chunks_->SpillWhenComplete(master_group, options_.master_disk),
        "ZeroDdp: registering the masters");
  }
  order_.clear();
  for (ParamInfo& info : params_) info.registered = false;
  for (int i : order) {
    ParamInfo& info = params_[i];
    Parameter& p = *info.param;
    CZ_ASSIGN_OR_RETURN(Tensor master, master_value(info));
    // The compute copy is the master rounded once (exactly the parameter
    // rounded once: widening to f32 is exact).
    CZ_ASSIGN_OR_RETURN(Tensor compute, CastTo(master, options_.compute_dtype));
    CZ_ASSIGN_OR_RETURN(Tensor view,
                        chunks_->AppendTensor(param_group, p.name(), compute));
    p.set_data(std::move(view));
    CZ_RETURN_IF_ERROR(
        chunks_->AppendTensor(master_group, p.name(), master).status(),
        "ZeroDdp: registering the masters");
    CZ_ASSIGN_OR_RETURN(info.where, chunks_->Locate(param_group, p.name()));
    info.registered = true;
    info.order = static_cast<int>(order_.size());
    order_.push_back(i);
  }
  CZ_RETURN_IF_ERROR(chunks_->CloseGroup(param_group));
  CZ_RETURN_IF_ERROR(chunks_->CloseGroup(master_group),
                     "ZeroDdp: registering the masters");
  chunk_index_.clear();
  for (int c = 0; c < chunks_->num_chunks(param_group); ++c) {
    chunk_index_[chunks_->chunk(param_group, c)] = c;
  }
  param_group_ = param_group;
  master_group_ = master_group;
  SetUseSchedule();
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

  // In declaration order already, with every parameter used: the chunks
  // are already packed in the agreed order; only their names change.
  bool in_place = unused.empty();
  for (size_t k = 0; in_place && k < order.size(); ++k) {
    in_place = order[k] == static_cast<int>(k);
  }
  if (in_place) {
    CZ_RETURN_IF_ERROR(chunks_->RenameGroup(master_group_, kMasterGroup));
    CZ_RETURN_IF_ERROR(chunks_->RenameGroup(
        param_group_, ParamGroupName(options_.compute_dtype)));
    param_group_ = ParamGroupName(options_.compute_dtype);
    master_group_ = kMasterGroup;
  } else {
    CZ_RETURN_IF_ERROR(Repack(order, unused));
  }
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

absl::Status ZeroDdp::Repack(const std::vector<int>& order,
                             const std::vector<int>& unused) {
  // Repack from the masters: the compute copy is their rounding (nothing
  // has written either since Create or LoadStateDict), so the
  // declaration-order compute chunks, which the last round released, are
  // freed first. Masters are gathered on demand in the new order (the same
  // sequence on every rank), where they rest (host memory, when
  // offloaded), and freed once all their tensors moved: the repack holds
  // about one declaration master chunk beyond what the step holds anyway.
  const std::string decl_param_group = param_group_;
  const std::string decl_master_group = master_group_;
  for (int c = 0; c < chunks_->num_chunks(decl_param_group); ++c) {
    chunks_->DropChunkPayload(chunks_->chunk(decl_param_group, c));
  }
  absl::flat_hash_map<Chunk*, int> left;
  for (const ParamInfo& info : params_) {
    CZ_ASSIGN_OR_RETURN(TensorLocation m,
                        chunks_->Locate(decl_master_group, info.param->name()));
    ++left[m.chunk];
  }
  auto master_value = [&](ParamInfo& info) -> absl::StatusOr<Tensor> {
    CZ_ASSIGN_OR_RETURN(TensorLocation m,
                        chunks_->Locate(decl_master_group, info.param->name()));
    if (!m.chunk->is_accessed()) {
      // (A master resting on disk rests in host memory: Access reads it.)
      if (!m.chunk->rests_on_disk()) {
        CZ_RETURN_IF_ERROR(chunks_->MoveChunk(m.chunk, m.chunk->rest_device()));
      }
      CZ_RETURN_IF_ERROR(chunks_->AccessChunk(m.chunk));
    }
    CZ_ASSIGN_OR_RETURN(Tensor value, m.chunk->TensorView(m.index).Clone());
    if (--left[m.chunk] == 0) chunks_->DropChunkPayload(m.chunk);
    return value;
  };
  CZ_RETURN_IF_ERROR(BuildGroups(ParamGroupName(options_.compute_dtype),
                                 kMasterGroup, order, master_value));
  // Parameters no rank used keep a copy of their own.
  for (int i : unused) {
    CZ_ASSIGN_OR_RETURN(Tensor master, master_value(params_[i]));
    CZ_ASSIGN_OR_RETURN(Tensor copy, CastTo(master, options_.compute_dtype));
    params_[i].param->set_data(std::move(copy));
  }
  CZ_RETURN_IF_ERROR(chunks_->RemoveGroup(decl_master_group));
  return chunks_->RemoveGroup(decl_param_group);
}

}  // namespace chunkzero
