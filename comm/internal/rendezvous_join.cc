#include "comm/internal/rendezvous_join.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "comm/internal/deadline.h"

namespace chunkzero {
namespace comm_internal {
std::string JoinKey(absl::string_view prefix, int rank) {
  return absl::StrCat(prefix, rank);
}

absl::Status AnnounceJoin(gloo::rendezvous::Store& store,
                          absl::string_view prefix, int rank,
                          const std::string& value, absl::string_view where) {
  try {
    store.set(JoinKey(prefix, rank),
              std::vector<char>(value.begin(), value.end()));
  } catch (const std::exception& e) {
    // FileStore says "already exists", HashStore "already set".
    if (absl::StrContains(e.what(), "already")) {
      return absl::FailedPreconditionError(absl::StrCat(
          where,
          ": the rendezvous store already holds this rank's key, so it holds "
          "an earlier job's rendezvous (",
          e.what(),
          "); give each job a fresh store (a new directory, or a redis:// "
          "prefix of its own: a job whose ranks did not all meet, or one "
          "running now, leaves its keys there)"));
    }
    return absl::UnavailableError(
        absl::StrCat(where, ": rendezvous store: ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status AwaitJoins(gloo::rendezvous::Store& store,
                        absl::string_view prefix, int rank, int size,
                        absl::Time deadline, absl::Duration timeout,
                        absl::string_view who, const JoinCheck& check) {
  std::vector<int> missing;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    const std::string key = JoinKey(prefix, r);
    // After the first miss, only probe: the deadline has passed.
    const std::chrono::milliseconds wait = missing.empty()
                                               ? MillisecondsLeft(deadline)
                                               : std::chrono::milliseconds(1);
    try {
      store.wait({key}, wait);
    } catch (const std::exception&) {
      missing.push_back(r);
      continue;
    }
    if (check == nullptr) continue;
    std::vector<char> value;
    try {
      value = store.get(key);
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat(
          who, ": rendezvous store: reading rank ", r, "'s key: ", e.what()));
    }
    if (absl::Status s = check(r, std::string(value.begin(), value.end()));
        !s.ok()) {
      return s;
    }
  }
  if (missing.empty()) return absl::OkStatus();
  return absl::DeadlineExceededError(
      absl::StrCat(who, " timed out after ", absl::FormatDuration(timeout),
                   " waiting for rank", missing.size() == 1 ? " " : "s ",
                   absl::StrJoin(missing, ", "), " to join the rendezvous"));
}

}  // namespace comm_internal
}  // namespace chunkzero
