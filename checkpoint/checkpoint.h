// Sharded checkpoints of the optimizer state: one shard file per rank and a
// manifest that names every piece, committed atomically.
//
//   // Every rank, after a step:
//   CZ_ASSIGN_OR_RETURN(OptimizerState mine, optimizer->SaveShard());
//   CZ_ASSIGN_OR_RETURN(ShardIndex index,
//                       WriteCheckpointShard(dir, step, rank, world, mine));
//   // ...gather every rank's `index` on rank 0 (a barrier in-process), then:
//   CZ_RETURN_IF_ERROR(WriteCheckpointManifest(dir, meta, indexes));
//
//   // Resume, at any world size or layout:
//   CZ_ASSIGN_OR_RETURN(Checkpoint ckpt, ReadCheckpoint(dir));
//   CZ_RETURN_IF_ERROR(optimizer->LoadState(ckpt.state));
//
// The files (see checkpoint.proto for the formats): `manifest.pb` and
// `shard-<step>-<rank>-of-<world>.bin`. Each file is written to a temporary
// name, fsync'ed, renamed and its directory fsync'ed, so a crash leaves
// either the old file or the new one. A save never replaces a file that
// exists (a shard name already taken, say by a save of the same step, gets a
// ".<k>" suffix), so the shards of the checkpoint the current manifest names
// stay untouched until the rename of the new manifest, the commit point.
// Only then are the shard files the new manifest does not name deleted: an
// interrupted save leaves the previous checkpoint whole and readable.
//
// Reading verifies everything it uses: the manifest's own CRC-32C, its
// format version, every field of the manifest (counters in range and
// consistent with each other, a finite loss scale, a shard per rank whose
// pieces tile its file), each shard file's size and magic, and each piece's
// CRC-32C. Damage is a DataLoss status naming the file (and the tensor, for
// a piece), or "checkpoint DIR: manifest field NAME = VALUE ..." for a
// field no writer could have written; a missing manifest or directory is
// NotFound; a manifest of another format version is FailedPrecondition.
// Nothing aborts on bad input.
//
// Readers and a saver in one directory. A saver may commit while another
// process reads (a job resuming from a directory a running job saves into).
// The manifest's rename is atomic, so any read of the manifest alone sees
// one checkpoint whole; the danger is the shards a commit deletes, which a
// reader that read the previous manifest is about to open. So the directory
// itself carries an advisory lock (flock, base/file_lock.h), the commit
// lock: ReadCheckpoint holds it shared from the manifest to its last shard,
// and WriteCheckpointManifest deletes replaced shards only while it holds it
// exclusively. The saver does not wait for readers: if one holds the lock,
// it leaves the replaced shards for its next commit to delete (a reader may
// read for as long as it likes, and a save never stalls a training job).
// A reader waits for the lock only while a commit deletes files
// (milliseconds), and gives up after a timeout (a stopped saver). Locking
// the directory rather than a file in it creates nothing, so a read-only
// checkpoint reads as before, and a lock cannot be mistaken for a shard.
// Where the file system has no flock, reads and commits go unlocked.
//
// Thread-safety: the functions share no state. Ranks may write their shards
// concurrently (distinct ranks, distinct files); the manifest must be written
// after every shard of its step is, and by one caller. Any number of readers
// may read while it does.
#ifndef CHUNKZERO_CHECKPOINT_CHECKPOINT_H_
#define CHUNKZERO_CHECKPOINT_CHECKPOINT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "checkpoint/checkpoint.pb.h"
#include "optim/optimizer_state.h"

namespace chunkzero {

inline constexpr char kCheckpointManifestName[] = "manifest.pb";
inline constexpr int kCheckpointFormatVersion = 1;
// How long ReadCheckpoint waits, by default, for a commit into its
// directory to finish.
inline constexpr absl::Duration kDefaultCheckpointLockTimeout =
    absl::Minutes(5);

// Where a parameter lives in the chunk manager when saved (informative: it is
// recorded in the manifest, never needed to load).
struct ChunkPlacement {
  std::string chunk;   // The chunk's name.
  int64_t offset = 0;  // The parameter's first element in the chunk.
};
using ChunkPlacementMap = std::map<std::string, ChunkPlacement>;  // By param.

// Everything in the manifest but the shard indexes.
struct CheckpointMeta {
  // Steps completed: ZeroOptimizer::Step calls (one per step, whatever the
  // grad accumulation; skipped steps included), so always `iterations`.
  int64_t step = 0;
  int world_size = 0;  // Ranks that saved a shard.
  std::string layout;  // The saving job's chunk layout, informative.
  // OptimizerState's scalars (see CopyOptimizerScalars).
  int64_t updates = 0;
  int64_t iterations = 0;
  double loss_scale = 0;
  int64_t growth_tracker = 0;
  int hysteresis_left = 0;
  // The caller's model configuration and flags, to compare on resume.
  std::map<std::string, std::string> config;
  // Which commit this meta was read from: the CRC-32C of its manifest (0
  // when not read from a file; ignored by WriteCheckpointManifest). Two
  // reads of a directory that give equal values (and steps) read the same
  // checkpoint.
  uint32_t manifest_crc32c = 0;
};

// Copies the scalars of `state` (not its pieces) into `meta`.
void CopyOptimizerScalars(const OptimizerState& state, CheckpointMeta* meta);

struct Checkpoint {
  CheckpointMeta meta;
  // The scalars (from the manifest) and every piece of every shard, by rank
  // and then in the order the rank saved them: ready for
  // ZeroOptimizer::LoadState.
  OptimizerState state;
};

// Writes `shard` (one rank's OptimizerState; its scalars are ignored, as the
// manifest holds them) to a new shard file in `dir`, creating `dir` if need
// be, and returns its index for the manifest. `placement`, if given, records
// each parameter's chunk. The file is durable when this returns OK, but no
// checkpoint refers to it until WriteCheckpointManifest.
//
// InvalidArgument if a piece is not an f32 tensor of elements
// [begin, begin + numel) inside its shape, or rank is not in
// [0, world_size); FailedPrecondition if a piece's memory is freed; the
// errno's code, with the path, if the file system fails (the partial file
// is removed). Values are stored bit for bit, Inf and NaN included: a
// trainer that must not save a diverged state checks CheckPiecesFinite
// first.
[[nodiscard]] absl::StatusOr<ShardIndex> WriteCheckpointShard(
    const std::string& dir, int64_t step, int rank, int world_size,
    const OptimizerState& shard, const ChunkPlacementMap* placement = nullptr);

// OK if every value of every piece of `state` is finite; else
// FailedPrecondition naming the first piece holding Inf or NaN (or
// WriteCheckpointShard's error for a malformed piece).
[[nodiscard]] absl::Status CheckPiecesFinite(const OptimizerState& state);

// Commits the checkpoint: writes `dir`/manifest.pb atomically over the
// previous one, then deletes the shard files (and leftover temporaries) the
// new manifest does not name. `shards` are the indexes every rank's
// WriteCheckpointShard returned for this step, in any order.
//
// REQUIRES: every shard file of `shards` is written (the caller
// synchronises the ranks). InvalidArgument unless `shards` holds ranks
// 0..meta.world_size-1 once each, all of meta.step and meta.world_size, or
// for a meta field a reader would refuse ("checkpoint meta field NAME =
// VALUE ..."; see ReadCheckpointMeta). Deleting old shards is best effort,
// and skipped while a reader holds the directory's commit lock: the
// checkpoint is committed once the rename is, and a file left behind is
// deleted by a later save.
[[nodiscard]] absl::Status WriteCheckpointManifest(
    const std::string& dir, const CheckpointMeta& meta,
    const std::vector<ShardIndex>& shards);

// The manifest's meta only, verified, without reading the shards: cheap, to
// check the config before loading. DataLoss "checkpoint DIR: manifest field
// NAME = VALUE ..." for a field out of range (a negative counter, one above
// 2^53, a loss scale that is not finite or negative, a world size below 1,
// ...) or inconsistent with another (iterations other than step, more
// updates than iterations, a scaler's state without a loss scale, a shard
// of another step or world, a shard whose pieces do not tile its bytes).
[[nodiscard]] absl::StatusOr<CheckpointMeta> ReadCheckpointMeta(
    const std::string& dir);

// The shard file names the committed manifest of `dir` lists, by rank
// (the manifest verified as ReadCheckpointMeta does).
[[nodiscard]] absl::StatusOr<std::vector<std::string>> CheckpointShardFiles(
    const std::string& dir);

// The whole checkpoint in memory, every piece verified, holding the
// directory's commit lock shared from the manifest to the last shard (see
// above): a save committing meanwhile cannot delete what this read needs.
// DeadlineExceeded if a commit holds the lock past the timeout. Loading
// everything is fine at the sizes the train job runs; to scale, each rank
// would read only the pieces overlapping what it holds (the filter below)
// or stream them into place.
[[nodiscard]] absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& dir);

// Reads (and verifies) only the pieces for which `filter(param, state,
// begin, numel)` is true. The manifest and every shard file's size are
// verified whatever the filter says.
using CheckpointPieceFilter =
    std::function<bool(const std::string& param, const std::string& state,
                       int64_t begin, int64_t numel)>;
[[nodiscard]] absl::StatusOr<Checkpoint> ReadCheckpoint(
    const std::string& dir, const CheckpointPieceFilter& filter);

struct CheckpointReadOptions {
  CheckpointPieceFilter filter;  // Empty: every piece.
  // How long to wait for a commit into the directory to finish.
  absl::Duration lock_timeout = kDefaultCheckpointLockTimeout;
};
[[nodiscard]] absl::StatusOr<Checkpoint> ReadCheckpoint(
    const std::string& dir, const CheckpointReadOptions& options);

namespace checkpoint_internal {

// For tests of readers racing a save. Every reader of a manifest
// (ReadCheckpointMeta, CheckpointShardFiles, ReadCheckpoint) calls the hook
// with kBefore just before it reads `dir`'s manifest and kAfter just after
// (in ReadCheckpoint holding the directory's commit lock, and kAfter before
// it opens any shard), on its own thread. Set it only while no reader runs;
// nullptr removes it.
enum class ManifestReadPoint { kBefore, kAfter };
using ManifestReadHook =
    std::function<void(ManifestReadPoint point, const std::string& dir)>;
void SetManifestReadHookForTesting(ManifestReadHook hook);

}  // namespace checkpoint_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_CHECKPOINT_CHECKPOINT_H_
