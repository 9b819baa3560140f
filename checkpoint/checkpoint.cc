#include "checkpoint/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/crc32c.h"
#include "base/file.h"
#include "base/file_lock.h"
#include "base/mutex.h"
#include "base/status_macros.h"
#include "checkpoint/manifest_fields.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "tensor/cpu/reduction_kernels.h"
#include "tensor/tensor.h"

// Shard files hold the host's f32 bytes as they are in memory; the format
// says little-endian, so a big-endian host would need a byte swap here.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "checkpoint shard files are little-endian");

namespace chunkzero {

namespace {

using checkpoint_internal::BadManifestField;
using checkpoint_internal::CheckManifestFields;
using checkpoint_internal::kF32Bytes;
using checkpoint_internal::kShardHeaderBytes;
using checkpoint_internal::kShardMagic;

constexpr char kShardPrefix[] = "shard-";
constexpr char kF32Name[] = "f32";

std::string PieceName(const std::string& param, const std::string& state,
                      int64_t begin, int64_t numel) {
  return absl::StrCat("tensor ", param, " state ", state, " elements [", begin,
                      ", ", begin + numel, ")");
}

bool PathExists(const std::string& path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0;
}

// "shard-<step>-<rank>-of-<world>.bin", or with a ".<k>" suffix if that is
// taken: a save must never replace a file the current manifest may name.
std::string UnusedShardName(const std::string& dir, int64_t step, int rank,
                            int world_size) {
  const std::string stem =
      absl::StrCat(kShardPrefix, step, "-", rank, "-of-", world_size);
  std::string name = stem + ".bin";
  for (int k = 1; PathExists(JoinPath(dir, name)); ++k) {
    name = absl::StrCat(stem, ".", k, ".bin");
  }
  return name;
}

absl::Status CheckPieceToSave(const StatePiece& piece) {
  const std::string name =
      PieceName(piece.param, piece.state, piece.begin, piece.values.numel());
  if (piece.values.dtype() != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": values are ", piece.values.DebugString(), ", not f32"));
  }
  for (const int64_t dim : piece.shape) {
    if (dim < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": negative dimension in shape ", ShapeToString(piece.shape)));
    }
  }
  if (piece.begin < 0 ||
      piece.values.numel() > NumElements(piece.shape) - piece.begin) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": outside the shape ", ShapeToString(piece.shape)));
  }
  return absl::OkStatus();
}

// The piece's values where the host can read them.
absl::StatusOr<Tensor> HostValues(const StatePiece& piece) {
  Tensor values = piece.values;
  if (!values.device().is_host_accessible()) {
    CZ_ASSIGN_OR_RETURN(values, values.To(Device::Cpu()));
  }
  if (values.numel() > 0 && !values.is_materialized()) {
    return absl::FailedPreconditionError(absl::StrCat(
        PieceName(piece.param, piece.state, piece.begin, values.numel()),
        ": memory is freed"));
  }
  return values;
}

// Appends `piece` to the shard file at `*offset` and indexes it.
absl::Status WritePiece(int fd, const std::string& path,
                        const StatePiece& piece,
                        const ChunkPlacementMap* placement, int64_t* offset,
                        ShardIndex* index) {
  CZ_RETURN_IF_ERROR(CheckPieceToSave(piece));
  CZ_ASSIGN_OR_RETURN(const Tensor values, HostValues(piece));
  const size_t bytes = values.nbytes();
  CZ_RETURN_IF_ERROR(WriteAll(fd, values.raw_data(), bytes, path));

  PieceIndex* entry = index->add_pieces();
  entry->set_param(piece.param);
  entry->set_state(piece.state);
  for (const int64_t dim : piece.shape) entry->add_shape(dim);
  entry->set_begin(piece.begin);
  entry->set_numel(values.numel());
  entry->set_dtype(kF32Name);
  entry->set_byte_offset(*offset);
  entry->set_crc32c(Crc32c(values.raw_data(), bytes));
  if (placement != nullptr) {
    const auto it = placement->find(piece.param);
    if (it != placement->end()) {
      entry->set_chunk(it->second.chunk);
      entry->set_chunk_offset(it->second.offset);
    }
  }
  *offset += static_cast<int64_t>(bytes);
  return absl::OkStatus();
}

// The shards sorted by rank, or InvalidArgument unless they are exactly one
// per rank of `meta`'s step and world.
absl::StatusOr<std::vector<ShardIndex>> SortedShardSet(
    const CheckpointMeta& meta, const std::vector<ShardIndex>& shards) {
  if (meta.world_size <= 0 || shards.size() != meta.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("a checkpoint of world size ", meta.world_size,
                     " needs one shard per rank, got ", shards.size()));
  }
  std::vector<ShardIndex> sorted = shards;
  std::sort(sorted.begin(), sorted.end(),
            [](const ShardIndex& a, const ShardIndex& b) {
              return a.rank() < b.rank();
            });
  for (int rank = 0; rank < meta.world_size; ++rank) {
    const ShardIndex& shard = sorted[rank];
    if (shard.rank() != rank || shard.step() != meta.step ||
        shard.world_size() != meta.world_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shard ", shard.file(), " (rank ", shard.rank(), " of ",
          shard.world_size(), ", step ", shard.step(),
          ") does not belong to a checkpoint of step ", meta.step,
          ", world size ", meta.world_size, ", or a rank is missing"));
    }
  }
  return sorted;
}

CheckpointManifest MakeManifest(const CheckpointMeta& meta,
                                std::vector<ShardIndex> shards) {
  CheckpointManifest manifest;
  manifest.set_format_version(kCheckpointFormatVersion);
  manifest.set_step(meta.step);
  manifest.set_world_size(meta.world_size);
  manifest.set_layout(meta.layout);
  manifest.set_updates(meta.updates);
  manifest.set_iterations(meta.iterations);
  manifest.set_loss_scale(meta.loss_scale);
  manifest.set_growth_tracker(meta.growth_tracker);
  manifest.set_hysteresis_left(meta.hysteresis_left);
  manifest.mutable_config()->insert(meta.config.begin(), meta.config.end());
  for (ShardIndex& shard : shards) *manifest.add_shards() = std::move(shard);
  return manifest;
}

CheckpointMeta MetaFromManifest(const CheckpointManifest& manifest,
                                uint32_t crc32c) {
  CheckpointMeta meta;
  meta.manifest_crc32c = crc32c;
  meta.step = manifest.step();
  meta.world_size = manifest.world_size();
  meta.layout = manifest.layout();
  meta.updates = manifest.updates();
  meta.iterations = manifest.iterations();
  meta.loss_scale = manifest.loss_scale();
  meta.growth_tracker = manifest.growth_tracker();
  meta.hysteresis_left = manifest.hysteresis_left();
  meta.config.insert(manifest.config().begin(), manifest.config().end());
  return meta;
}

// Deletes the shard files (and temporaries) of `dir` that `manifest` does not
// name. Best effort: see WriteCheckpointManifest.
void DeleteUnreferencedShards(const std::string& dir,
                              const CheckpointManifest& manifest) {
  std::set<std::string> keep;
  for (const ShardIndex& shard : manifest.shards()) keep.insert(shard.file());
  std::error_code error;
  std::filesystem::directory_iterator it(dir.empty() ? "." : dir, error);
  for (; !error && it != std::filesystem::directory_iterator();
       it.increment(error)) {
    const std::string name = it->path().filename().string();
    const bool ours =
        absl::StartsWith(name, kShardPrefix) &&
        (absl::EndsWith(name, ".bin") || absl::EndsWith(name, ".bin.tmp"));
    if (!ours || keep.count(name) > 0) continue;
    std::error_code ignored;
    std::filesystem::remove(it->path(), ignored);
  }
}

// What carries the commit lock: the directory itself (see checkpoint.h).
std::string LockPath(const std::string& dir) { return dir.empty() ? "." : dir; }

// A manifest is small (a few hundred bytes per piece); anything larger than
// this is not one, and is refused before it is read into memory.
constexpr int64_t kMaxManifestBytes = int64_t{1} << 30;

absl::StatusOr<std::string> ReadManifestBytes(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFileToString(path, kMaxManifestBytes);
  if (absl::IsNotFound(bytes.status())) {
    return absl::NotFoundError(
        absl::StrCat("no checkpoint: ", path, " does not exist"));
  }
  return bytes;
}

// The test hook (checkpoint_internal), never destroyed.
struct ReadHookSlot {
  Mutex mu;
  checkpoint_internal::ManifestReadHook hook ABSL_GUARDED_BY(mu);
};
ReadHookSlot& ReadHook() {
  static ReadHookSlot* const slot = new ReadHookSlot;
  return *slot;
}

void RunReadHook(checkpoint_internal::ManifestReadPoint point,
                 const std::string& dir) {
  checkpoint_internal::ManifestReadHook hook;
  {
    ReadHookSlot& slot = ReadHook();
    MutexLock lock(&slot.mu);
    if (!slot.hook) return;
    hook = slot.hook;  // Called unlocked: it may read checkpoints itself.
  }
  hook(point, dir);
}

// A verified manifest and the checksum it was stored with (which commit it
// is).
struct CommittedManifest {
  CheckpointManifest manifest;
  uint32_t crc32c = 0;
};

// Reads and verifies `dir`/manifest.pb.
absl::StatusOr<CommittedManifest> ReadManifest(const std::string& dir) {
  const std::string path = JoinPath(dir, kCheckpointManifestName);
  RunReadHook(checkpoint_internal::ManifestReadPoint::kBefore, dir);
  absl::StatusOr<std::string> read = ReadManifestBytes(path);
  RunReadHook(checkpoint_internal::ManifestReadPoint::kAfter, dir);
  CZ_ASSIGN_OR_RETURN(const std::string bytes, std::move(read));
  ManifestFile file;
  if (!file.ParseFromString(bytes)) {
    return absl::DataLossError(
        absl::StrCat(path, ": damaged checkpoint manifest (unparsable)"));
  }
  const uint32_t crc = Crc32c(file.manifest().data(), file.manifest().size());
  if (file.manifest().empty() || crc != file.crc32c()) {
    return absl::DataLossError(absl::StrFormat(
        "%s: damaged checkpoint manifest (checksum %08x, stored %08x)", path,
        crc, file.crc32c()));
  }
  CheckpointManifest manifest;
  if (!manifest.ParseFromString(file.manifest())) {
    return absl::DataLossError(
        absl::StrCat(path,
                     ": damaged checkpoint manifest (checksum matches but the "
                     "content is unparsable)"));
  }
  if (manifest.format_version() != kCheckpointFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": checkpoint format version ", manifest.format_version(),
        ", this build reads version ", kCheckpointFormatVersion));
  }
  CZ_RETURN_IF_ERROR(CheckManifestFields(manifest, dir, path));
  return CommittedManifest{std::move(manifest), crc};
}

// Checks that `entry` describes an f32 range of its shape lying inside the
// shard file's data.
absl::Status CheckPieceIndex(const PieceIndex& entry, int64_t file_bytes,
                             const std::string& path) {
  const std::string name =
      PieceName(entry.param(), entry.state(), entry.begin(), entry.numel());
  bool valid = entry.dtype() == kF32Name && entry.begin() >= 0 &&
               entry.numel() >= 0 && entry.byte_offset() >= kShardHeaderBytes &&
               entry.byte_offset() <= file_bytes &&
               entry.numel() <= (file_bytes - entry.byte_offset()) / kF32Bytes;
  Shape shape;
  for (const int64_t dim : entry.shape()) {
    valid = valid && dim >= 0;
    shape.push_back(dim);
  }
  if (!valid || entry.numel() > NumElements(shape) - entry.begin()) {
    return absl::DataLossError(absl::StrCat(
        path, ": the manifest's index of ", name, " (dtype ", entry.dtype(),
        ", shape ", ShapeToString(shape), ", byte offset ", entry.byte_offset(),
        ") does not fit the ", file_bytes, "-byte file"));
  }
  return absl::OkStatus();
}

// Reads one piece and verifies its checksum.
absl::StatusOr<StatePiece> ReadPiece(int fd, const std::string& path,
                                     const PieceIndex& entry) {
  StatePiece piece;
  piece.param = entry.param();
  piece.state = entry.state();
  piece.shape.assign(entry.shape().begin(), entry.shape().end());
  piece.begin = entry.begin();
  CZ_ASSIGN_OR_RETURN(piece.values,
                      Tensor::Empty({entry.numel()}, DType::kF32));
  const size_t bytes = piece.values.nbytes();
  void* data = piece.values.raw_data();
  CZ_RETURN_IF_ERROR(ReadAt(fd, entry.byte_offset(), data, bytes, path));
  const uint32_t crc = Crc32c(data, bytes);
  if (crc != entry.crc32c()) {
    return absl::DataLossError(absl::StrFormat(
        "%s: checksum mismatch in %s (checksum %08x, manifest says %08x)", path,
        PieceName(entry.param(), entry.state(), entry.begin(), entry.numel()),
        crc, entry.crc32c()));
  }
  return piece;
}

// Verifies one shard file's size and magic, then reads the pieces `filter`
// accepts (all, if it is empty) into `pieces`.
absl::Status ReadShard(const std::string& dir, const ShardIndex& shard,
                       const CheckpointPieceFilter& filter,
                       std::vector<StatePiece>* pieces) {
  const std::string path = JoinPath(dir, shard.file());
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0 && errno == ENOENT) {
    return absl::DataLossError(absl::StrCat(
        path, ": shard file named by the checkpoint manifest is missing"));
  }
  if (fd.get() < 0) return ErrnoError("cannot open", path);
  struct stat info;
  if (::fstat(fd.get(), &info) != 0) return ErrnoError("cannot stat", path);
  if (info.st_size != shard.byte_size()) {
    return absl::DataLossError(
        absl::StrCat(path, ": shard file has ", info.st_size,
                     " bytes, the manifest says ", shard.byte_size(),
                     info.st_size < shard.byte_size() ? " (truncated)" : ""));
  }
  char magic[sizeof(kShardMagic)];
  CZ_RETURN_IF_ERROR(ReadAt(fd.get(), 0, magic, sizeof(magic), path));
  if (std::memcmp(magic, kShardMagic, sizeof(magic)) != 0) {
    return absl::DataLossError(
        absl::StrCat(path, ": not a checkpoint shard file (bad magic)"));
  }
  for (const PieceIndex& entry : shard.pieces()) {
    CZ_RETURN_IF_ERROR(CheckPieceIndex(entry, shard.byte_size(), path));
    if (filter &&
        !filter(entry.param(), entry.state(), entry.begin(), entry.numel())) {
      continue;
    }
    CZ_ASSIGN_OR_RETURN(StatePiece piece, ReadPiece(fd.get(), path, entry));
    pieces->push_back(std::move(piece));
  }
  return absl::OkStatus();
}

}  // namespace

void CopyOptimizerScalars(const OptimizerState& state, CheckpointMeta* meta) {
  meta->updates = state.updates;
  meta->iterations = state.iterations;
  meta->loss_scale = state.loss_scale;
  meta->growth_tracker = state.growth_tracker;
  meta->hysteresis_left = state.hysteresis_left;
}

absl::Status CheckPiecesFinite(const OptimizerState& state) {
  for (const StatePiece& piece : state.pieces) {
    CZ_RETURN_IF_ERROR(CheckPieceToSave(piece));
    CZ_ASSIGN_OR_RETURN(const Tensor values, HostValues(piece));
    CZ_ASSIGN_OR_RETURN(const bool non_finite,
                        HasInfOrNan(values.raw_data(), DType::kF32,
                                    static_cast<size_t>(values.numel())));
    if (non_finite) {
      return absl::FailedPreconditionError(absl::StrCat(
          PieceName(piece.param, piece.state, piece.begin, values.numel()),
          " holds Inf or NaN"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ShardIndex> WriteCheckpointShard(
    const std::string& dir, int64_t step, int rank, int world_size,
    const OptimizerState& shard, const ChunkPlacementMap* placement) {
  if (world_size <= 0 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is not in a world of size ", world_size));
  }
  CZ_RETURN_IF_ERROR(CreateDirectories(dir));
  ShardIndex index;
  index.set_file(UnusedShardName(dir, step, rank, world_size));
  index.set_rank(rank);
  index.set_world_size(world_size);
  index.set_step(step);
  int64_t offset = 0;
  CZ_RETURN_IF_ERROR(WriteFileAtomically(
      JoinPath(dir, index.file()),
      [&](int fd, const std::string& path) -> absl::Status {
        CZ_RETURN_IF_ERROR(
            WriteAll(fd, kShardMagic, sizeof(kShardMagic), path));
        offset = kShardHeaderBytes;
        for (const StatePiece& piece : shard.pieces) {
          CZ_RETURN_IF_ERROR(
              WritePiece(fd, path, piece, placement, &offset, &index));
        }
        return absl::OkStatus();
      }));
  index.set_byte_size(offset);
  return index;
}

namespace {

// Protobuf writes map fields (the config) in hash order, which differs from
// run to run; sorted keys make two saves of the same state the same bytes.
bool SerializeDeterministically(const google::protobuf::MessageLite& message,
                                std::string* out) {
  out->clear();
  google::protobuf::io::StringOutputStream stream(out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  return message.SerializeToCodedStream(&coded) && !coded.HadError();
}

}  // namespace

absl::Status WriteCheckpointManifest(const std::string& dir,
                                     const CheckpointMeta& meta,
                                     const std::vector<ShardIndex>& shards) {
  CZ_ASSIGN_OR_RETURN(std::vector<ShardIndex> sorted,
                      SortedShardSet(meta, shards));
  const CheckpointManifest manifest = MakeManifest(meta, std::move(sorted));
  // What no reader would take is not written.
  if (std::optional<std::string> bad = BadManifestField(manifest)) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint meta field ", *bad));
  }
  ManifestFile file;
  if (!SerializeDeterministically(manifest, file.mutable_manifest())) {
    return absl::InternalError("cannot serialize the checkpoint manifest");
  }
  file.set_crc32c(Crc32c(file.manifest().data(), file.manifest().size()));
  std::string bytes;
  if (!SerializeDeterministically(file, &bytes)) {
    return absl::InternalError("cannot serialize the checkpoint manifest");
  }
  CZ_RETURN_IF_ERROR(CreateDirectories(dir));
  CZ_RETURN_IF_ERROR(WriteFileAtomically(JoinPath(dir, kCheckpointManifestName),
                                         [&](int fd, const std::string& path) {
                                           return WriteAll(fd, bytes.data(),
                                                           bytes.size(), path);
                                         }));
  // Committed. The shards it replaced go only while no reader holds the
  // commit lock (a reader of the previous manifest may be reading them);
  // else the next commit deletes them. Where the file system cannot lock,
  // they go at once, as they always did.
  const absl::StatusOr<std::unique_ptr<FileLock>> alone =
      FileLock::AcquireDirectory(LockPath(dir), LockMode::kExclusive,
                                 absl::ZeroDuration());
  if (alone.ok() || !absl::IsFailedPrecondition(alone.status())) {
    DeleteUnreferencedShards(dir, manifest);
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointMeta> ReadCheckpointMeta(const std::string& dir) {
  CZ_ASSIGN_OR_RETURN(const CommittedManifest read, ReadManifest(dir));
  return MetaFromManifest(read.manifest, read.crc32c);
}

absl::StatusOr<std::vector<std::string>> CheckpointShardFiles(
    const std::string& dir) {
  CZ_ASSIGN_OR_RETURN(const CommittedManifest read, ReadManifest(dir));
  std::vector<std::string> files;
  for (const ShardIndex& shard : read.manifest.shards()) {
    files.push_back(shard.file());
  }
  return files;
}

absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& dir) {
  return ReadCheckpoint(dir, CheckpointReadOptions());
}

absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& dir,
                                          const CheckpointPieceFilter& filter) {
  CheckpointReadOptions options;
  options.filter = filter;
  return ReadCheckpoint(dir, options);
}

absl::StatusOr<Checkpoint> ReadCheckpoint(
    const std::string& dir, const CheckpointReadOptions& options) {
  // The commit lock, shared, from the manifest to the last shard: the shards
  // this manifest names stay until it is released (see checkpoint.h).
  absl::StatusOr<std::unique_ptr<FileLock>> reading =
      FileLock::AcquireDirectory(LockPath(dir), LockMode::kShared,
                                 options.lock_timeout);
  if (absl::IsDeadlineExceeded(reading.status())) {
    return absl::DeadlineExceededError(absl::StrCat(
        "checkpoint ", dir, ": waited ",
        absl::FormatDuration(options.lock_timeout),
        " for a save into it to finish committing (it locks the directory "
        "while it deletes the shards it replaced, which takes milliseconds): "
        "the saving process is stopped or hung"));
  }
  // Any other failure (no such directory, a file system without flock):
  // read unlocked, and let the manifest say what is wrong.
  CZ_ASSIGN_OR_RETURN(const CommittedManifest read, ReadManifest(dir));
  const CheckpointManifest& manifest = read.manifest;
  Checkpoint checkpoint;
  checkpoint.meta = MetaFromManifest(manifest, read.crc32c);
  OptimizerState& state = checkpoint.state;
  state.updates = checkpoint.meta.updates;
  state.iterations = checkpoint.meta.iterations;
  state.loss_scale = checkpoint.meta.loss_scale;
  state.growth_tracker = checkpoint.meta.growth_tracker;
  state.hysteresis_left = checkpoint.meta.hysteresis_left;
  for (const ShardIndex& shard : manifest.shards()) {
    CZ_RETURN_IF_ERROR(ReadShard(dir, shard, options.filter, &state.pieces));
  }
  return checkpoint;
}

namespace checkpoint_internal {

void SetManifestReadHookForTesting(ManifestReadHook hook) {
  ReadHookSlot& slot = ReadHook();
  MutexLock lock(&slot.mu);
  slot.hook = std::move(hook);
}

}  // namespace checkpoint_internal
}  // namespace chunkzero
