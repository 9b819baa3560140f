// StartThread: std::thread's constructor, with a Status where it would throw.
//
//   CZ_ASSIGN_OR_RETURN(std::thread worker,
//                       StartThread("the comm worker of rank 3", [this] {
//                         Loop();
//                       }));
//
// std::thread throws std::system_error when the kernel refuses a thread
// (the limit on a user's processes and threads, `ulimit -u`, or no memory
// for its stack). Thrown on a thread of our own, that ends the process; here
// it is ResourceExhausted naming what could not start and the limit:
// "cannot start the comm worker of rank 3: Resource temporarily unavailable
// (this user may run 40 processes and threads, ulimit -u)".
//
// Thread-safety: thread-safe.
#ifndef CHUNKZERO_BASE_THREAD_H_
#define CHUNKZERO_BASE_THREAD_H_

#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace chunkzero {

// " (this user may run N processes and threads: ulimit -u)", or "" where
// no limit is set: for messages about a thread that could not start,
// including threads other libraries start.
std::string ThreadLimitNote();

// The status for a thread `what` that could not start with `error`.
[[nodiscard]] absl::Status ThreadStartError(absl::string_view what,
                                            const std::system_error& error);

namespace thread_internal {
// True when a test has asked the next start to fail (see
// FailThreadStartsForTesting); counts the start down.
bool FailThisStartForTesting();
}  // namespace thread_internal

// Starts `fn` on a new thread (see above).
template <typename Fn>
[[nodiscard]] absl::StatusOr<std::thread> StartThread(absl::string_view what,
                                                      Fn&& fn) {
  try {
    if (thread_internal::FailThisStartForTesting()) {
      throw std::system_error(
          std::make_error_code(std::errc::resource_unavailable_try_again));
    }
    return std::thread(std::forward<Fn>(fn));
  } catch (const std::system_error& e) {
    return ThreadStartError(what, e);
  }
}

// From now on, the `skip` thread starts after this call succeed and the
// `fail` after those fail as the kernel's refusal would (for tests of the
// error paths). FailThreadStartsForTesting(0, 0) restores normal starts.
void FailThreadStartsForTesting(int skip, int fail);

}  // namespace chunkzero

#endif  // CHUNKZERO_BASE_THREAD_H_
