#include "tests/multihost/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace chunkzero {
namespace multihost {

absl::StatusOr<Child> Child::Start(const std::vector<std::string>& argv,
                                   const std::string& log_path) {
  if (argv.empty()) return absl::InvalidArgumentError("no command to start");
  // Everything the child needs, made before fork(): after it the child only
  // makes async-signal-safe calls.
  std::vector<std::string> args = argv;
  std::vector<char*> raw;
  for (std::string& a : args) raw.push_back(a.data());
  raw.push_back(nullptr);
  // Where the child reports errno if it cannot run argv (close-on-exec, so
  // EOF means exec succeeded).
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot start ", argv[0], ": pipe: ", std::strerror(errno)));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    close(report[0]);
    int error = 0;
    // Dies with this process even if it is SIGKILLed; if it died before
    // the death signal was armed, there is nobody to wait for the child.
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
      error = errno;
    } else if (getppid() != parent) {
      _exit(127);
    } else if (setpgid(0, 0) != 0) {
      error = errno;
    } else {
      const int log = open(log_path.c_str(),
                           O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (log < 0 || dup2(log, STDOUT_FILENO) < 0 ||
          dup2(log, STDERR_FILENO) < 0) {
        error = errno;
      } else {
        execvp(raw[0], raw.data());
        error = errno;
      }
    }
    const ssize_t ignored = write(report[1], &error, sizeof(error));
    (void)ignored;
    _exit(127);
  }
  const int fork_errno = errno;
  close(report[1]);
  if (pid < 0) {
    close(report[0]);
    return absl::UnavailableError(absl::StrCat(
        "cannot start ", argv[0], ": fork: ", std::strerror(fork_errno)));
  }
  // As the child does: whichever runs first makes the group.
  setpgid(pid, pid);
  int error = 0;
  ssize_t n;
  while ((n = read(report[0], &error, sizeof(error))) < 0 && errno == EINTR) {
  }
  close(report[0]);
  if (n == 0) return Child(pid);
  int status = 0;
  waitpid(pid, &status, 0);
  return absl::UnavailableError(
      absl::StrCat("cannot start ", argv[0], ": ", std::strerror(error)));
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
