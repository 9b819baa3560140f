#include "chunk/chunk_disk_residency.h"

#include <algorithm>
#include <utility>

#include "base/status_macros.h"

namespace chunkzero {

ChunkDiskResidency::ChunkDiskResidency(ChunkDiskTier* disk,
                                       const MemoryTracker* tracker,
                                       int lookahead)
    : disk_(disk), tracker_(tracker), lookahead_(lookahead) {}

absl::Status ChunkDiskResidency::Manage(Chunk* chunk) {
  if (manages(chunk)) return absl::OkStatus();
  CZ_RETURN_IF_ERROR(chunk->AttachToDisk(disk_));
  managed_.push_back(chunk);
  return absl::OkStatus();
}

bool ChunkDiskResidency::manages(const Chunk* chunk) const {
  return std::find(managed_.begin(), managed_.end(), chunk) != managed_.end();
}

void ChunkDiskResidency::Forget(Chunk* chunk) {
  if (beginning_ == chunk) beginning_ = nullptr;
  managed_.erase(std::remove(managed_.begin(), managed_.end(), chunk),
                 managed_.end());
  schedule_.Forget(chunk);
}

void ChunkDiskResidency::SetSchedule(std::vector<Chunk*> uses) {
  schedule_.Set(std::move(uses));
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
  std::vector<Chunk*> residents;
  // Managed last first, so that a stable sort breaks ties that way.
  for (auto it = managed_.rbegin(); it != managed_.rend(); ++it) {
    Chunk* chunk = *it;
    if (chunk->CanEvictPayload() && chunk != beginning_ &&
        HostBytes(*chunk) > 0) {
      residents.push_back(chunk);
    }
  }
  std::stable_sort(residents.begin(), residents.end(),
                   [&](const Chunk* a, const Chunk* b) {
                     return schedule_.Distance(a) > schedule_.Distance(b);
                   });
  return residents;
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
    int64_t room =
        *tracker_->Limit(Device::Cpu()) - tracker_->CurrentTotal(Device::Cpu());
    if (room < need) {
      // Only from chunks used later than this one, and only if enough.
      const int64_t distance = schedule_.Distance(chunk);
      std::vector<Chunk*> later;
      for (Chunk* resident : EvictionOrder()) {
        if (room >= need || schedule_.Distance(resident) <= distance) break;
        later.push_back(resident);
        room += HostBytes(*resident);
      }
      if (room < need) return false;
      for (Chunk* resident : later) {
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
  beginning_ = chunk;
  schedule_.Began(chunk);
  // The next `lookahead_` other chunks the schedule uses; those already in
  // memory count, so the read never runs further ahead than that.
  std::vector<const Chunk*> seen = {chunk};
  for (int64_t k = 1;
       k <= schedule_.size() && static_cast<int>(seen.size()) <= lookahead_;
       ++k) {
    Chunk* next = schedule_.Ahead(k);
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
  for (const Chunk* chunk : managed_) bytes += HostBytes(*chunk);
  return bytes;
}

}  // namespace chunkzero
