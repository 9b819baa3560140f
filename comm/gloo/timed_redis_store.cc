#include "comm/gloo/timed_redis_store.h"

#include <sys/time.h>

#include <algorithm>
#include <exception>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gloo/common/error.h"

namespace chunkzero {
namespace comm {

absl::StatusOr<std::unique_ptr<TimedRedisStore>> TimedRedisStore::Connect(
    const std::string& host, int port, absl::Duration timeout) {
  const std::string where = absl::StrCat("redis://", host, ":", port);
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": timeout ", absl::FormatDuration(timeout),
                     " is not positive"));
  }
  // The server may come up after this rank (another host's launcher starts
  // it): try again every 100 ms until the timeout.
  const absl::Time deadline = absl::Now() + timeout;
  std::unique_ptr<TimedRedisStore> store;
  while (store == nullptr) {
    try {
      store.reset(new TimedRedisStore(host, port));
    } catch (const std::exception& e) {
      if (absl::Now() >= deadline) {
        return absl::UnavailableError(absl::StrCat(
            "cannot reach the rendezvous store ", where, " within ",
            absl::FormatDuration(timeout), ": ", e.what()));
      }
      absl::SleepFor(std::min(absl::Milliseconds(100), deadline - absl::Now()));
    }
  }
  const timeval tv = absl::ToTimeval(timeout);
  if (redisSetTimeout(store->redis_, tv) != REDIS_OK) {
    return absl::UnavailableError(absl::StrCat(
        where, ": cannot set the command timeout: ", store->redis_->errstr));
  }
  return store;
}

void TimedRedisStore::wait(const std::vector<std::string>& keys,
                           const std::chrono::milliseconds& timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!check(keys)) {
    if (timeout != gloo::kNoTimeout &&
        std::chrono::steady_clock::now() >= deadline) {
      throw gloo::IoException(
          absl::StrCat("Wait timeout for key(s): ", absl::StrJoin(keys, ", ")));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace comm
}  // namespace chunkzero
