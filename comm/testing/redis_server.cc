#include "comm/testing/redis_server.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/tcp_probe.h"
#include "comm/testing/free_port.h"
#include "hiredis/hiredis.h"

extern char** environ;

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
  const std::string port_text = absl::StrCat(port);
  std::vector<std::string> args = {
      binary,   "--port",    port_text,      "--bind", "127.0.0.1",
      "--save", "",          "--appendonly", "no",     "--daemonize",
      "no",     "--logfile", "/dev/null"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null",
                                   O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null",
                                   O_WRONLY, 0);
  pid_t pid = -1;
  const int error = posix_spawn(&pid, binary.c_str(), &actions, nullptr,
                                argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot start ", binary, ": ", strerror(error)));
  }
  std::unique_ptr<RedisServer> server(new RedisServer(pid, port));
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!AcceptsTcpOnLoopback(port)) {
    if (waitpid(pid, nullptr, WNOHANG) == pid) {
      server->pid_ = -1;  // Reaped: the destructor must not signal it.
      return absl::UnavailableError(
          absl::StrCat(binary, " exited before answering on port ", port));
    }
    if (absl::Now() > deadline) {
      return absl::UnavailableError(
          absl::StrCat(binary, " did not answer on port ", port));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return server;
}

RedisServer::~RedisServer() {
  if (pid_ < 0) return;
  kill(pid_, SIGKILL);
  kill(pid_, SIGCONT);
  waitpid(pid_, nullptr, 0);
}

int64_t RedisServer::KeyCount() const {
  redisContext* c = redisConnect("127.0.0.1", port_);
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
  redisContext* c = redisConnect("127.0.0.1", port_);
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

void RedisServer::Pause() { kill(pid_, SIGSTOP); }
void RedisServer::Resume() { kill(pid_, SIGCONT); }

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
