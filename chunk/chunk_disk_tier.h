// ChunkDiskTier: the disk under host memory (the NVMe tier, ZeRO-Infinity's
// `offload_optimizer: {device: nvme}`): one scratch file per rank
// (io/nvme/scratch_file.h) into which chunks' resting payloads spill, each
// into a region of its own, and the I/O engine that moves them.
//
//   CZ_ASSIGN_OR_RETURN(std::unique_ptr<ChunkDiskTier> disk,
//                       ChunkDiskTier::Create("/mnt/nvme"));
//   CZ_RETURN_IF_ERROR(chunk->SpillRest(disk.get()));   // to disk, freed
//   CZ_RETURN_IF_ERROR(chunk->UnspillRest());           // back in memory
//
// Regions are reserved as chunks first spill (the file grows, reserved with
// fallocate) and kept for every later spill of the same payload. Write and
// Read go through an aligned bounce buffer of at most kBounceBytes, a
// section at a time (a chunk's memory is not laid out for direct I/O, and
// a whole payload's copy would be a chunk of host memory held for good);
// StartRead/StartWrite/Wait move aligned buffers asynchronously, for the
// optimizer's pipeline. The stats count every
// byte moved, the time callers spent waiting for the disk, and the time the
// disk had the tier's I/O in flight (the difference: time it worked while
// they computed).
//
// Errors are the scratch file's and the engine's, naming the bytes' `what`.
// Thread-safety: a tier is used by its rank's thread.
#ifndef CHUNKZERO_CHUNK_CHUNK_DISK_TIER_H_
#define CHUNKZERO_CHUNK_CHUNK_DISK_TIER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "io/nvme/aligned_buffer.h"
#include "io/nvme/io_engine.h"
#include "io/nvme/scratch_file.h"
#include "tensor/memory/memory_tracker.h"

namespace chunkzero {

// Bytes [offset, offset + bytes) of the tier's file; bytes a multiple of
// kDirectIoAlignment.
struct DiskRegion {
  int64_t offset = -1;
  int64_t bytes = 0;
  bool valid() const { return offset >= 0; }
};

// The most host memory Write and Read stage through.
inline constexpr int64_t kBounceBytes = int64_t{32} << 20;

struct DiskTierStats {
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  double seconds_waited = 0;  // In Write, Read and Wait.
  // While the disk had this tier's I/O in flight (IoEngine::busy_seconds);
  // less seconds_waited, the disk's time hidden behind the caller's work.
  double seconds_busy = 0;
};

class ChunkDiskTier {
 public:
  // A tier in `dir` (ScratchFile's checks) on an engine of `kind`.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ChunkDiskTier>> Create(
      const std::string& dir, IoEngineKind kind = IoEngineKind::kAuto);

  // A new region of at least `bytes`.
  [[nodiscard]] absl::StatusOr<DiskRegion> Reserve(int64_t bytes);

  // Copies `bytes` (<= region.bytes) from host memory `src` into the
  // region, or back into `dst`, waiting for the disk.
  [[nodiscard]] absl::Status Write(const DiskRegion& region, const void* src,
                                   size_t bytes, const std::string& what);
  [[nodiscard]] absl::Status Read(const DiskRegion& region, void* dst,
                                  size_t bytes, const std::string& what);

  // Starts moving `bytes` of the region from `offset` (both multiples of
  // kDirectIoAlignment, inside the region) from or into `buffer` (at least
  // `bytes`); `buffer` and `what` belong to the tier until Wait.
  [[nodiscard]] absl::StatusOr<IoBatch> StartRead(const DiskRegion& region,
                                                  int64_t offset, int64_t bytes,
                                                  const AlignedBuffer& buffer,
                                                  const std::string* what);
  [[nodiscard]] absl::StatusOr<IoBatch> StartWrite(const DiskRegion& region,
                                                   int64_t offset,
                                                   int64_t bytes,
                                                   const AlignedBuffer& buffer,
                                                   const std::string* what);
  [[nodiscard]] absl::Status Wait(IoBatch batch);

  // Counts the bounce buffer in `tracker` as MemoryCategory::kOther host
  // memory from now on (it is at most kBounceBytes, so it is counted
  // without a limit check). `tracker` outlives the tier.
  void set_memory_tracker(MemoryTracker* tracker);
  ~ChunkDiskTier();

  DiskTierStats stats() const {
    DiskTierStats now = stats_;
    now.seconds_busy = engine_->busy_seconds();
    return now;
  }
  // The host memory Write and Read stage through now (<= kBounceBytes).
  size_t bounce_bytes() const { return bounce_.size(); }
  const ScratchFile& file() const { return *file_; }
  const IoEngine& engine() const { return *engine_; }

 private:
  ChunkDiskTier(std::unique_ptr<ScratchFile> file,
                std::unique_ptr<IoEngine> engine)
      : file_(std::move(file)), engine_(std::move(engine)) {}
  // Write or Read of `bytes` at `host`, a bounce-buffer section at a time.
  [[nodiscard]] absl::Status Transfer(IoKind kind, const DiskRegion& region,
                                      char* host, size_t bytes,
                                      const std::string& what);
  [[nodiscard]] absl::StatusOr<IoBatch> Start(IoKind kind,
                                              const DiskRegion& region,
                                              int64_t offset, int64_t bytes,
                                              const AlignedBuffer& buffer,
                                              const std::string* what);
  // The bounce buffer of Write and Read, grown to the largest region.
  [[nodiscard]] absl::Status EnsureBounce(size_t bytes);

  // The bounce buffer is declared first, so destroyed last: the engine's
  // destructor waits for transfers into it.
  AlignedBuffer bounce_;
  std::unique_ptr<ScratchFile> file_;
  std::unique_ptr<IoEngine> engine_;
  DiskTierStats stats_;
  MemoryTracker* tracker_ = nullptr;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_CHUNK_CHUNK_DISK_TIER_H_
