// ChunkDiskResidency: which chunks resting on disk (the NVMe tier) keep
// their payload in host memory, under a host memory limit (the third tier
// of the `auto` placement, ZeRO-Infinity's `offload_param: {device: nvme}`).
// Managed chunks rest on the disk tier (Chunk::AttachToDisk) but keep their
// payload in memory, between uses too, while the host's limit allows. When
// room is needed -- by any allocation the tracker counts on the host -- the
// payload whose next use is farthest away goes to disk (written only when
// changed since it was last read or written). Each use reads the next
// `lookahead` chunks of the schedule ahead, asynchronously, where there is
// room or room can be made from chunks used later than they are.
//
//   ChunkDiskResidency disk_residency(disk, &tracker, /*lookahead=*/2);
//   CZ_RETURN_IF_ERROR(disk_residency.Manage(chunk));  // complete chunks
//   disk_residency.SetSchedule({c0, c1, c1, c0});     // forward, backward
//   disk_residency.Began(c1);   // before its access: reads ahead
//   tracker.SetReclaimer(Device::Cpu(),
//                        [&](int64_t b) { return disk_residency.Reclaim(b); });
//
// With the auto placement (ChunkResidency) a managed chunk may rest on the
// device for a while: it stays attached to disk, and this tier counts and
// moves only payloads resting in host memory.
//
// Before a schedule is set every next use counts as equally far, and the
// chunk managed last goes first (registration keeps the first chunks the
// step will use). Moves never change values.
//
// Thread-safety: used by one rank's thread, like its ChunkManager; Reclaim
// runs on whichever thread allocates in host memory, which is that thread.
#ifndef CHUNKZERO_CHUNK_CHUNK_DISK_RESIDENCY_H_
#define CHUNKZERO_CHUNK_CHUNK_DISK_RESIDENCY_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "chunk/chunk.h"
#include "chunk/chunk_disk_tier.h"
#include "chunk/scheduled_chunks.h"
#include "tensor/memory/memory_tracker.h"

namespace chunkzero {

class ChunkDiskResidency {
 public:
  // `disk` and `tracker` (which holds the host's limit; null or no limit:
  // payloads leave memory only when Reclaim is asked) outlive this.
  ChunkDiskResidency(ChunkDiskTier* disk, const MemoryTracker* tracker,
                     int lookahead);
  ChunkDiskResidency(const ChunkDiskResidency&) = delete;
  ChunkDiskResidency& operator=(const ChunkDiskResidency&) = delete;

  // Attaches a complete chunk (no more appends) resting in host memory to
  // the disk (its payload stays in memory for now). Errors are
  // Chunk::AttachToDisk's. Forget before the chunk goes away.
  [[nodiscard]] absl::Status Manage(Chunk* chunk);
  void Forget(Chunk* chunk);
  bool manages(const Chunk* chunk) const;

  // The uses of one step, in order, a chunk once per use.
  void SetSchedule(std::vector<Chunk*> uses);

  // A use of `chunk` begins (before its access, which brings its payload
  // in): the clock moves to it and the next `lookahead` chunks' payloads
  // start coming from disk where room allows.
  void Began(const Chunk* chunk);

  // Sends payloads of chunks not accessed to disk, farthest next use
  // first, until at least `bytes` are freed in host memory. Returns the
  // bytes freed. For MemoryTracker::SetReclaimer.
  int64_t Reclaim(int64_t bytes);

  // Payload bytes of the managed chunks in host memory now (reads ahead
  // included).
  int64_t resident_bytes() const;
  // Payloads sent to disk to make room, and read ahead, since construction.
  int64_t evictions() const { return evictions_; }
  int64_t reads_ahead() const { return reads_ahead_; }
  // The first error a move met (a payload that could not be written stays
  // in memory; a read ahead that failed is read again by the access).
  const absl::Status& first_error() const { return first_error_; }

  // The use clock (ScheduledChunks::Clock), to save and put back.
  ScheduledChunks::Clock use_clock() const { return managed_.clock(); }
  void set_use_clock(const ScheduledChunks::Clock& clock) {
    managed_.set_clock(clock);
  }

 private:
  // Host bytes a managed chunk holds now: its payload, or its read-ahead
  // buffer.
  static int64_t HostBytes(const Chunk& chunk);
  // Managed chunks holding host memory that may leave now
  // (Chunk::CanEvictPayload, and not beginning), farthest next use first
  // (ties: managed last first).
  std::vector<Chunk*> EvictionOrder() const;
  bool Evict(Chunk* chunk);
  // Reads `chunk` ahead if room is there or can be made from chunks used
  // later than it; false when it cannot.
  bool ReadAhead(Chunk* chunk);
  void Note(const absl::Status& status);

  ChunkDiskTier* const disk_;
  const MemoryTracker* const tracker_;
  const int lookahead_;
  ScheduledChunks managed_{ScheduledChunks::Ties::kAddedLast};
  int64_t evictions_ = 0;
  int64_t reads_ahead_ = 0;
  absl::Status first_error_;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_CHUNK_CHUNK_DISK_RESIDENCY_H_
