// DiskStaging: the masters and optimizer states of an update whose chunks
// rest on disk (the NVMe tier), read ahead of their chunk's update and
// written back while the next chunk updates.
//
//   DiskStaging staging(disk);
//   CZ_RETURN_IF_ERROR(staging.Fetch({master0, exp_avg0, exp_avg_sq0}, 0, n));
//   CZ_RETURN_IF_ERROR(staging.Fetch({master1, exp_avg1, exp_avg_sq1}, 0, n));
//   CZ_ASSIGN_OR_RETURN(std::vector<char*> p, staging.Get(0));
//   ... the update of bytes [0, n) of chunk 0's payloads at p[0], p[1],
//   p[2] ...
//   CZ_RETURN_IF_ERROR(staging.Return(0));
//   ...
//   CZ_RETURN_IF_ERROR(staging.Finish());
//
// A fetch is a span of bytes of every chunk's payload (the same span in
// each: paired groups have the same layout), so that a large chunk
// updates in pieces and the buffers hold pieces, not chunks. Fetches are
// numbered 0, 1, ... in call order. Three sets of aligned buffers turn
// over: fetch k-1's writes, fetch k's update and fetch k+1's reads run at
// once, and fetch k+2 first waits for k-1's writes. Every chunk fetched
// must have its payload on disk. Internal to optim/. Not thread-safe.
// Destruction waits for the disk.
#ifndef CHUNKZERO_OPTIM_INTERNAL_DISK_STAGING_H_
#define CHUNKZERO_OPTIM_INTERNAL_DISK_STAGING_H_

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "chunk/chunk.h"
#include "chunk/chunk_disk_tier.h"
#include "io/nvme/aligned_buffer.h"
#include "tensor/memory/memory_tracker.h"

namespace chunkzero {
namespace optim_internal {

class DiskStaging {
 public:
  // The buffers count in `tracker` (may be null) as MemoryCategory::kOther
  // host memory, room made for them first (its reclaimer may send parameter
  // payloads to disk).
  explicit DiskStaging(ChunkDiskTier* disk, MemoryTracker* tracker = nullptr)
      : disk_(disk), tracker_(tracker) {}
  ~DiskStaging();
  DiskStaging(const DiskStaging&) = delete;
  DiskStaging& operator=(const DiskStaging&) = delete;

  // Starts reading bytes [first, first + bytes) of every chunk's payload
  // into the next free set. InvalidArgument for a span outside a payload.
  [[nodiscard]] absl::Status Fetch(const std::vector<Chunk*>& chunks,
                                   int64_t first, int64_t bytes);
  // Fetch k's spans (in its chunks' order), once read: each points at the
  // span's first byte.
  [[nodiscard]] absl::StatusOr<std::vector<char*>> Get(size_t k);
  // Starts writing fetch k's payloads back.
  [[nodiscard]] absl::Status Return(size_t k);
  // Waits for every read and write; the first error.
  [[nodiscard]] absl::Status Finish();

 private:
  struct Set {
    size_t k = 0;
    std::vector<Chunk*> chunks;
    // The whole disk blocks read and written, and where the span starts in
    // them.
    int64_t block_first = 0, block_bytes = 0, skip = 0;
    std::vector<AlignedBuffer> buffers;
    std::vector<std::string> whats;  // Outlive the batches.
    std::vector<IoBatch> reads, writes;
  };
  // Waits for `batches`, emptying it; the first error.
  absl::Status WaitAll(std::vector<IoBatch>& batches);
  absl::StatusOr<Set*> SetOf(size_t k);

  ChunkDiskTier* const disk_;
  MemoryTracker* const tracker_;
  int64_t counted_ = 0;  // Buffer bytes counted in tracker_.
  std::array<Set, 3> sets_;
  size_t fetched_ = 0;
};

}  // namespace optim_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_OPTIM_INTERNAL_DISK_STAGING_H_
