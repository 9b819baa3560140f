#include "chunk/chunk_residency.h"

#include <optional>
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

void ChunkResidency::Manage(Chunk* chunk) { managed_.Add(chunk); }

void ChunkResidency::Forget(Chunk* chunk) { managed_.Forget(chunk); }

void ChunkResidency::SetSchedule(std::vector<Chunk*> uses) {
  managed_.SetSchedule(std::move(uses));
}

void ChunkResidency::Began(const Chunk* chunk) { managed_.Began(chunk); }

std::vector<Chunk*> ChunkResidency::EvictionOrder() const {
  return managed_.FarthestFirst([&](const Chunk& chunk) {
    return chunk.rest_device() == device_ && !chunk.is_accessed() &&
           RestBytes(chunk) > 0;
  });
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
      !managed_.contains(chunk)) {
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
    const std::optional<std::vector<Chunk*>> to_free = managed_.RoomFor(
        chunk, bytes, room, EvictionOrder(),
        [](const Chunk& resident) { return RestBytes(resident); });
    if (!to_free.has_value()) return;
    for (Chunk* resident : *to_free) {
      if (!Evict(resident)) return;
    }
  }
  moving_in_ = true;
  chunk->RestWhereItComputes().IgnoreError();  // Failed: back to the host.
  moving_in_ = false;
}

int64_t ChunkResidency::resident_bytes() const {
  int64_t bytes = 0;
  for (const Chunk* chunk : managed_.chunks()) {
    if (chunk->rest_device() == device_) bytes += RestBytes(*chunk);
  }
  return bytes;
}

}  // namespace chunkzero
