#include "comm/testing/redis_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/redis_server.h"
#include "comm/testing/free_port.h"
#include "hiredis/hiredis.h"

namespace chunkzero {
namespace comm_testing {
namespace {

std::string FindRedisServer() {
  const char* path = getenv("PATH");
  std::vector<std::string> dirs =
      absl::StrSplit(path != nullptr ? path : "", ':', absl::SkipEmpty());
  dirs.push_back("/usr/bin");
  dirs.push_back("/usr/sbin");
  for (const std::string& dir : dirs) {
    const std::string candidate = absl::StrCat(dir, "/redis-server");
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

}  // namespace

absl::StatusOr<std::unique_ptr<RedisServer>> RedisServer::Start() {
  const int port = FreeLoopbackPort();
  if (port < 0) return absl::UnavailableError("no free loopback port");
  return StartOnPort(port);
}

absl::StatusOr<std::unique_ptr<RedisServer>> RedisServer::StartOnPort(
    int port) {
  const std::string binary = FindRedisServer();
  if (binary.empty()) {
    return absl::NotFoundError(
        "no redis-server on PATH (Debian package redis-server; "
        "tools/setup.sh installs it)");
  }
  RedisServerOptions options;
  options.binary = binary;
  options.port = port;
  options.bind = {"127.0.0.1"};
  // In the test's process group, as any helper it runs; killed at once.
  options.new_process_group = false;
  absl::StatusOr<RedisServerProcess> process =
      RedisServerProcess::Start(options);
  if (!process.ok()) return process.status();
  return std::unique_ptr<RedisServer>(new RedisServer(*std::move(process)));
}

RedisServer::~RedisServer() = default;

int64_t RedisServer::KeyCount() const {
  redisContext* c = redisConnect("127.0.0.1", port());
  if (c == nullptr || c->err != 0) {
    if (c != nullptr) redisFree(c);
    return -1;
  }
  auto* reply = static_cast<redisReply*>(redisCommand(c, "DBSIZE"));
  const int64_t n = reply != nullptr && reply->type == REDIS_REPLY_INTEGER
                        ? static_cast<int64_t>(reply->integer)
                        : -1;
  if (reply != nullptr) freeReplyObject(reply);
  redisFree(c);
  return n;
}

int64_t RedisServer::MillisecondsToLive(const std::string& key) const {
  redisContext* c = redisConnect("127.0.0.1", port());
  if (c == nullptr || c->err != 0) {
    if (c != nullptr) redisFree(c);
    return -3;
  }
  auto* reply = static_cast<redisReply*>(
      redisCommand(c, "PTTL %b", key.data(), key.size()));
  const int64_t ms = reply != nullptr && reply->type == REDIS_REPLY_INTEGER
                         ? static_cast<int64_t>(reply->integer)
                         : -3;
  if (reply != nullptr) freeReplyObject(reply);
  redisFree(c);
  return ms;
}

void RedisServer::Pause() { process_.Pause().IgnoreError(); }
void RedisServer::Resume() { process_.Resume().IgnoreError(); }

absl::StatusOr<std::unique_ptr<FakeRedisServer>> FakeRedisServer::Start(
    std::vector<Answer> answers) {
  if (answers.empty()) {
    return absl::InvalidArgumentError("fake redis server: no answers");
  }
  int port = -1;
  const int fd = ListeningSocket(&port, /*backlog=*/16);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("fake redis server: cannot listen: ", strerror(errno)));
  }
  std::unique_ptr<FakeRedisServer> server(
      new FakeRedisServer(fd, port, std::move(answers)));
  server->thread_ = std::thread([s = server.get()] { s->Serve(); });
  return server;
}

FakeRedisServer::~FakeRedisServer() {
  stop_ = true;
  thread_.join();
  close(listen_fd_);
}

void FakeRedisServer::Serve() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    ServeConnection(fd);
    close(fd);
  }
}

void FakeRedisServer::ServeConnection(int fd) {
  char buffer[64 << 10];
  while (!stop_) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n == 0) return;  // The client closed it.
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return;
    }
    const int64_t request = requests_++;
    const Answer& answer = answers_[std::min<size_t>(
        static_cast<size_t>(request), answers_.size() - 1)];
    if (!SendAll(fd, answer.bytes.data(), answer.bytes.size())) return;
    static const std::string kFiller(64 << 10, 'x');
    for (size_t left = answer.filler_bytes; left > 0;) {
      const size_t chunk = std::min(left, kFiller.size());
      if (!SendAll(fd, kFiller.data(), chunk)) return;
      left -= chunk;
    }
    if (answer.close) return;
  }
}

bool FakeRedisServer::SendAll(int fd, const char* data, size_t size) {
  for (size_t sent = 0; sent < size;) {
    if (stop_) return false;
    const ssize_t n =
        send(fd, data + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, 50);
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace comm_testing
}  // namespace chunkzero
