#include "checkpoint/sharded_checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
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

absl::StatusOr<CheckpointMeta> LoadShardedCheckpoint(const std::string& dir,
                                                     ZeroOptimizer& optimizer) {
  // Only the pieces this rank holds are read (and verified).
  CZ_ASSIGN_OR_RETURN(
      Checkpoint ckpt,
      ReadCheckpoint(dir, [&](const std::string& param, const std::string&,
                              int64_t begin, int64_t numel) {
        return optimizer.HoldsAny(param, begin, numel);
      }));
  CZ_RETURN_IF_ERROR(optimizer.LoadState(ckpt.state));
  return ckpt.meta;
}

}  // namespace chunkzero
