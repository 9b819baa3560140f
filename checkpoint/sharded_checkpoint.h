// Saving and resuming a ZeroDdp + ZeroOptimizer pair as a sharded checkpoint
// (checkpoint.h's format), collectively: any training loop can call these,
// not only the train job.
//
//   // Every rank, between steps:
//   CZ_RETURN_IF_ERROR(SaveShardedCheckpoint(group, *ddp, *optimizer, dir,
//                                            step, {{"model", "gpt2"}}));
//   // Every rank of a new job, at any world size or layout:
//   CZ_ASSIGN_OR_RETURN(CheckpointMeta meta,
//                       LoadShardedCheckpoint(dir, *optimizer));
//
// A save: every rank writes its shard (the masters and optimizer states it
// holds, refused if any value is Inf or NaN, since it could not resume); the
// ranks agree that every shard is written; rank 0 commits the manifest; the
// ranks agree on that. A save that fails anywhere fails on every rank and
// removes the shards it wrote; the previous checkpoint in `dir` stays whole
// (the manifest still names it).
//
// `group` carries only the save's small agreement collectives (pass an
// unrecorded group to keep them out of traffic figures); it must have the
// ranks of the optimizer's group, in the same order.
#ifndef CHUNKZERO_CHECKPOINT_SHARDED_CHECKPOINT_H_
#define CHUNKZERO_CHECKPOINT_SHARDED_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "checkpoint/checkpoint.h"
#include "comm/options.h"
#include "comm/process_group.h"
#include "ddp/zero_ddp.h"
#include "optim/zero_optimizer.h"

namespace chunkzero {

// Collective. Saves the state after `step` steps into `dir` (created if
// need be), with `config` recorded in the manifest for the resuming job to
// compare. Errors: FailedPrecondition for a non-finite state, the file
// system's errors naming the path, or another rank's failure ("... (rank
// r)"); `timeout` bounds each agreement.
[[nodiscard]] absl::Status SaveShardedCheckpoint(
    comm::ProcessGroup& group, const ZeroDdp& ddp, ZeroOptimizer& optimizer,
    const std::string& dir, int64_t step,
    const std::map<std::string, std::string>& config,
    absl::Duration timeout = comm::kDefaultCollectiveTimeout);

// Not collective (each rank reads what it needs). Reads the pieces of the
// checkpoint in `dir` that this rank's optimizer holds, verifies them and
// loads them (ZeroOptimizer::LoadState); returns the manifest's meta. The
// checkpoint may come from any world size or layout. Errors: ReadCheckpoint's
// (`lock_timeout` bounds the wait for a commit in progress), DataLoss for a
// loss scaler's state the optimizer's scaler cannot take ("checkpoint DIR:
// manifest field growth_tracker = ..."), and LoadState's.
//
// Each rank's read is of one checkpoint, whole, even while another job
// saves into `dir`; but ranks reading at different times may read
// different commits (CheckpointMeta::manifest_crc32c tells them apart).
[[nodiscard]] absl::StatusOr<CheckpointMeta> LoadShardedCheckpoint(
    const std::string& dir, ZeroOptimizer& optimizer,
    absl::Duration lock_timeout = kDefaultCheckpointLockTimeout);

}  // namespace chunkzero

#endif  // CHUNKZERO_CHECKPOINT_SHARDED_CHECKPOINT_H_
