#include "tools/train/testing/run_train.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "gtest/gtest.h"

extern char** environ;

namespace chunkzero {
namespace train_testing {
namespace {

struct Started {
  pid_t pid = -1;
  // Standard error through a pipe (a file would be subject to the child's
  // file size limit), drained by a thread so that no child blocks on it.
  std::shared_ptr<std::string> err = std::make_shared<std::string>();
  std::thread reader;
  std::chrono::steady_clock::time_point deadline;
};

Started Start(const TrainRun& run) {
  Started started;
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "cannot make a pipe";
    return started;
  }
  std::vector<std::string> argv = {TrainBinary()};
  argv.insert(argv.end(), run.args.begin(), run.args.end());
  std::vector<char*> raw;
  for (std::string& a : argv) raw.push_back(a.data());
  raw.push_back(nullptr);
  std::vector<std::string> environment = run.env;
  for (char** e = environ; *e != nullptr; ++e) environment.emplace_back(*e);
  std::vector<char*> envp;
  for (std::string& e : environment) envp.push_back(e.data());
  envp.push_back(nullptr);
  started.deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(run.deadline_s);
  // fork and exec rather than posix_spawn: the child sets its own limits
  // and working directory first. Only async-signal-safe calls after fork.
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(err_pipe[0]);
    ::close(err_pipe[1]);
    ADD_FAILURE() << "cannot fork";
    return started;
  }
  if (pid == 0) {
    const int out = ::open("/dev/null", O_WRONLY);
    if (out < 0 || ::dup2(out, 1) < 0 || ::dup2(err_pipe[1], 2) < 0) {
      ::_exit(126);
    }
    if (!run.cwd.empty() && ::chdir(run.cwd.c_str()) != 0) ::_exit(126);
    if (run.file_size_limit > 0) {
      struct rlimit limit;
      if (::getrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(126);
      limit.rlim_cur = static_cast<rlim_t>(run.file_size_limit);
      if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(126);
    }
    ::execve(raw[0], raw.data(), envp.data());
    ::_exit(127);
  }
  ::close(err_pipe[1]);
  started.pid = pid;
  started.reader = std::thread([fd = err_pipe[0], err = started.err] {
    char buffer[4096];
    for (ssize_t n; (n = ::read(fd, buffer, sizeof(buffer))) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      err->append(buffer, static_cast<size_t>(n));
    }
    ::close(fd);
  });
  return started;
}

TrainOutcome Wait(Started& started) {
  TrainOutcome out;
  if (started.pid < 0) return out;
  int status = 0;
  while (::waitpid(started.pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > started.deadline) {
      ::kill(started.pid, SIGKILL);
      ::waitpid(started.pid, &status, 0);
      started.reader.join();
      ADD_FAILURE() << "the train binary hung: killed at its deadline";
      return out;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  out.exit_code =
      WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  // A grandchild could hold the pipe open: the reader ends with the
  // last writer.
  started.reader.join();
  out.err = *started.err;
  return out;
}

}  // namespace

std::string TrainBinary() {
  return absl::StrCat(std::getenv("TEST_SRCDIR"),
                      "/chunkzero/tools/train/train");
}

TrainOutcome RunTrainBinary(const TrainRun& run) {
  Started started = Start(run);
  return Wait(started);
}

std::vector<TrainOutcome> RunTrainBinaries(const std::vector<TrainRun>& runs) {
  std::vector<Started> started;
  for (size_t i = 0; i < runs.size(); ++i) {
    started.push_back(Start(runs[i]));
  }
  std::vector<TrainOutcome> out;
  for (Started& s : started) out.push_back(Wait(s));
  return out;
}

}  // namespace train_testing
}  // namespace chunkzero
