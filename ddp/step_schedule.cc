#include "ddp/step_schedule.h"

#include <utility>

namespace chunkzero {

void StepSchedule::Begin(Kind kind, std::vector<int> params) {
  if (recording_.empty()) following_ = !adopted_.empty();
  const size_t position = recording_.size();
  if (kind == kBackward) in_backward_ = true;
  recomputing_ = kind == kForward && in_backward_;
  recording_.push_back(Op{kind, std::move(params)});
  if (following_ && (position >= adopted_.size() ||
                     !(adopted_[position] == recording_.back()))) {
    following_ = false;
  }
}

absl::Span<const StepSchedule::Op> StepSchedule::Ahead() const {
  if (!following_) return {};
  return absl::MakeConstSpan(adopted_).subspan(recording_.size());
}

std::vector<StepSchedule::Op> StepSchedule::EndStep() {
  std::vector<Op> ran = std::move(recording_);
  recording_.clear();
  following_ = false;
  in_backward_ = false;
  recomputing_ = false;
  return ran;
}

void StepSchedule::Adopt(std::vector<Op> ops) { adopted_ = std::move(ops); }

uint64_t StepSchedule::Fingerprint(absl::Span<const Op> ops) {
  uint64_t hash = 1469598103934665603ull;
  auto mix = [&](uint64_t value) {
    for (int byte = 0; byte < 8; ++byte) {
      hash ^= (value >> (8 * byte)) & 0xff;
      hash *= 1099511628211ull;
    }
  };
  mix(ops.size());
  for (const Op& op : ops) {
    mix(op.kind);
    mix(op.params.size());
    for (int p : op.params) mix(static_cast<uint64_t>(static_cast<int64_t>(p)));
  }
  return hash;
}

size_t StepSchedule::UntilNextRecompute(absl::Span<const Op> ops) {
  bool backward = false;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == kBackward) backward = true;
    if (ops[i].kind == kForward && backward) return i;
  }
  return ops.size();
}

bool StepSchedule::Recomputes(absl::Span<const Op> ops) {
  bool backward = false;
  for (const Op& op : ops) {
    if (op.kind == kBackward) backward = true;
    if (op.kind == kForward && backward) return true;
  }
  return false;
}

}  // namespace chunkzero
