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
#ifndef CHUNKZERO_COMM_RENDEZVOUS_RENDEZVOUS_JOIN_H_
#define CHUNKZERO_COMM_RENDEZVOUS_RENDEZVOUS_JOIN_H_

#include <functional>
#include <string>
#include <vector>

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

// Tells the ranks still waiting on `store` (AwaitJoins, WaitForKeys) that
// `rank` gave up before the rendezvous completed, with `why`, so that they
// fail at once rather than at their deadline: the key `prefix` + "gave_up"
// holds the first such rank and reason. Best effort: a store error (a
// second rank's give-up is "already set") is ignored.
void AnnounceGiveUp(gloo::rendezvous::Store& store, absl::string_view prefix,
                    int rank, const absl::Status& why);

// Waits until `store` holds `keys`: OK; DeadlineExceeded at `deadline`;
// FailedPrecondition "<who>: rank R gave up before the rendezvous
// completed: <why>" as soon as a rank announced that (AnnounceGiveUp);
// Unavailable for another store error.
[[nodiscard]] absl::Status WaitForKeys(gloo::rendezvous::Store& store,
                                       const std::vector<std::string>& keys,
                                       absl::string_view prefix,
                                       absl::Time deadline,
                                       absl::string_view who);

// Checks a peer's join value as it arrives: (peer rank, its value).
using JoinCheck = std::function<absl::Status(int, const std::string&)>;

// Waits until every other rank of `size` has set its key, in rank order,
// passing each value to `check` (null: none), whose error is returned at
// once. At `deadline` the remaining ranks are only probed, and
// DeadlineExceeded says "<who> timed out after <timeout> waiting for
// ranks 2, 3 to join the rendezvous". A rank's give-up (AnnounceGiveUp)
// fails it at once (WaitForKeys). Unavailable for another store error.
[[nodiscard]] absl::Status AwaitJoins(gloo::rendezvous::Store& store,
                                      absl::string_view prefix, int rank,
                                      int size, absl::Time deadline,
                                      absl::Duration timeout,
                                      absl::string_view who,
                                      const JoinCheck& check = nullptr);

}  // namespace comm_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_RENDEZVOUS_RENDEZVOUS_JOIN_H_
