// RedisServer: a private redis-server for a test, on a free loopback port,
// stopped (and its data gone) when the object is destroyed.
//
//   absl::StatusOr<std::unique_ptr<RedisServer>> redis = RedisServer::Start();
//   if (absl::IsNotFound(redis.status())) GTEST_SKIP() << redis.status();
//   ASSERT_TRUE(redis.ok()) << redis.status();
//   ... redis://127.0.0.1:(*redis)->port()/job ...
//
// The server keeps nothing on disk; KeyCount() tells how many keys it holds.
// Pause() and Resume() stop and continue the process (SIGSTOP, SIGCONT), for
// tests of a server that stops answering without closing its connections.
#ifndef CHUNKZERO_COMM_TESTING_REDIS_SERVER_H_
#define CHUNKZERO_COMM_TESTING_REDIS_SERVER_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace chunkzero {
namespace comm_testing {

class RedisServer {
 public:
  // NotFound if no redis-server is installed (Debian's redis-server
  // package, which tools/packages.txt lists); Unavailable if it does not
  // answer within 10 s.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<RedisServer>> Start();
  // As Start(), on `port`.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<RedisServer>> StartOnPort(
      int port);

  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  // The keys the server holds (DBSIZE), or -1 if it does not answer.
  int64_t KeyCount() const;
  void Pause();
  void Resume();

 private:
  RedisServer(pid_t pid, int port) : pid_(pid), port_(port) {}

  pid_t pid_;  // -1 once reaped.
  const int port_;
};

}  // namespace comm_testing
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_TESTING_REDIS_SERVER_H_
