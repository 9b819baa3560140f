// ZeroDdp's state dict (consolidated f32 values, gathered and loaded one
// master chunk at a time) and the restore of the compute weights from the
// masters.
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "chunk/chunk_layout.h"
#include "ddp/zero_ddp.h"
#include "ddp/zero_ddp_internal.h"
#include "tensor/ops/cast_tensor.h"

namespace chunkzero {

using zero_ddp_internal::CastTo;

absl::Status ZeroDdp::VisitFullParameters(
    bool all_ranks,
    const std::function<absl::Status(const std::string&, const Tensor&)>& fn) {
  const bool visit = all_ranks || chunks_->process_group().rank() == 0;
  for (int c = 0; c < chunks_->num_chunks(master_group_); ++c) {
    Chunk* chunk = chunks_->chunk(master_group_, c);
    CZ_RETURN_IF_ERROR(chunks_->AccessChunk(chunk));
    for (int i = 0; visit && i < chunk->num_tensors(); ++i) {
      CZ_ASSIGN_OR_RETURN(Tensor value, chunk->TensorView(i).To(Device::Cpu()));
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
    // The payload each rank keeps at rest: the shard, the whole chunk, or
    // nothing (a non-owner).
    if (RestElements(param->sharding()) == 0) continue;
    // A parameter payload the host tier keeps between uses may be on disk
    // (holding the reduced grads): it comes back, pinned while written.
    if (param->keeps_payload_between_uses()) {
      CZ_RETURN_IF_ERROR(param->LoadPayload(), "restoring chunk ",
                         param->name(), " from its masters");
    }
    param->PinPayload();
    const absl::Status restored = RestoreChunk(param, master);
    param->UnpinPayload();
    CZ_RETURN_IF_ERROR(restored);
  }
  // The slices hold the weights again.
  for (ParamInfo& info : params_) info.param->set_holds_grad(false);
  return absl::OkStatus();
}

absl::Status ZeroDdp::RestoreChunk(Chunk* param, Chunk* master) {
  {
    Tensor to = param->ShardStorageView();
    Tensor from = master->ShardStorageView();
    if (master->payload_on_disk()) {
      // Masters resting on disk (the NVMe tier) are read back for this.
      CZ_ASSIGN_OR_RETURN(from, Tensor::Empty(from.shape(), DType::kF32));
      CZ_RETURN_IF_ERROR(master->ReadRestPayload(from.raw_data()),
                         "restoring chunk ", param->name(),
                         " from its masters");
    }
    if (!to.is_materialized() || !from.is_materialized()) {
      if (!param->rests_on_disk()) return absl::OkStatus();
      return absl::FailedPreconditionError(
          absl::StrCat("restoring chunk ", param->name(),
                       " from its masters: its payload is not in memory"));
    }
    CZ_RETURN_IF_ERROR(CastTensor(to, from), "restoring chunk ", param->name(),
                       " from its masters");
  }
  return absl::OkStatus();
}

}  // namespace chunkzero
