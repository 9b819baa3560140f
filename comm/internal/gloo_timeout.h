// IsGlooTimeoutMessage: Gloo reports every timeout (store waits, connects,
// transfers) as an exception whose message says so; there is no separate
// exception type to catch.
#ifndef CHUNKZERO_COMM_INTERNAL_GLOO_TIMEOUT_H_
#define CHUNKZERO_COMM_INTERNAL_GLOO_TIMEOUT_H_

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace chunkzero {
namespace comm_internal {

// True for "Timed out ...", "... timed out ..." and "... timeout ...":
// the words Gloo's transports and stores use.
inline bool IsGlooTimeoutMessage(absl::string_view what) {
  return absl::StrContains(what, "imed out") ||
         absl::StrContains(what, "imeout");
}

}  // namespace comm_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_INTERNAL_GLOO_TIMEOUT_H_
