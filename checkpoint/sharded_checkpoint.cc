#include "checkpoint/sharded_checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file.h"
#include "base/status_macros.h"
#include "chunk/chunk_layout.h"
#include "chunk/chunk_manager.h"
#include "comm/agree.h"
#include "comm/gather.h"

namespace chunkzero {
namespace {

// Removes this rank's shard of a save that did not commit. Best effort: a
// shard file left behind is unreferenced and a later save deletes it.
void RemoveShard(const std::string& dir, const std::string& file) {
  const std::string path = JoinPath(dir, file);
  ::unlink(path.c_str());
}

// Where each master lives, recorded in the manifest (informative).
absl::StatusOr<ChunkPlacementMap> MasterPlacement(const ZeroDdp& ddp) {
  ChunkPlacementMap placement;
  for (const std::string& name : ddp.registration_order()) {
    CZ_ASSIGN_OR_RETURN(TensorLocation where,
                        ddp.chunks().Locate(ddp.master_group(), name));
    placement[name] = {where.chunk->name(),
                       where.chunk->tensor(where.index).offset};
  }
  return placement;
}

// `x` in the fewest significant digits that read back as `x` (16777216,
// not 1.67772e+07), for messages that quote a field's value.
std::string ExactDouble(double x) {
  for (int digits = 6; digits < 17; ++digits) {
    const std::string s = absl::StrFormat("%.*g", digits, x);
    if (std::strtod(s.c_str(), nullptr) == x) return s;
  }
  return absl::StrFormat("%.17g", x);
}

// The loss scaler's state of `meta` against the scaler `optimizer` restores
// it into (LoadState would refuse it as a bad argument; coming from a
// checkpoint, it is damage). A checkpoint saved without a scaler (loss
// scale 0) leaves the scaler as it is.
absl::Status CheckLossScalerState(const std::string& dir,
                                  const CheckpointMeta& meta,
                                  const ZeroOptimizer& optimizer) {
  if (!optimizer.has_loss_scaler() || meta.loss_scale == 0) {
    return absl::OkStatus();
  }
  const LossScalerOptions& o = optimizer.options().loss_scaler;
  std::string bad;
  if (!(meta.loss_scale >= o.min_scale && meta.loss_scale <= o.max_scale)) {
    bad = absl::StrCat("loss_scale = ", ExactDouble(meta.loss_scale),
                       " is outside [", ExactDouble(o.min_scale), ", ",
                       ExactDouble(o.max_scale), "], the loss scaler's range");
  } else if (meta.growth_tracker >= o.growth_interval) {
    bad = absl::StrCat("growth_tracker = ", meta.growth_tracker,
                       " is not below the loss scaler's growth interval ",
                       o.growth_interval);
  } else if (meta.hysteresis_left > o.hysteresis) {
    bad = absl::StrCat("hysteresis_left = ", meta.hysteresis_left,
                       " is more than the loss scaler's hysteresis ",
                       o.hysteresis);
  }
  if (bad.empty()) return absl::OkStatus();
  return absl::DataLossError(
      absl::StrCat("checkpoint ", dir, ": manifest field ", bad));
}

}  // namespace

absl::Status SaveShardedCheckpoint(
    comm::ProcessGroup& group, const ZeroDdp& ddp, ZeroOptimizer& optimizer,
    const std::string& dir, int64_t step,
    const std::map<std::string, std::string>& config, absl::Duration timeout) {
  CZ_ASSIGN_OR_RETURN(OptimizerState shard, optimizer.SaveShard());
  const absl::StatusOr<ShardIndex> index = [&]() -> absl::StatusOr<ShardIndex> {
    CZ_ASSIGN_OR_RETURN(const ChunkPlacementMap placement,
                        MasterPlacement(ddp));
    // A diverged state would resume into NaNs: refuse it before writing.
    CZ_RETURN_IF_ERROR(CheckPiecesFinite(shard),
                       "a checkpoint of it could not resume, so none was "
                       "written");
    return WriteCheckpointShard(dir, step, group.rank(), group.size(), shard,
                                &placement);
  }();
  const absl::Status written = comm::AgreeOnStatus(
      group, index.status(), "a shard could not be written", timeout);
  CZ_ASSIGN_OR_RETURN(
      std::vector<std::string> serialized,
      comm::AllGatherBytes(group, index.ok() ? index->SerializeAsString() : "",
                           timeout));
  if (!written.ok()) {
    if (index.ok()) RemoveShard(dir, index->file());
    return written;
  }
  absl::Status committed;
  if (group.rank() == 0) {
    CheckpointMeta meta;
    meta.step = step;
    meta.world_size = group.size();
    meta.layout = std::string(ChunkLayoutName(ddp.chunks().options().layout));
    CopyOptimizerScalars(shard, &meta);
    meta.config = config;
    std::vector<ShardIndex> indexes(serialized.size());
    for (size_t r = 0; r < serialized.size(); ++r) {
      if (!indexes[r].ParseFromString(serialized[r])) {
        committed = absl::InternalError(
            absl::StrCat("rank ", r, "'s shard index did not arrive intact"));
      }
    }
    if (committed.ok()) committed = WriteCheckpointManifest(dir, meta, indexes);
  }
  committed = comm::AgreeOnStatus(
      group, committed, "the checkpoint manifest could not be committed",
      timeout);
  if (!committed.ok()) {
    // The manifest may have been renamed into place before a later step
    // (the directory's fsync) failed: then it names this shard, which must
    // stay.
    absl::StatusOr<std::vector<std::string>> named = CheckpointShardFiles(dir);
    if (!named.ok() || std::find(named->begin(), named->end(), index->file()) ==
                           named->end()) {
      RemoveShard(dir, index->file());
    }
  }
  return committed;
}

absl::StatusOr<CheckpointMeta> LoadShardedCheckpoint(
    const std::string& dir, ZeroOptimizer& optimizer,
    absl::Duration lock_timeout) {
  CheckpointReadOptions options;
  // Only the pieces this rank holds are read (and verified).
  options.filter = [&](const std::string& param, const std::string&,
                       int64_t begin, int64_t numel) {
    return optimizer.HoldsAny(param, begin, numel);
  };
  options.lock_timeout = lock_timeout;
  CZ_ASSIGN_OR_RETURN(Checkpoint ckpt, ReadCheckpoint(dir, options));
  // ReadCheckpoint checked every field that needs no optimizer to judge.
  CZ_RETURN_IF_ERROR(CheckLossScalerState(dir, ckpt.meta, optimizer));
  CZ_RETURN_IF_ERROR(optimizer.LoadState(ckpt.state));
  return ckpt.meta;
}

}  // namespace chunkzero
