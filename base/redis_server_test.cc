#include "base/redis_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/tcp_probe.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

using ::testing::HasSubstr;

bool HaveRedisServer() { return access("/usr/bin/redis-server", X_OK) == 0; }

// A socket listening on a loopback port the system picks (*port); -1 if
// none.
int Listen(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof(address);
  if (bind(fd, reinterpret_cast<const sockaddr*>(&address), size) != 0 ||
      listen(fd, 4) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(address.sin_port);
  return fd;
}

int FreePort() {
  int port = -1;
  const int fd = Listen(&port);
  if (fd >= 0) close(fd);
  return port;
}

class RedisServerTest : public testing::Test {
 protected:
  void SetUp() override {
    if (!HaveRedisServer()) {
      GTEST_SKIP() << "no /usr/bin/redis-server (Debian package "
                      "redis-server; tools/setup.sh installs it)";
    }
    options_.port = FreePort();
    ASSERT_GT(options_.port, 0);
  }

  RedisServerOptions options_;
};

TEST_F(RedisServerTest, AnswersUntilStopped) {
  absl::StatusOr<RedisServerProcess> redis =
      RedisServerProcess::Start(options_);
  ASSERT_TRUE(redis.ok()) << redis.status();
  EXPECT_EQ(redis->port(), options_.port);
  EXPECT_TRUE(redis->running());
  EXPECT_GT(redis->pid(), 0);
  EXPECT_TRUE(AcceptsTcpOnLoopback(options_.port));
  redis->Stop();
  EXPECT_FALSE(redis->running());
  EXPECT_FALSE(AcceptsTcpOnLoopback(options_.port));
  redis->Stop();  // Once is enough.
}

TEST_F(RedisServerTest, APausedServerStopsWithinItsGrace) {
  options_.stop_grace = absl::Seconds(30);
  absl::StatusOr<RedisServerProcess> redis =
      RedisServerProcess::Start(options_);
  ASSERT_TRUE(redis.ok()) << redis.status();
  ASSERT_TRUE(redis->Pause().ok());
  ASSERT_TRUE(redis->Resume().ok());
  ASSERT_TRUE(redis->Pause().ok());
  // SIGTERM, and the SIGCONT that lets it act on it.
  const absl::Time start = absl::Now();
  redis->Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_FALSE(AcceptsTcpOnLoopback(options_.port));
}

TEST_F(RedisServerTest, ATakenPortIsNamed) {
  int port = -1;
  const int taken = Listen(&port);
  ASSERT_GE(taken, 0);
  options_.port = port;
  EXPECT_EQ(RedisServerProcess::Start(options_).status(),
            absl::UnavailableError(
                absl::StrCat("something already answers on port ", port)));
  close(taken);
}

TEST_F(RedisServerTest, AMissingBinaryIsNamed) {
  options_.binary = "/nonexistent/redis-server";
  EXPECT_EQ(RedisServerProcess::Start(options_).status(),
            absl::UnavailableError(
                "cannot execute /nonexistent/redis-server: No such file or "
                "directory (Debian's redis-server package; tools/setup.sh "
                "installs it)"));
}

TEST_F(RedisServerTest, AServerThatExitsIsNamedWithTheHint) {
  // An address of another host (TEST-NET-1): it cannot bind it.
  options_.bind = {"192.0.2.77", "127.0.0.1"};
  options_.exit_hint = ": is 192.0.2.77 an address of this host?";
  absl::Status status = RedisServerProcess::Start(options_).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat(
                                    "redis-server on port ", options_.port,
                                    " exited (exit code 1) before answering: "
                                    "is 192.0.2.77 an address of this host?")));
}

TEST(RedisServerOptions, BadOnesAreRefused) {
  RedisServerOptions options;
  options.port = 0;
  EXPECT_EQ(
      RedisServerProcess::Start(options).status(),
      absl::InvalidArgumentError("redis-server port 0 is not in [1, 65535]"));
  options.port = 6400;
  options.bind = {};
  EXPECT_EQ(RedisServerProcess::Start(options).status(),
            absl::InvalidArgumentError("redis-server needs a bind address"));
}

}  // namespace
}  // namespace chunkzero
