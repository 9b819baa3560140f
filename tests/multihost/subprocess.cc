#include "tests/multihost/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

extern char** environ;

namespace chunkzero {
namespace multihost {

absl::StatusOr<Child> Child::Start(const std::vector<std::string>& argv,
                                   const std::string& log_path) {
  std::vector<std::string> args = argv;
  std::vector<char*> raw;
  for (std::string& a : args) raw.push_back(a.data());
  raw.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attributes, 0);
  pid_t pid = -1;
  const int error =
      posix_spawnp(&pid, raw[0], &actions, &attributes, raw.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (error != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot start ", argv[0], ": ", std::strerror(error)));
  }
  return Child(pid);
}

Child::Child(Child&& other) noexcept : pid_(std::exchange(other.pid_, -1)) {}

Child::~Child() {
  if (pid_ <= 0) return;
  kill(-pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
}

absl::StatusOr<int> Child::Wait(absl::Duration timeout) {
  if (pid_ <= 0) return absl::FailedPreconditionError("already waited for");
  const absl::Time deadline = absl::Now() + timeout;
  // Wait for it to exit without reaping it: until it is reaped its pid (the
  // group's id) cannot be reused, so killing the group cannot hit another.
  while (true) {
    siginfo_t info{};
    if (waitid(P_PID, pid_, &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid == pid_) {
      break;
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("still running after ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  // Whatever it started in its group goes with it.
  kill(-pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<std::string> RunCommand(const std::vector<std::string>& argv,
                                       absl::Duration timeout) {
  char log[] = "/tmp/cz-multihost-cmd.XXXXXX";
  const int fd = mkstemp(log);
  if (fd < 0) return absl::UnavailableError("mkstemp");
  close(fd);
  absl::StatusOr<Child> child = Child::Start(argv, log);
  if (!child.ok()) {
    unlink(log);
    return child.status();
  }
  absl::StatusOr<int> code = child->Wait(timeout);
  std::string output = ReadFileOrEmpty(log);
  unlink(log);
  const std::string command = absl::StrJoin(argv, " ");
  if (!code.ok()) {
    return absl::Status(code.status().code(),
                        absl::StrCat(command, ": ", code.status().message()));
  }
  if (*code != 0) {
    return absl::UnavailableError(
        absl::StrCat(command, " exited ", *code, ": ", output));
  }
  return output;
}

}  // namespace multihost
}  // namespace chunkzero
