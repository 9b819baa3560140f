#include "chunk/chunk_residency.h"

#include <algorithm>
#include <utility>

#include "chunk/chunk_layout.h"

namespace chunkzero {
namespace {

// What a chunk at rest holds on this rank: its shard, or a holder's full
// buffer (nothing on a non-owner).
// REQUIRES: not accessed.
int64_t RestBytes(const Chunk& chunk) { return chunk.payload_bytes(); }

}  // namespace

ChunkResidency::ChunkResidency(Device device, Device host,
                               const MemoryTracker* tracker)
    : device_(device), host_(host), tracker_(tracker) {}

void ChunkResidency::Manage(Chunk* chunk) {
  if (std::find(managed_.begin(), managed_.end(), chunk) == managed_.end()) {
    managed_.push_back(chunk);
  }
}

void ChunkResidency::Forget(Chunk* chunk) {
  if (beginning_ == chunk) beginning_ = nullptr;
  managed_.erase(std::remove(managed_.begin(), managed_.end(), chunk),
                 managed_.end());
  schedule_.Forget(chunk);
}

void ChunkResidency::SetSchedule(std::vector<Chunk*> uses) {
  schedule_.Set(std::move(uses));
}

int64_t ChunkResidency::Distance(const Chunk* chunk) const {
  return schedule_.Distance(chunk);
}

void ChunkResidency::Began(const Chunk* chunk) {
  beginning_ = chunk;
  schedule_.Began(chunk);
}

std::vector<Chunk*> ChunkResidency::EvictionOrder() const {
  std::vector<Chunk*> residents;
  for (Chunk* chunk : managed_) {
    if (chunk->rest_device() == device_ && !chunk->is_accessed() &&
        chunk != beginning_ && RestBytes(*chunk) > 0) {
      residents.push_back(chunk);
    }
  }
  std::stable_sort(residents.begin(), residents.end(),
                   [&](const Chunk* a, const Chunk* b) {
                     return Distance(a) > Distance(b);
                   });
  return residents;
}

bool ChunkResidency::Evict(Chunk* chunk) {
  if (!chunk->MoveRestTo(host_).ok()) return false;
  ++evictions_;
  return true;
}

int64_t ChunkResidency::Reclaim(int64_t bytes) {
  // Keeping a chunk has already made its room (Releasing).
  if (moving_in_) return 0;
  int64_t freed = 0;
  for (Chunk* chunk : EvictionOrder()) {
    if (freed >= bytes) break;
    const int64_t held = RestBytes(*chunk);
    if (!Evict(chunk)) break;  // The host is full too: give what we have.
    freed += held;
  }
  return freed;
}

void ChunkResidency::Releasing(Chunk* chunk) {
  if (!chunk->is_accessed() || chunk->rest_device() == device_ ||
      std::find(managed_.begin(), managed_.end(), chunk) == managed_.end()) {
    return;
  }
  // What resting here adds to the device now: a sharded rank's shard; a
  // holder's buffer is already on it, and a non-owner keeps nothing.
  const int64_t bytes = ShardStorageElements(chunk->sharding()) *
                        static_cast<int64_t>(ElementSize(chunk->dtype()));
  int64_t room = bytes;  // No limit: always room.
  if (tracker_ != nullptr && tracker_->Limit(device_).has_value()) {
    room = *tracker_->Limit(device_) - tracker_->CurrentTotal(device_);
  }
  if (room < bytes) {
    // Make room only from residents used later than this chunk, farthest
    // first, and only if that is enough.
    const int64_t distance = Distance(chunk);
    std::vector<Chunk*> later;
    int64_t available = room;
    for (Chunk* resident : EvictionOrder()) {
      if (available >= bytes || Distance(resident) <= distance) break;
      later.push_back(resident);
      available += RestBytes(*resident);
    }
    if (available < bytes) return;
    for (Chunk* resident : later) {
      if (!Evict(resident)) return;
    }
  }
  moving_in_ = true;
  chunk->RestWhereItComputes().IgnoreError();  // Failed: back to the host.
  moving_in_ = false;
}

int64_t ChunkResidency::resident_bytes() const {
  int64_t bytes = 0;
  for (const Chunk* chunk : managed_) {
    if (chunk->rest_device() == device_) bytes += RestBytes(*chunk);
  }
  return bytes;
}

}  // namespace chunkzero
