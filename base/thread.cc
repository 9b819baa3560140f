#include "base/thread.h"

#include <sys/resource.h>

#include <atomic>

#include "absl/strings/str_cat.h"

namespace chunkzero {
namespace {

// Starts to let through, then starts to fail (FailThreadStartsForTesting).
std::atomic<int> g_skip{0};
std::atomic<int> g_fail{0};

}  // namespace

std::string ThreadLimitNote() {
  struct rlimit limit;
  if (::getrlimit(RLIMIT_NPROC, &limit) != 0 ||
      limit.rlim_cur == RLIM_INFINITY) {
    return "";
  }
  return absl::StrCat(" (this user may run ", limit.rlim_cur,
                      " processes and threads: ulimit -u)");
}

absl::Status ThreadStartError(absl::string_view what,
                              const std::system_error& error) {
  return absl::ResourceExhaustedError(absl::StrCat(
      "cannot start ", what, ": ", error.code().message(), ThreadLimitNote()));
}

namespace thread_internal {

bool FailThisStartForTesting() {
  if (g_fail.load(std::memory_order_relaxed) == 0) return false;
  int skip = g_skip.load(std::memory_order_relaxed);
  while (skip > 0) {
    if (g_skip.compare_exchange_weak(skip, skip - 1)) return false;
  }
  int fail = g_fail.load(std::memory_order_relaxed);
  while (fail > 0) {
    if (g_fail.compare_exchange_weak(fail, fail - 1)) return true;
  }
  return false;
}

}  // namespace thread_internal

void FailThreadStartsForTesting(int skip, int fail) {
  g_skip.store(skip);
  g_fail.store(fail);
}

}  // namespace chunkzero
