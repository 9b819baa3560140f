#include "comm/rendezvous/store_wait.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/internal/deadline.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/store.h"

namespace chunkzero {
namespace comm {

void PollForKeys(const std::vector<std::string>& keys,
                 std::chrono::milliseconds timeout, absl::string_view who,
                 const std::function<bool()>& all_set) {
  // Capped (at about 35 years) so that the deadline cannot overflow.
  const absl::Time deadline =
      timeout == gloo::kNoTimeout
          ? absl::InfiniteFuture()
          : absl::Now() + absl::Milliseconds(std::min<int64_t>(
                              timeout.count(), int64_t{1} << 40));
  if (comm_internal::RetryUntil(deadline, absl::Milliseconds(10), all_set)) {
    return;
  }
  throw gloo::IoException(
      absl::StrCat(who, who.empty() ? "" : ": ",
                   "Wait timeout for key(s): ", absl::StrJoin(keys, ", ")));
}

}  // namespace comm
}  // namespace chunkzero
