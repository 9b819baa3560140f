// Deadlines for blocking store and transport calls: how long one may wait
// (Gloo and its rendezvous stores take whole milliseconds, at least one),
// and retrying a connect until the other side is up.
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

// Calls `attempt` (returning bool) until it returns true or `deadline`
// passes, sleeping `every` between tries but never past the deadline;
// whether a try succeeded. The first try is made even if the deadline has
// passed. For servers that may come up after their clients (a store on
// another host, rank 0's port).
template <typename Attempt>
bool RetryUntil(absl::Time deadline, absl::Duration every, Attempt&& attempt) {
  while (true) {
    if (attempt()) return true;
    const absl::Time now = absl::Now();
    if (now >= deadline) return false;
    absl::SleepFor(std::min(every, deadline - now));
  }
}

}  // namespace comm_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_INTERNAL_DEADLINE_H_
