#include "chunk/chunk_disk_residency.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "base/status_macros.h"
#include "chunk/use_schedule.h"

namespace chunkzero {

ChunkDiskResidency::ChunkDiskResidency(ChunkDiskTier* disk,
                                       const MemoryTracker* tracker,
                                       int lookahead)
    : disk_(disk), tracker_(tracker), lookahead_(lookahead) {}

absl::Status ChunkDiskResidency::Manage(Chunk* chunk) {
  if (manages(chunk)) return absl::OkStatus();
  CZ_RETURN_IF_ERROR(chunk->AttachToDisk(disk_));
  managed_.Add(chunk);
  return absl::OkStatus();
}

bool ChunkDiskResidency::manages(const Chunk* chunk) const {
  return managed_.contains(chunk);
}

void ChunkDiskResidency::Forget(Chunk* chunk) { managed_.Forget(chunk); }

void ChunkDiskResidency::SetSchedule(std::vector<Chunk*> uses) {
  managed_.SetSchedule(std::move(uses));
}

int64_t ChunkDiskResidency::HostBytes(const Chunk& chunk) {
  if (chunk.payload_loading()) return chunk.disk_region().bytes;
  // On disk, or resting on the device for now (the auto placement's).
  if (chunk.payload_on_disk() || chunk.rest_device() != Device::Cpu()) {
    return 0;
  }
  return chunk.rest_payload_bytes();
}

std::vector<Chunk*> ChunkDiskResidency::EvictionOrder() const {
  return managed_.FarthestFirst([](const Chunk& chunk) {
    return chunk.CanEvictPayload() && HostBytes(chunk) > 0;
  });
}

void ChunkDiskResidency::Note(const absl::Status& status) {
  if (first_error_.ok()) first_error_ = status;
}

bool ChunkDiskResidency::Evict(Chunk* chunk) {
  const absl::Status evicted = chunk->EvictPayload();
  if (!evicted.ok()) {
    Note(evicted);
    return false;
  }
  ++evictions_;
  return true;
}

int64_t ChunkDiskResidency::Reclaim(int64_t bytes) {
  int64_t freed = 0;
  for (Chunk* chunk : EvictionOrder()) {
    if (freed >= bytes) break;
    const int64_t held = HostBytes(*chunk);
    if (Evict(chunk)) freed += held;
  }
  return freed;
}

bool ChunkDiskResidency::ReadAhead(Chunk* chunk) {
  // The read's buffer, then the payload it is copied into.
  const int64_t need = chunk->disk_region().bytes + chunk->rest_payload_bytes();
  if (tracker_ != nullptr && tracker_->Limit(Device::Cpu()).has_value()) {
    const int64_t room =
        *tracker_->Limit(Device::Cpu()) - tracker_->CurrentTotal(Device::Cpu());
    if (room < need) {
      // Only from chunks used later than this one, and only if enough.
      const std::optional<std::vector<Chunk*>> to_free =
          managed_.RoomFor(chunk, need, room, EvictionOrder(), HostBytes);
      if (!to_free.has_value()) return false;
      for (Chunk* resident : *to_free) {
        if (!Evict(resident)) return false;
      }
    }
  }
  const absl::Status started = chunk->StartLoadPayload();
  if (!started.ok()) {
    Note(started);
    return false;
  }
  ++reads_ahead_;
  return true;
}

void ChunkDiskResidency::Began(const Chunk* chunk) {
  managed_.Began(chunk);
  const UseSchedule& schedule = managed_.schedule();
  // The next `lookahead_` other chunks the schedule uses; those already in
  // memory count, so the read never runs further ahead than that.
  std::vector<const Chunk*> seen = {chunk};
  for (int64_t k = 1;
       k <= schedule.size() && static_cast<int>(seen.size()) <= lookahead_;
       ++k) {
    Chunk* next = schedule.Ahead(k);
    if (std::find(seen.begin(), seen.end(), next) != seen.end()) continue;
    seen.push_back(next);
    if (!manages(next) || next->is_accessed() || !next->payload_on_disk() ||
        next->payload_loading()) {
      continue;
    }
    if (!ReadAhead(next)) break;
  }
}

int64_t ChunkDiskResidency::resident_bytes() const {
  int64_t bytes = 0;
  for (const Chunk* chunk : managed_.chunks()) bytes += HostBytes(*chunk);
  return bytes;
}

}  // namespace chunkzero
