// How a backend's ranks meet in a rendezvous store before their own setup
// (Gloo's mesh, NCCL's unique id): each sets a join key holding what the
// ranks must agree on and waits for every other rank's, so that a rank that
// never comes is named at the deadline, ranks started differently are told
// so at once, and a store left over from an earlier job is refused.
//
//   CZ_RETURN_IF_ERROR(AnnounceJoin(store, "chunkzero_gloo_joined_", rank,
//                                   value, where));
//   CZ_RETURN_IF_ERROR(AwaitJoins(store, "chunkzero_gloo_joined_", rank,
//                                 size, deadline, timeout, who, compare));
//
// Keys are `prefix` + rank; a FileStore makes each key a file name, so a
// prefix holds no '/'. Not part of the comm interface.
#ifndef CHUNKZERO_COMM_INTERNAL_RENDEZVOUS_JOIN_H_
#define CHUNKZERO_COMM_INTERNAL_RENDEZVOUS_JOIN_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gloo/rendezvous/store.h"

namespace chunkzero {
namespace comm_internal {

std::string JoinKey(absl::string_view prefix, int rank);

// Sets this rank's key to `value`. FailedPrecondition, naming `where`, when
// the store already holds it (an earlier job's store); Unavailable for any
// other store error.
[[nodiscard]] absl::Status AnnounceJoin(gloo::rendezvous::Store& store,
                                        absl::string_view prefix, int rank,
                                        const std::string& value,
                                        absl::string_view where);

// Checks a peer's join value as it arrives: (peer rank, its value).
using JoinCheck = std::function<absl::Status(int, const std::string&)>;

// Waits until every other rank of `size` has set its key, in rank order,
// passing each value to `check` (null: none), whose error is returned at
// once. At `deadline` the remaining ranks are only probed, and
// DeadlineExceeded says "<who> timed out after <timeout> waiting for
// ranks 2, 3 to join the rendezvous". Unavailable for another store error.
[[nodiscard]] absl::Status AwaitJoins(gloo::rendezvous::Store& store,
                                      absl::string_view prefix, int rank,
                                      int size, absl::Time deadline,
                                      absl::Duration timeout,
                                      absl::string_view who,
                                      const JoinCheck& check = nullptr);

}  // namespace comm_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_INTERNAL_RENDEZVOUS_JOIN_H_
