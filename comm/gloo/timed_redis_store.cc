#include "comm/gloo/timed_redis_store.h"

#include <sys/time.h>

#include <algorithm>
#include <exception>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/gloo/store_wait.h"
#include "comm/internal/deadline.h"
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
  // it): try again every 100 ms until the timeout. Each try is a context of
  // our own, freed either way; Gloo's constructor throws without freeing
  // its context, so retrying through it would leak a context and a socket
  // each time.
  const absl::Time deadline = absl::Now() + timeout;
  std::string why;
  const bool up =
      comm_internal::RetryUntil(deadline, absl::Milliseconds(100), [&] {
        const absl::Duration left = deadline - absl::Now();
        const timeval tv = absl::ToTimeval(
            std::clamp(left, absl::Milliseconds(1), absl::Seconds(2)));
        redisContext* probe = redisConnectWithTimeout(host.c_str(), port, tv);
        const bool answered = probe != nullptr && probe->err == 0;
        why = probe == nullptr ? "cannot allocate a context"
              : answered       ? ""
                               : probe->errstr;
        if (probe != nullptr) redisFree(probe);
        return answered;
      });
  if (!up) {
    return absl::UnavailableError(
        absl::StrCat("cannot reach the rendezvous store ", where, " within ",
                     absl::FormatDuration(timeout), ": ", why));
  }
  std::unique_ptr<TimedRedisStore> store;
  try {
    store.reset(new TimedRedisStore(host, port, timeout, where));
  } catch (const std::exception& e) {
    // The server went away between the probe and this connection.
    return absl::UnavailableError(absl::StrCat(
        "cannot reach the rendezvous store ", where, ": ", e.what()));
  }
  const timeval tv = absl::ToTimeval(timeout);
  if (redisSetTimeout(store->redis_, tv) != REDIS_OK) {
    return absl::UnavailableError(absl::StrCat(
        where, ": cannot set the command timeout: ", store->redis_->errstr));
  }
  return store;
}

TimedRedisStore::Reply TimedRedisStore::Command(
    const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lengths;
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lengths.push_back(a.size());
  }
  Reply reply(static_cast<redisReply*>(redisCommandArgv(
      redis_, static_cast<int>(argv.size()), argv.data(), lengths.data())));
  if (reply == nullptr) {
    throw gloo::IoException(
        absl::StrCat("redis ", args[0], ": ", redis_->errstr));
  }
  if (reply->type == REDIS_REPLY_ERROR) {
    throw gloo::IoException(absl::StrCat("redis ", args[0], ": ",
                                         std::string(reply->str, reply->len)));
  }
  return reply;
}

void TimedRedisStore::set(const std::string& key,
                          const std::vector<char>& data) {
  const Reply reply =
      Command({"SETNX", key, std::string(data.begin(), data.end())});
  if (reply->type != REDIS_REPLY_INTEGER || reply->integer != 1) {
    throw gloo::IoException(absl::StrCat("Key '", key, "' already set"));
  }
  keys_set_.push_back(key);
}

absl::Status TimedRedisStore::DeleteKeysItSet() {
  if (keys_set_.empty()) return absl::OkStatus();
  std::vector<std::string> args = {"DEL"};
  args.insert(args.end(), keys_set_.begin(), keys_set_.end());
  try {
    Command(args);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "cannot delete the ", keys_set_.size(),
        " rendezvous key(s) this rank set from ", where_, ": ", e.what()));
  }
  keys_set_.clear();
  return absl::OkStatus();
}

std::vector<char> TimedRedisStore::get(const std::string& key) {
  wait({key});
  const Reply reply = Command({"GET", key});
  if (reply->type != REDIS_REPLY_STRING) {
    throw gloo::IoException(absl::StrCat(
        "redis GET ", key, ": not a string (type ", reply->type, ")"));
  }
  return std::vector<char>(reply->str, reply->str + reply->len);
}

bool TimedRedisStore::AllSet(const std::vector<std::string>& keys) {
  std::vector<std::string> args = {"EXISTS"};
  args.insert(args.end(), keys.begin(), keys.end());
  const Reply reply = Command(args);
  return reply->type == REDIS_REPLY_INTEGER &&
         reply->integer == static_cast<long long>(keys.size());
}

void TimedRedisStore::wait(const std::vector<std::string>& keys) {
  wait(keys, std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout_)));
}

void TimedRedisStore::wait(const std::vector<std::string>& keys,
                           const std::chrono::milliseconds& timeout) {
  PollForKeys(keys, timeout, "", [&] { return AllSet(keys); });
}

}  // namespace comm
}  // namespace chunkzero
