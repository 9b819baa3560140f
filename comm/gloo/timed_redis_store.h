// TimedRedisStore: Gloo's RedisStore (a rendezvous store on a Redis server,
// for ranks on several hosts) with a deadline on every command.
//
//   absl::StatusOr<std::unique_ptr<TimedRedisStore>> store =
//       TimedRedisStore::Connect("10.0.0.1", 6379, absl::Seconds(300));
//   gloo::rendezvous::PrefixStore job("job42", **store);
//   GlooProcessGroup::Create(rank, size, job, options);
//
// Gloo's own RedisStore waits as long as the server keeps the connection
// open: a server that stops answering (stopped, or behind a link that went
// down without a reset) would hold every rank forever. Here each command's
// socket read and write fails after `timeout` (gloo::IoException, as for
// any other store failure, which the process groups turn into a status), and
// wait() honours its timeout to the millisecond (Gloo's rounds down to whole
// seconds, so a 1 ms probe could take a second).
//
// Keys are set with SETNX, so a key an earlier job left under the same
// prefix is refused ("already set"). DeleteKeysItSet() removes what this
// store set, once every rank has read it, so that a job that got going
// leaves nothing behind and its prefix serves the next job; a job killed
// during its rendezvous leaves its keys, and the next job under that
// prefix is refused instead of meeting them.
//
// Not thread-safe: one thread uses a store at a time (a Redis connection is
// one socket).
#ifndef CHUNKZERO_COMM_GLOO_TIMED_REDIS_STORE_H_
#define CHUNKZERO_COMM_GLOO_TIMED_REDIS_STORE_H_

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gloo/rendezvous/redis_store.h"

namespace chunkzero {
namespace comm {

class TimedRedisStore final : public gloo::rendezvous::RedisStore {
 public:
  // Connects to the server at host:port, trying again until `timeout` (> 0)
  // has passed, since the server may start after this rank. Unavailable,
  // naming the address, if it cannot be reached by then; every later
  // command fails after `timeout` without an answer.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<TimedRedisStore>> Connect(
      const std::string& host, int port, absl::Duration timeout);

  // SETNX, as Gloo's: a key already set throws "Key '...' already set".
  // Gloo's own set(), get() and check() leak the reply when they throw.
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
  // groups made through the store). Unavailable, naming the server and the
  // number of keys, if the server does not answer within the timeout.
  [[nodiscard]] absl::Status DeleteKeysItSet();

 private:
  TimedRedisStore(const std::string& host, int port, absl::Duration timeout,
                  std::string where)
      : gloo::rendezvous::RedisStore(host, port),
        timeout_(timeout),
        where_(std::move(where)) {}

  // Runs a command; throws gloo::IoException on a failure or an error
  // reply (freeing it first).
  struct ReplyDeleter {
    void operator()(redisReply* reply) const { freeReplyObject(reply); }
  };
  using Reply = std::unique_ptr<redisReply, ReplyDeleter>;
  Reply Command(const std::vector<std::string>& args);
  // Whether every key is set (EXISTS).
  bool AllSet(const std::vector<std::string>& keys);

  const absl::Duration timeout_;
  const std::string where_;  // redis://HOST:PORT, for errors.
  // Keys set() stored, in order; DeleteKeysItSet() empties it.
  std::vector<std::string> keys_set_;
};

}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_GLOO_TIMED_REDIS_STORE_H_
