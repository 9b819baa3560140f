#include "chunk/scheduled_chunks.h"

#include <algorithm>
#include <utility>

namespace chunkzero {

bool ScheduledChunks::Add(Chunk* chunk) {
  if (contains(chunk)) return false;
  chunks_.push_back(chunk);
  return true;
}

void ScheduledChunks::Forget(const Chunk* chunk) {
  if (beginning_ == chunk) beginning_ = nullptr;
  chunks_.erase(std::remove(chunks_.begin(), chunks_.end(), chunk),
                chunks_.end());
  schedule_.Forget(chunk);
}

bool ScheduledChunks::contains(const Chunk* chunk) const {
  return std::find(chunks_.begin(), chunks_.end(), chunk) != chunks_.end();
}

void ScheduledChunks::Began(const Chunk* chunk) {
  beginning_ = chunk;
  schedule_.Began(chunk);
}

std::vector<Chunk*> ScheduledChunks::FarthestFirst(
    absl::FunctionRef<bool(const Chunk&)> may_go) const {
  std::vector<Chunk*> order;
  for (Chunk* chunk : chunks_) {
    if (chunk != beginning_ && may_go(*chunk)) order.push_back(chunk);
  }
  // A stable sort keeps equals in the order they are listed in.
  if (ties_ == Ties::kAddedLast) std::reverse(order.begin(), order.end());
  std::stable_sort(order.begin(), order.end(),
                   [&](const Chunk* a, const Chunk* b) {
                     return schedule_.Distance(a) > schedule_.Distance(b);
                   });
  return order;
}

std::optional<std::vector<Chunk*>> ScheduledChunks::RoomFor(
    const Chunk* chunk, int64_t need, int64_t room,
    const std::vector<Chunk*>& farthest_first,
    absl::FunctionRef<int64_t(const Chunk&)> bytes) const {
  const int64_t distance = schedule_.Distance(chunk);
  std::vector<Chunk*> to_free;
  for (Chunk* candidate : farthest_first) {
    if (room >= need || schedule_.Distance(candidate) <= distance) break;
    to_free.push_back(candidate);
    room += bytes(*candidate);
  }
  if (room < need) return std::nullopt;
  return to_free;
}

}  // namespace chunkzero
