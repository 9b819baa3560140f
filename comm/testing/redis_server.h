// RedisServer: a private redis-server for a test, on a free loopback port,
// stopped (and its data gone) when the object is destroyed; started by
// base/redis_server.h, as the launcher's --store=redis is.
//
//   absl::StatusOr<std::unique_ptr<RedisServer>> redis = RedisServer::Start();
//   if (absl::IsNotFound(redis.status())) GTEST_SKIP() << redis.status();
//   ASSERT_TRUE(redis.ok()) << redis.status();
//   ... redis://127.0.0.1:(*redis)->port()/job ...
//
// The server keeps nothing on disk; KeyCount() tells how many keys it holds.
// Pause() and Resume() stop and continue the process (SIGSTOP, SIGCONT), for
// tests of a server that stops answering without closing its connections.
//
// FakeRedisServer: a thread on a free loopback port that answers requests
// with bytes given in advance, for tests of a client facing a server that
// sends what no Redis server would (or something else on a Redis port).
//
//   absl::StatusOr<std::unique_ptr<FakeRedisServer>> fake =
//       FakeRedisServer::Start({{"*1000000000\r\n"}});
//   ... TimedRedisStore::Connect("127.0.0.1", (*fake)->port(), ...) ...
#ifndef CHUNKZERO_COMM_TESTING_REDIS_SERVER_H_
#define CHUNKZERO_COMM_TESTING_REDIS_SERVER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "base/redis_server.h"

namespace chunkzero {
namespace comm_testing {

class RedisServer {
 public:
  // NotFound if no redis-server is installed (Debian's redis-server
  // package, which tools/packages.txt lists); Unavailable if it does not
  // answer within 10 s (RedisServerProcess::Start's errors). The server is
  // not tied to the starting thread (no PR_SET_PDEATHSIG): a test may start
  // it from a thread that ends before it.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<RedisServer>> Start();
  // As Start(), on `port`.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<RedisServer>> StartOnPort(
      int port);

  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return process_.port(); }
  // The keys the server holds (DBSIZE), or -1 if it does not answer.
  int64_t KeyCount() const;
  // PTTL of `key`: the milliseconds before it expires, -1 if it never
  // does, -2 if there is no such key, -3 if the server does not answer.
  int64_t MillisecondsToLive(const std::string& key) const;
  void Pause();
  void Resume();

 private:
  explicit RedisServer(RedisServerProcess process)
      : process_(std::move(process)) {}

  RedisServerProcess process_;
};

class FakeRedisServer {
 public:
  // What the server sends each time it has read bytes from a client (one
  // read of up to 64 KiB: a short request is one read).
  struct Answer {
    std::string bytes;
    // Then this many 'x' bytes (a long string's body, made as it is sent).
    size_t filler_bytes = 0;
    // Then closes the connection.
    bool close = false;
  };

  // The i-th request (counted over all connections) gets answers[i], the
  // last one again past the end. Unavailable if it cannot listen, or for
  // no answers. Connections are served one at a time, in the order they
  // come.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<FakeRedisServer>> Start(
      std::vector<Answer> answers);

  // Stops the thread (within about 50 ms) and closes every connection.
  ~FakeRedisServer();
  FakeRedisServer(const FakeRedisServer&) = delete;
  FakeRedisServer& operator=(const FakeRedisServer&) = delete;

  int port() const { return port_; }
  // The requests (reads) answered so far.
  int64_t requests() const { return requests_.load(); }

 private:
  FakeRedisServer(int listen_fd, int port, std::vector<Answer> answers)
      : listen_fd_(listen_fd), port_(port), answers_(std::move(answers)) {}
  void Serve();
  void ServeConnection(int fd);
  // Sends all of `data` unless the server stops first; false if it stopped
  // or the client went away.
  bool SendAll(int fd, const char* data, size_t size);

  const int listen_fd_;
  const int port_;
  const std::vector<Answer> answers_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> requests_{0};
  std::thread thread_;
};

}  // namespace comm_testing
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_TESTING_REDIS_SERVER_H_
