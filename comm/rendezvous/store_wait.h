// PollForKeys: the wait(keys, timeout) of a Gloo rendezvous store that can
// only ask whether keys are set, timed to the millisecond.
//
//   void wait(const std::vector<std::string>& keys,
//             const std::chrono::milliseconds& timeout) override {
//     PollForKeys(keys, timeout, "rendezvous store ...",
//                 [&] { return AllSet(keys); });
//   }
//
// Gloo's own FileStore counts whole seconds, so a 1 ms probe of a key took
// a second; this one sleeps 10 ms between looks but never past the timeout.
#ifndef CHUNKZERO_COMM_RENDEZVOUS_STORE_WAIT_H_
#define CHUNKZERO_COMM_RENDEZVOUS_STORE_WAIT_H_

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace chunkzero {
namespace comm {

// Returns once `all_set()` is true (it is asked at least once). Throws
// gloo::IoException "WHO: Wait timeout for key(s): a, b" (without "WHO: "
// for an empty `who`) once `timeout` has passed; gloo::kNoTimeout (zero)
// waits for as long as it takes. Exceptions from `all_set` pass through.
void PollForKeys(const std::vector<std::string>& keys,
                 std::chrono::milliseconds timeout, absl::string_view who,
                 const std::function<bool()>& all_set);

}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_RENDEZVOUS_STORE_WAIT_H_
