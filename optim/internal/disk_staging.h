// DiskStaging: the masters and optimizer states of an update whose chunks
// rest on disk (the NVMe tier), read ahead of their chunk's update and
// written back while the next chunk updates.
//
//   DiskStaging staging(disk);
//   CZ_RETURN_IF_ERROR(staging.Fetch({master0, exp_avg0, exp_avg_sq0}));
//   CZ_RETURN_IF_ERROR(staging.Fetch({master1, exp_avg1, exp_avg_sq1}));
//   CZ_ASSIGN_OR_RETURN(std::vector<char*> p, staging.Get(0));
//   ... the update of chunk 0 on p[0], p[1], p[2] (each a whole payload) ...
//   CZ_RETURN_IF_ERROR(staging.Return(0));
//   ...
//   CZ_RETURN_IF_ERROR(staging.Finish());
//
// Fetches are numbered 0, 1, ... in call order. Three sets of aligned
// buffers turn over: chunk k-1's writes, chunk k's update and chunk k+1's
// reads run at once, and the fetch of k+2 first waits for k-1's writes.
// Every chunk fetched must have its payload on disk. Internal to optim/.
// Not thread-safe. Destruction waits for the disk.
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

namespace chunkzero {
namespace optim_internal {

class DiskStaging {
 public:
  explicit DiskStaging(ChunkDiskTier* disk) : disk_(disk) {}
  ~DiskStaging();
  DiskStaging(const DiskStaging&) = delete;
  DiskStaging& operator=(const DiskStaging&) = delete;

  // Starts reading every chunk's payload into the next free set.
  [[nodiscard]] absl::Status Fetch(const std::vector<Chunk*>& chunks);
  // Fetch k's payloads (in its chunks' order), once read.
  [[nodiscard]] absl::StatusOr<std::vector<char*>> Get(size_t k);
  // Starts writing fetch k's payloads back.
  [[nodiscard]] absl::Status Return(size_t k);
  // Waits for every read and write; the first error.
  [[nodiscard]] absl::Status Finish();

 private:
  struct Set {
    size_t k = 0;
    std::vector<Chunk*> chunks;
    std::vector<AlignedBuffer> buffers;
    std::vector<std::string> whats;  // Outlive the batches.
    std::vector<IoBatch> reads, writes;
  };
  // Waits for `batches`, emptying it; the first error.
  absl::Status WaitAll(std::vector<IoBatch>& batches);
  absl::StatusOr<Set*> SetOf(size_t k);

  ChunkDiskTier* const disk_;
  std::array<Set, 3> sets_;
  size_t fetched_ = 0;
};

}  // namespace optim_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_OPTIM_INTERNAL_DISK_STAGING_H_
