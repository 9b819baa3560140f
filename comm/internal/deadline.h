// How long a blocking store or transport call may wait for a deadline:
// Gloo (and its rendezvous stores) take whole milliseconds, at least one.
#ifndef CHUNKZERO_COMM_INTERNAL_DEADLINE_H_
#define CHUNKZERO_COMM_INTERNAL_DEADLINE_H_

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace chunkzero {
namespace comm_internal {

// The time left until `deadline`, rounded up to whole milliseconds, at
// least 1 (a deadline already passed still gets one short try).
inline std::chrono::milliseconds MillisecondsLeft(absl::Time deadline) {
  const int64_t ms = absl::ToInt64Milliseconds(
      absl::Ceil(deadline - absl::Now(), absl::Milliseconds(1)));
  return std::chrono::milliseconds(std::max<int64_t>(ms, 1));
}

}  // namespace comm_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_INTERNAL_DEADLINE_H_
