#include "comm/rendezvous/rendezvous_join.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "comm/internal/deadline.h"
#include "comm/internal/gloo_timeout.h"

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

namespace {

// How often a wait looks for a give-up.
constexpr std::chrono::milliseconds kGiveUpPoll{50};

std::string GiveUpKey(absl::string_view prefix) {
  return absl::StrCat(prefix, "gave_up");
}

// The give-up announced in `store`, or OK.
absl::Status GiveUpIn(gloo::rendezvous::Store& store, absl::string_view prefix,
                      absl::string_view who) {
  const std::string key = GiveUpKey(prefix);
  std::vector<char> value;
  try {
    store.wait({key}, std::chrono::milliseconds(1));
    value = store.get(key);
  } catch (const std::exception&) {
    return absl::OkStatus();  // None (or the store says nothing more).
  }
  return absl::FailedPreconditionError(
      absl::StrCat(who, ": ", std::string(value.begin(), value.end())));
}

}  // namespace

void AnnounceGiveUp(gloo::rendezvous::Store& store, absl::string_view prefix,
                    int rank, const absl::Status& why) {
  const std::string text =
      absl::StrCat("rank ", rank, " gave up before the rendezvous completed: ",
                   absl::StatusCodeToString(why.code()), ": ", why.message());
  try {
    store.set(GiveUpKey(prefix), std::vector<char>(text.begin(), text.end()));
  } catch (const std::exception&) {
    // Another rank gave up first, or the store is gone: nothing to add.
  }
}

absl::Status WaitForKeys(gloo::rendezvous::Store& store,
                         const std::vector<std::string>& keys,
                         absl::string_view prefix, absl::Time deadline,
                         absl::string_view who) {
  for (;;) {
    const std::chrono::milliseconds left = MillisecondsLeft(deadline);
    try {
      // At least 1 ms: Gloo reads 0 as "no timeout".
      store.wait(keys, std::max(std::chrono::milliseconds(1),
                                std::min(left, kGiveUpPoll)));
      return absl::OkStatus();
    } catch (const std::exception& e) {
      if (!comm_internal::IsGlooTimeoutMessage(e.what())) {
        return absl::UnavailableError(
            absl::StrCat(who, ": rendezvous store: ", e.what()));
      }
    }
    CZ_RETURN_IF_ERROR(GiveUpIn(store, prefix, who));
    if (left <= kGiveUpPoll) {
      return absl::DeadlineExceededError(
          absl::StrCat(who, ": waited for the rendezvous until its deadline"));
    }
  }
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
    const absl::Status waited =
        missing.empty() ? WaitForKeys(store, {key}, prefix, deadline, who)
                        : WaitForKeys(store, {key}, prefix, absl::Now(), who);
    if (absl::IsDeadlineExceeded(waited)) {
      missing.push_back(r);
      continue;
    }
    CZ_RETURN_IF_ERROR(waited);
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
