#include "comm/rendezvous/timed_redis_store.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <exception>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "comm/internal/deadline.h"
#include "comm/rendezvous/store_wait.h"
#include "gloo/common/error.h"

namespace chunkzero {
namespace comm {
namespace {

// Deletes KEYS[1] if it holds ARGV[1]: undoes a SET NX that may or may not
// have been applied, without deleting a value someone else set.
constexpr char kUndoSet[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then "
    "return redis.call('DEL', KEYS[1]) end return 0";

// The elements the arrays of the reply being read declared so far.
struct ReplyBudget {
  int64_t elements = 0;
};

void* (*hiredis_create_array)(const redisReadTask*, int) = nullptr;

// hiredis allocates an array's element pointers as soon as it reads its
// length: refuse (hiredis then reports "Out of memory") an array that would
// take the reply past kMaxReplyElements.
void* CreateArrayWithinBudget(const redisReadTask* task, int elements) {
  auto* budget = static_cast<ReplyBudget*>(task->privdata);
  budget->elements += elements;
  if (budget->elements > TimedRedisStore::kMaxReplyElements) return nullptr;
  return hiredis_create_array(task, elements);
}

// hiredis's reply functions (they make the redisReply objects that
// freeReplyObject frees), with arrays checked against a ReplyBudget held
// in the reader's privdata. Null if hiredis cannot make a reader.
redisReplyObjectFunctions* BudgetedFunctions() {
  static redisReplyObjectFunctions functions;
  static const bool ready = [] {
    redisReader* reader = redisReaderCreate();
    if (reader == nullptr || reader->fn == nullptr) {
      if (reader != nullptr) redisReaderFree(reader);
      return false;
    }
    functions = *reader->fn;
    redisReaderFree(reader);
    hiredis_create_array = functions.createArray;
    functions.createArray = CreateArrayWithinBudget;
    return true;
  }();
  return ready ? &functions : nullptr;
}

struct ReaderDeleter {
  void operator()(redisReader* reader) const { redisReaderFree(reader); }
};

// The command's name and its keys (at most three), for messages:
// "SET 'job/k'", "DEL 'job/a', 'job/b' and 4 more".
std::string Describe(const std::vector<std::string>& args) {
  const std::string& name = args[0];
  const size_t keys = name == "EXISTS" || name == "DEL"
                          ? args.size() - 1
                          : std::min<size_t>(args.size() - 1, 1);
  std::string out = name;
  for (size_t i = 1; i <= std::min<size_t>(keys, 3); ++i) {
    absl::StrAppend(&out, i == 1 ? " '" : ", '", absl::CHexEscape(args[i]),
                    "'");
  }
  if (keys > 3) absl::StrAppend(&out, " and ", keys - 3, " more");
  return out;
}

std::string DescribeReply(const redisReply& reply) {
  switch (reply.type) {
    case REDIS_REPLY_STRING:
      return absl::StrCat("a string of ", reply.len, " bytes");
    case REDIS_REPLY_ARRAY:
      return absl::StrCat("an array of ", reply.elements, " elements");
    case REDIS_REPLY_INTEGER:
      return absl::StrCat("the integer ", reply.integer);
    case REDIS_REPLY_NIL:
      return "nil";
    case REDIS_REPLY_STATUS:
      return absl::StrCat("the status \"",
                          absl::CHexEscape(std::string(reply.str, reply.len)),
                          "\"");
    default:
      return absl::StrCat("a reply of type ", reply.type);
  }
}

// The command in Redis's protocol; empty if hiredis cannot make it.
std::string Format(const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lengths;
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lengths.push_back(a.size());
  }
  char* formatted = nullptr;
  const int length = redisFormatCommandArgv(
      &formatted, static_cast<int>(argv.size()), argv.data(), lengths.data());
  if (length <= 0 || formatted == nullptr) return "";
  std::string out(formatted, static_cast<size_t>(length));
  redisFreeCommand(formatted);
  return out;
}

// Waits until `fd` is ready for `events` or `deadline` passes; false at the
// deadline. A poll error returns true: the I/O call that follows reports it.
bool Await(int fd, short events, absl::Time deadline) {
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    const int64_t ms = std::min<int64_t>(
        absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))),
        INT_MAX);
    pollfd p{fd, events, 0};
    const int ready = poll(&p, 1, static_cast<int>(ms));
    if (ready > 0) return true;
    if (ready < 0 && errno != EINTR) return true;
  }
}

}  // namespace

absl::Duration TimedRedisStore::KeyLifetime(absl::Duration timeout) {
  return std::clamp(10 * timeout, absl::Hours(1), absl::Hours(24 * 365));
}

absl::StatusOr<std::unique_ptr<TimedRedisStore>> TimedRedisStore::Connect(
    const std::string& host, int port, absl::Duration timeout,
    const std::string& prefix) {
  const std::string where = absl::StrCat(
      "redis://",
      host.find(':') == std::string::npos ? host : absl::StrCat("[", host, "]"),
      ":", port, prefix.empty() ? "" : "/", prefix);
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
    store.reset(new TimedRedisStore(host, port, timeout, where, prefix));
  } catch (const std::exception& e) {
    // The server went away between the probe and this connection.
    return absl::UnavailableError(absl::StrCat(
        "cannot reach the rendezvous store ", where, ": ", e.what()));
  }
  // Every command waits in poll() for its deadline; the socket itself
  // never blocks.
  const int flags = fcntl(store->redis_->fd, F_GETFL);
  if (flags < 0 || fcntl(store->redis_->fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return absl::UnavailableError(absl::StrCat(
        where, ": cannot make the connection non-blocking: ", strerror(errno)));
  }
  return store;
}

std::string TimedRedisStore::Key(const std::string& key) const {
  return prefix_.empty() ? key : absl::StrCat(prefix_, "/", key);
}

absl::StatusOr<TimedRedisStore::Reply> TimedRedisStore::Run(
    const std::vector<std::string>& args) {
  if (!broken_.ok()) {
    return absl::Status(broken_.code(),
                        absl::StrCat("unusable after: ", broken_.message()));
  }
  const absl::Time deadline = absl::Now() + timeout_;
  const int fd = redis_->fd;
  const std::string request = Format(args);
  redisReplyObjectFunctions* functions = BudgetedFunctions();
  if (request.empty() || functions == nullptr) {
    // Nothing was sent: the connection is still in step.
    return absl::ResourceExhaustedError(
        absl::StrCat(Describe(args), ": hiredis is out of memory"));
  }
  const auto timed_out = [&] {
    return absl::DeadlineExceededError(absl::StrCat(
        "timed out: the server did not answer ", Describe(args), " within ",
        absl::FormatDuration(timeout_), " (is it stopped or overloaded?)"));
  };
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent,
                           MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      sent += static_cast<size_t>(n);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!Await(fd, POLLOUT, deadline)) {
        return GiveUp(args, /*sent=*/false, timed_out());
      }
    } else if (errno != EINTR) {
      return GiveUp(args, /*sent=*/false,
                    absl::UnavailableError(absl::StrCat(Describe(args), ": ",
                                                        std::strerror(errno))));
    }
  }
  // A reader of our own for each reply, so that nothing of an earlier one
  // is left in it.
  std::unique_ptr<redisReader, ReaderDeleter> reader(
      redisReaderCreateWithFunctions(functions));
  if (reader == nullptr) {
    return GiveUp(args, /*sent=*/true,
                  absl::ResourceExhaustedError(absl::StrCat(
                      Describe(args), ": hiredis is out of memory")));
  }
  ReplyBudget budget;
  reader->privdata = &budget;
  const auto malformed = [&](absl::string_view why) {
    return absl::UnavailableError(
        absl::StrCat("the server's reply to ", Describe(args),
                     " is malformed or too large: ", why));
  };
  size_t received = 0;
  char buffer[16 << 10];
  while (true) {
    void* object = nullptr;
    if (redisReaderGetReply(reader.get(), &object) != REDIS_OK) {
      return GiveUp(
          args, /*sent=*/true,
          malformed(budget.elements > kMaxReplyElements
                        ? absl::StrCat("its arrays hold ", budget.elements,
                                       " elements (at most ", kMaxReplyElements,
                                       " in a reply)")
                        : std::string(reader->errstr)));
    }
    if (object != nullptr) {
      Reply reply(static_cast<redisReply*>(object));
      if (reader->pos < reader->len) {
        return GiveUp(args, /*sent=*/true, malformed("more than one reply"));
      }
      return reply;
    }
    if (!Await(fd, POLLIN, deadline)) {
      return GiveUp(args, /*sent=*/true, timed_out());
    }
    const ssize_t n = recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n == 0) {
      return GiveUp(args, /*sent=*/true,
                    absl::UnavailableError(absl::StrCat(
                        "the server closed the connection before answering ",
                        Describe(args))));
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      return GiveUp(args, /*sent=*/true,
                    absl::UnavailableError(absl::StrCat(Describe(args), ": ",
                                                        std::strerror(errno))));
    }
    received += static_cast<size_t>(n);
    if (received > kMaxReplyBytes) {
      return GiveUp(args, /*sent=*/true,
                    malformed(absl::StrCat("more than ", kMaxReplyBytes,
                                           " bytes (the most a reply may "
                                           "hold)")));
    }
    if (redisReaderFeed(reader.get(), buffer, static_cast<size_t>(n)) !=
        REDIS_OK) {
      return GiveUp(args, /*sent=*/true, malformed(reader->errstr));
    }
  }
}

absl::Status TimedRedisStore::GiveUp(const std::vector<std::string>& args,
                                     bool sent, absl::Status why) {
  broken_ = why;
  const int fd = redis_->fd;
  if (sent) {
    // The server applies what a connection sent in order, and runs the
    // commands it reads together without another client's in between:
    // queued here, the undoing reaches it right behind the failed command,
    // however long it stays stopped. The rank has failed (the store is of
    // no more use to it), so the keys it set go too.
    std::string undo;
    if (args[0] == "SET" && args.size() >= 3) {
      undo = Format({"EVAL", kUndoSet, "1", args[1], args[2]});
    }
    if (!keys_set_.empty() && args[0] != "DEL") {
      std::vector<std::string> del = {"DEL"};
      del.insert(del.end(), keys_set_.begin(), keys_set_.end());
      undo += Format(del);
    }
    // Best effort, without waiting: a command cut short by a full socket
    // and the shutdown below is never run.
    if (!undo.empty()) {
      const ssize_t ignored =
          send(fd, undo.data(), undo.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      (void)ignored;
    }
  }
  // The server sees the end of the stream after what was queued; the
  // descriptor stays open (and ours) until Gloo's destructor frees the
  // context.
  shutdown(fd, SHUT_RDWR);
  return why;
}

TimedRedisStore::Reply TimedRedisStore::Command(
    const std::vector<std::string>& args) {
  absl::StatusOr<Reply> reply = Run(args);
  if (!reply.ok()) {
    throw gloo::IoException(
        absl::StrCat(where_, ": ", reply.status().message()));
  }
  if ((*reply)->type == REDIS_REPLY_ERROR) {
    throw gloo::IoException(absl::StrCat(
        where_, ": ", Describe(args), ": the server answered: ",
        absl::CHexEscape(std::string((*reply)->str, (*reply)->len))));
  }
  return *std::move(reply);
}

void TimedRedisStore::set(const std::string& key,
                          const std::vector<char>& data) {
  const std::string full = Key(key);
  // A GET of it could not be read back: refused before anything is sent.
  if (data.size() + full.size() > kMaxValueBytes) {
    throw gloo::IoException(
        absl::StrCat(where_, ": a value of ", data.size(), " bytes for key '",
                     absl::CHexEscape(full), "' is over the store's limit of ",
                     kMaxValueBytes, " bytes"));
  }
  const std::string lifetime_ms =
      absl::StrCat(absl::ToInt64Milliseconds(KeyLifetime(timeout_)));
  const Reply reply =
      Command({"SET", full, std::string(data.begin(), data.end()), "NX", "PX",
               lifetime_ms});
  if (reply->type == REDIS_REPLY_STATUS) {
    keys_set_.push_back(full);
    return;
  }
  if (reply->type != REDIS_REPLY_NIL) {
    throw gloo::IoException(absl::StrCat(where_, ": unexpected reply to SET '",
                                         absl::CHexEscape(full),
                                         "': ", DescribeReply(*reply)));
  }
  // Refused: the key was there. Say when it goes away.
  std::string expiry;
  absl::StatusOr<Reply> ttl = Run({"PTTL", full});
  if (ttl.ok() && (*ttl)->type == REDIS_REPLY_INTEGER) {
    const long long ms = (*ttl)->integer;
    if (ms >= 1000) {
      expiry = absl::StrCat("; it expires in ",
                            absl::FormatDuration(absl::Trunc(
                                absl::Milliseconds(ms), absl::Seconds(1))));
    } else if (ms >= 0) {
      expiry = "; it expires within a second";
    } else if (ms == -1) {
      expiry = "; it does not expire";
    }
  }
  throw gloo::IoException(absl::StrCat(
      where_, ": key '", absl::CHexEscape(full), "' already set", expiry));
}

absl::Status TimedRedisStore::DeleteKeysItSet() {
  if (keys_set_.empty()) return absl::OkStatus();
  std::vector<std::string> args = {"DEL"};
  args.insert(args.end(), keys_set_.begin(), keys_set_.end());
  absl::StatusOr<Reply> reply = Run(args);
  absl::Status status = reply.status();
  if (reply.ok() && (*reply)->type == REDIS_REPLY_ERROR) {
    status = absl::UnavailableError(absl::StrCat(
        Describe(args), ": the server answered: ",
        absl::CHexEscape(std::string((*reply)->str, (*reply)->len))));
  }
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat("cannot delete the ", keys_set_.size(),
                                     " rendezvous key(s) this rank set from ",
                                     where_, ": ", status.message()));
  }
  keys_set_.clear();
  return absl::OkStatus();
}

std::vector<char> TimedRedisStore::get(const std::string& key) {
  wait({key});
  const std::string full = Key(key);
  const Reply reply = Command({"GET", full});
  if (reply->type == REDIS_REPLY_NIL) {
    throw gloo::IoException(absl::StrCat(where_, ": key '",
                                         absl::CHexEscape(full),
                                         "' vanished after it was set"));
  }
  if (reply->type != REDIS_REPLY_STRING) {
    throw gloo::IoException(absl::StrCat(where_, ": unexpected reply to GET '",
                                         absl::CHexEscape(full),
                                         "': ", DescribeReply(*reply)));
  }
  return std::vector<char>(reply->str, reply->str + reply->len);
}

bool TimedRedisStore::AllSet(const std::vector<std::string>& keys) {
  std::vector<std::string> args = {"EXISTS"};
  for (const std::string& key : keys) args.push_back(Key(key));
  const Reply reply = Command(args);
  if (reply->type != REDIS_REPLY_INTEGER) {
    throw gloo::IoException(absl::StrCat(where_, ": unexpected reply to ",
                                         Describe(args), ": ",
                                         DescribeReply(*reply)));
  }
  return reply->integer == static_cast<long long>(keys.size());
}

void TimedRedisStore::wait(const std::vector<std::string>& keys) {
  wait(keys, std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout_)));
}

void TimedRedisStore::wait(const std::vector<std::string>& keys,
                           const std::chrono::milliseconds& timeout) {
  PollForKeys(keys, timeout, where_, [&] { return AllSet(keys); });
}

}  // namespace comm
}  // namespace chunkzero
