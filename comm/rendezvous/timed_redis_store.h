// TimedRedisStore: Gloo's RedisStore (a rendezvous store on a Redis server,
// for ranks on several hosts) with a deadline on every command and a bound
// on every reply.
//
//   absl::StatusOr<std::unique_ptr<TimedRedisStore>> store =
//       TimedRedisStore::Connect(host, 6379, absl::Seconds(300), "job42");
//   GlooProcessGroup::Create(rank, size, **store, options);
//
// Gloo's own RedisStore waits as long as the server keeps the connection
// open: a server that stops answering (stopped, or behind a link that went
// down without a reset) would hold every rank forever. Here each command,
// sent and answered, fails after `timeout` (gloo::IoException, as for any
// other store failure, which the process groups turn into a status):
// "redis://HOST:PORT/PREFIX: timed out: the server did not answer SET 'k'
// within 5m (...)". wait() honours its timeout to the millisecond (Gloo's
// rounds down to whole seconds, so a 1 ms probe could take a second).
//
// A failed command leaves the connection in an unknown state: the store
// gives it up, and every later command fails at once ("unusable after:
// ..."). A write the server did not answer may still be applied when it
// resumes; behind it, on the same connection (so the server applies them
// in this order), the store queues the undoing of that write (a DEL of
// the key if it holds the value written) and the deletion of every key it
// set, so that a job whose server stalled leaves no key to refuse the next
// job under its prefix.
//
// A reply larger than kMaxReplyBytes, whose arrays hold more than
// kMaxReplyElements elements, or that is not Redis's protocol fails the
// command at once ("... the server's reply to SET 'k' is malformed or too
// large: ..."), holding no more memory than those limits allow (hiredis
// would reserve 8 GB for a reply of "*1000000000", and free it one pointer
// at a time).
//
// Keys are set only if absent (SET NX), so a key an earlier job left under
// the same prefix is refused: "key 'job42/k' already set; it expires in
// 59m58s". Each key expires KeyLifetime(timeout) after it was set, so keys
// a killed job left do not refuse its prefix forever. DeleteKeysItSet()
// removes what this store set, once every rank has read it, so that a job
// that got going leaves nothing behind and its prefix serves the next job.
//
// Not thread-safe: one thread uses a store at a time (a Redis connection is
// one socket). Gloo's non-virtual RedisStore::check() must not be called.
#ifndef CHUNKZERO_COMM_RENDEZVOUS_TIMED_REDIS_STORE_H_
#define CHUNKZERO_COMM_RENDEZVOUS_TIMED_REDIS_STORE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gloo/rendezvous/redis_store.h"

namespace chunkzero {
namespace comm {

class TimedRedisStore final : public gloo::rendezvous::RedisStore {
 public:
  // The most bytes one reply may take on the wire.
  static constexpr size_t kMaxReplyBytes = size_t{64} << 20;
  // The most bytes of a key and its value together: a GET of it fits a
  // reply.
  static constexpr size_t kMaxValueBytes = kMaxReplyBytes - (size_t{1} << 16);
  // The most elements the arrays of one reply may hold together.
  static constexpr int64_t kMaxReplyElements = int64_t{1} << 20;

  // How long a key lives after it was set: ten times `timeout`, at least
  // an hour (at most a year). A rank reads its peers' keys within twice
  // the rendezvous timeout of their setting them.
  static absl::Duration KeyLifetime(absl::Duration timeout);

  // Connects to the server at host:port, trying again until `timeout` (> 0)
  // has passed, since the server may start after this rank. Unavailable,
  // naming the address, if it cannot be reached by then; every later
  // command fails after `timeout` without an answer. A non-empty `prefix`
  // is put before every key, as "PREFIX/key" (Gloo's PrefixStore's form),
  // and errors name the store redis://HOST:PORT/PREFIX.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<TimedRedisStore>> Connect(
      const std::string& host, int port, absl::Duration timeout,
      const std::string& prefix = "");

  // Sets the key if it is absent (SET NX, expiring after KeyLifetime()):
  // a key already set throws "...: key 'PREFIX/k' already set; it expires
  // in ...". A key and value over kMaxValueBytes are refused before they
  // are sent.
  void set(const std::string& key, const std::vector<char>& data) override;
  // Waits for the key, then GETs it.
  std::vector<char> get(const std::string& key) override;
  // Waits at most the timeout given to Connect() (get() waits this way).
  void wait(const std::vector<std::string>& keys) override;
  // Polls every 10 ms until every key is set; gloo::IoException "Wait
  // timeout for key(s) ..." once `timeout` has passed.
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  // Deletes (DEL) every key set through this store and not yet deleted.
  // Call it only when every rank has read them (after a barrier of the
  // groups made through the store). Errors say "cannot delete the N
  // rendezvous key(s) this rank set from redis://HOST:PORT/PREFIX: ...":
  // DeadlineExceeded if the server does not answer within the timeout,
  // Unavailable for another failure.
  [[nodiscard]] absl::Status DeleteKeysItSet();

 private:
  struct ReplyDeleter {
    void operator()(redisReply* reply) const { freeReplyObject(reply); }
  };
  using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

  TimedRedisStore(const std::string& host, int port, absl::Duration timeout,
                  std::string where, std::string prefix)
      : gloo::rendezvous::RedisStore(host, port),
        timeout_(timeout),
        where_(std::move(where)),
        prefix_(std::move(prefix)) {}

  // The key as the server holds it.
  std::string Key(const std::string& key) const;
  // Sends a command and reads its reply, within the timeout. An error
  // reply is a reply. DeadlineExceeded ("timed out: ..."), Unavailable or
  // FailedPrecondition (a connection given up), without where_; after any
  // error the connection is given up (GiveUp).
  absl::StatusOr<Reply> Run(const std::vector<std::string>& args);
  // Run(), throwing gloo::IoException "where_: ..." on an error or an
  // error reply.
  Reply Command(const std::vector<std::string>& args);
  // Gives up the connection after `args` failed with `why`: queues (if
  // `sent`, the whole command having gone out) the undoing of a write and
  // the deletion of keys_set_ behind it, then shuts the socket down.
  absl::Status GiveUp(const std::vector<std::string>& args, bool sent,
                      absl::Status why);
  // Whether every key is set (EXISTS).
  bool AllSet(const std::vector<std::string>& keys);

  const absl::Duration timeout_;
  const std::string where_;   // redis://HOST:PORT[/PREFIX], for errors.
  const std::string prefix_;  // Empty: keys are used as they are.
  // Keys set() stored (as the server holds them), in order;
  // DeleteKeysItSet() empties it.
  std::vector<std::string> keys_set_;
  // Why the connection was given up; OK while it is usable.
  absl::Status broken_;
};

}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_RENDEZVOUS_TIMED_REDIS_STORE_H_
