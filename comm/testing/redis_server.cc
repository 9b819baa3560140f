#include "comm/testing/redis_server.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

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

void RedisServer::Pause() { kill(pid_, SIGSTOP); }
void RedisServer::Resume() { kill(pid_, SIGCONT); }

}  // namespace comm_testing
}  // namespace chunkzero
