// CatchGloo: Gloo signals every failure by throwing; this turns a call's
// exceptions into statuses, so that none escapes a worker thread (which
// would end the process).
//
//   absl::Status s = CatchGloo("collective #3 ... failed on rank 1", [&] {
//     gloo::allgather(opts);
//     return absl::OkStatus();
//   });
//
// Internal to the Gloo backend.
#ifndef CHUNKZERO_COMM_GLOO_CATCH_GLOO_H_
#define CHUNKZERO_COMM_GLOO_CATCH_GLOO_H_

#include <exception>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "comm/internal/gloo_timeout.h"
#include "gloo/common/error.h"
#include "gloo/common/logging.h"

namespace chunkzero {
namespace comm {
namespace gloo_internal {

// Runs `fn` (returning absl::Status), turning any exception into a status
// whose message starts with `context`: a Gloo I/O error is DeadlineExceeded
// when it is a timeout, else Unavailable; a failed Gloo assertion or another
// std::exception is Internal; anything else Unknown.
template <typename Fn>
absl::Status CatchGloo(const std::string& context, Fn&& fn) {
  try {
    return fn();
  } catch (const gloo::IoException& e) {
    const absl::StatusCode code = comm_internal::IsGlooTimeoutMessage(e.what())
                                      ? absl::StatusCode::kDeadlineExceeded
                                      : absl::StatusCode::kUnavailable;
    return absl::Status(code, absl::StrCat(context, ": ", e.what()));
  } catch (const gloo::EnforceNotMet& e) {
    return absl::InternalError(
        absl::StrCat(context, ": gloo assertion failed: ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(context, ": ", e.what()));
  } catch (...) {
    return absl::UnknownError(
        absl::StrCat(context, ": unknown exception from gloo"));
  }
}

}  // namespace gloo_internal
}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_GLOO_CATCH_GLOO_H_
