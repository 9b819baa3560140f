#include "chunk/use_schedule.h"

#include <algorithm>
#include <utility>

namespace chunkzero {

void UseSchedule::Set(std::vector<Chunk*> uses) {
  uses_ = std::move(uses);
  positions_.clear();
  for (size_t k = 0; k < uses_.size(); ++k) {
    positions_[uses_[k]].push_back(static_cast<int64_t>(k));
  }
  clock_ = -1;
}

void UseSchedule::Forget(const Chunk* chunk) {
  if (positions_.count(chunk) == 0) return;
  // A schedule naming a chunk that is gone would keep a dangling pointer.
  std::vector<Chunk*> rest;
  for (Chunk* c : uses_) {
    if (c != chunk) rest.push_back(c);
  }
  Set(std::move(rest));
}

int64_t UseSchedule::Distance(const Chunk* chunk) const {
  auto found = positions_.find(chunk);
  if (found == positions_.end()) return kNever;
  const std::vector<int64_t>& at = found->second;
  // The first use after the clock, wrapping into the next step.
  auto next = std::upper_bound(at.begin(), at.end(), clock_);
  return next != at.end() ? *next - clock_ : at.front() + size() - clock_;
}

void UseSchedule::Began(const Chunk* chunk) {
  if (positions_.count(chunk) == 0) return;
  clock_ = (clock_ + Distance(chunk)) % size();
}

Chunk* UseSchedule::Ahead(int64_t ahead) const {
  if (uses_.empty()) return nullptr;
  const int64_t at = ((clock_ + ahead) % size() + size()) % size();
  return uses_[static_cast<size_t>(at)];
}

}  // namespace chunkzero
