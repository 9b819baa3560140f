// DetachedCopy: hand an absl::Status to another thread without a false
// ThreadSanitizer report.
//
//   result_ = DetachedCopy(status);   // stored under a lock, read elsewhere
//
// An absl::Status with a message is reference counted, and its final Unref
// and free happen inside Debian's prebuilt libabsl, which is not built with
// -fsanitize=thread; TSAN then sees the reader and the freeing thread race.
// A detached copy shares no heap state with the original, so each thread
// frees only what it owns. Costs one string copy per non-OK status.
#ifndef CHUNKZERO_BASE_DETACHED_STATUS_H_
#define CHUNKZERO_BASE_DETACHED_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/cord.h"

namespace chunkzero {

// A copy of `status` (code, message and payloads) sharing no heap state.
[[nodiscard]] inline absl::Status DetachedCopy(const absl::Status& status) {
  if (status.ok()) return absl::OkStatus();
  absl::Status copy(status.code(), std::string(status.message()));
  status.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) {
    copy.SetPayload(url, absl::Cord(std::string(payload)));
  });
  return copy;
}

}  // namespace chunkzero

#endif  // CHUNKZERO_BASE_DETACHED_STATUS_H_
