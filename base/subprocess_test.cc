#include "base/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

using ::testing::HasSubstr;

SpawnOptions Shell(const std::string& script) {
  SpawnOptions options;
  options.argv = {"/bin/sh", "-c", script};
  return options;
}

std::string TempPath(absl::string_view name) {
  return absl::StrCat(testing::TempDir(), "/subprocess_test_", getpid(), "_",
                      name);
}

std::string ReadAll(int fd) {
  std::string out;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) != 0) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    out.append(buffer, static_cast<size_t>(n));
  }
  return out;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
}

// What the child writes to stdout, after it exited 0.
std::string Output(SpawnOptions options) {
  options.stdout_to = Stdio::Pipe();
  absl::StatusOr<Subprocess> child = Subprocess::Spawn(options);
  EXPECT_TRUE(child.ok()) << child.status();
  if (!child.ok()) return "";
  std::string out = ReadAll(child->pipe_fd(STDOUT_FILENO));
  absl::StatusOr<ExitStatus> end = child->Wait(absl::Seconds(30));
  EXPECT_TRUE(end.ok()) << end.status();
  if (end.ok()) {
    EXPECT_TRUE(end->success()) << end->ToString();
  }
  return out;
}

// Whether `pid` has gone (or is a zombie nobody has reaped yet), within 10 s.
bool Dies(pid_t pid) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    if (kill(pid, 0) != 0) return true;
    // Read with read(2): a process reaped between the open and the read
    // fails the read with ESRCH (which std::ifstream throws as an
    // exception); gone is dead.
    const int fd = open(absl::StrCat("/proc/", pid, "/stat").c_str(), O_RDONLY);
    if (fd < 0) return true;
    char buffer[512];
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    close(fd);
    if (n < 0) return true;
    const std::string text(buffer, static_cast<size_t>(n));
    const size_t paren = text.rfind(')');
    if (paren != std::string::npos && paren + 2 < text.size() &&
        text[paren + 2] == 'Z') {
      return true;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

TEST(ExitStatus, DecodesCodesAndSignals) {
  EXPECT_EQ(ExitStatus{W_EXITCODE(0, 0)}.ShellCode(), 0);
  EXPECT_TRUE(ExitStatus{W_EXITCODE(0, 0)}.success());
  EXPECT_EQ(ExitStatus{W_EXITCODE(3, 0)}.ShellCode(), 3);
  EXPECT_FALSE(ExitStatus{W_EXITCODE(3, 0)}.success());
  EXPECT_EQ(ExitStatus{W_EXITCODE(3, 0)}.ToString(), "exit code 3");
  const ExitStatus killed{W_EXITCODE(0, SIGKILL)};
  EXPECT_TRUE(killed.killed());
  EXPECT_FALSE(killed.exited());
  EXPECT_EQ(killed.signal(), SIGKILL);
  EXPECT_EQ(killed.ShellCode(), 137);
  EXPECT_EQ(ExitStatus{W_EXITCODE(0, SIGUSR1)}.ToString(),
            "killed by signal SIGUSR1");
  EXPECT_EQ(SignalName(SIGTERM), "SIGTERM");
  EXPECT_EQ(SignalName(0), "signal 0");
  EXPECT_EQ(SignalName(1000), "signal 1000");
}

TEST(Subprocess, ReportsTheExitCode) {
  for (const int code : {0, 1, 3, 255}) {
    absl::StatusOr<ExitStatus> end =
        RunSubprocess(Shell(absl::StrCat("exit ", code)), absl::Seconds(30));
    ASSERT_TRUE(end.ok()) << end.status();
    EXPECT_TRUE(end->exited());
    EXPECT_EQ(end->exit_code(), code);
  }
}

TEST(Subprocess, ReportsTheSignalThatKilledIt) {
  absl::StatusOr<ExitStatus> end =
      RunSubprocess(Shell("kill -USR1 $$"), absl::Seconds(30));
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_TRUE(end->killed());
  EXPECT_EQ(end->signal(), SIGUSR1);
  EXPECT_EQ(end->ShellCode(), 128 + SIGUSR1);
}

TEST(Subprocess, SignalReachesTheChild) {
  SpawnOptions options;
  options.argv = {"sleep", "100"};
  absl::StatusOr<Subprocess> child = Subprocess::Spawn(options);
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_GT(child->pid(), 0);
  EXPECT_TRUE(child->running());
  EXPECT_EQ(child->name(), "sleep");
  ASSERT_TRUE(child->Signal(SIGTERM).ok());
  absl::StatusOr<ExitStatus> end = child->Wait(absl::Seconds(30));
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->ToString(), "killed by signal SIGTERM");
  EXPECT_FALSE(child->running());
  // Reaped: its pid may be another process's now.
  EXPECT_EQ(child->Signal(SIGTERM).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(child->Wait(absl::Seconds(1)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Not the leader of a group.
  options.argv = {"sleep", "100"};
  child = Subprocess::Spawn(options);
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(child->SignalGroup(SIGTERM).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(Subprocess, WaitPastItsDeadlineLeavesTheChildRunning) {
  SpawnOptions options;
  options.argv = {"sleep", "100"};
  options.name = "the sleeper";
  absl::StatusOr<Subprocess> child = Subprocess::Spawn(options);
  ASSERT_TRUE(child.ok()) << child.status();
  const absl::Time start = absl::Now();
  absl::StatusOr<ExitStatus> end = child->Wait(absl::Milliseconds(100));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
  EXPECT_EQ(end.status(), absl::DeadlineExceededError(
                              "the sleeper still running after 100ms"));
  EXPECT_TRUE(child->running());
  absl::StatusOr<bool> exited = child->HasExited();
  ASSERT_TRUE(exited.ok()) << exited.status();
  EXPECT_FALSE(*exited);
  end = child->Kill();
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->signal(), SIGKILL);
}

TEST(Subprocess, RunKillsAChildPastItsDeadline) {
  const std::string pid_file = TempPath("run_pid");
  const absl::Time start = absl::Now();
  absl::StatusOr<ExitStatus> end = RunSubprocess(
      Shell(absl::StrCat("echo $$ > ", pid_file, "; exec sleep 100")),
      absl::Milliseconds(300));
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  EXPECT_EQ(end.status(), absl::DeadlineExceededError(
                              "/bin/sh still running after 300ms; killed"));
  const pid_t pid = std::atoi(ReadFile(pid_file).c_str());
  ASSERT_GT(pid, 0);
  EXPECT_NE(kill(pid, 0), 0);  // Killed and reaped.
}

TEST(Subprocess, AMissingProgramIsNamedWithTheErrno) {
  SpawnOptions options;
  options.argv = {"/nonexistent/program", "--flag"};
  EXPECT_EQ(Subprocess::Spawn(options).status(),
            absl::NotFoundError("cannot execute /nonexistent/program: No such "
                                "file or directory"));
  options.name = "rank 3";
  EXPECT_EQ(Subprocess::Spawn(options).status(),
            absl::NotFoundError("cannot execute /nonexistent/program for rank "
                                "3: No such file or directory"));
  // Looked up in $PATH.
  options.argv = {"chunkzero-no-such-program"};
  options.name = "";
  EXPECT_EQ(Subprocess::Spawn(options).status(),
            absl::NotFoundError("cannot execute chunkzero-no-such-program: No "
                                "such file or directory"));
  // Not executable.
  const std::string file = TempPath("not_executable");
  std::ofstream(file) << "data\n";
  options.argv = {file};
  absl::Status status = Subprocess::Spawn(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("cannot execute ", file,
                                                       ": Permission denied")));
}

TEST(Subprocess, RefusesOptionsThatCannotRun) {
  SpawnOptions options;
  EXPECT_EQ(Subprocess::Spawn(options).status(),
            absl::InvalidArgumentError("no program to run"));
  options.argv = {""};
  EXPECT_EQ(Subprocess::Spawn(options).status(),
            absl::InvalidArgumentError("no program to run"));
  options.argv = {"echo", std::string("a\0b", 3)};
  absl::Status status = Subprocess::Spawn(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("argument 1 of echo holds a NUL byte"));
  options.argv = {"echo"};
  options.env = {"NOEQUALS"};
  EXPECT_EQ(Subprocess::Spawn(options).status(),
            absl::InvalidArgumentError(
                "environment entry \"NOEQUALS\" for echo is not NAME=VALUE"));
  options.env = {"=x"};
  EXPECT_EQ(Subprocess::Spawn(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.env = {};
  options.stdout_to = Stdio::SameAsStdout();
  EXPECT_EQ(Subprocess::Spawn(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.stdout_to = Stdio::Fd(-1);
  EXPECT_EQ(Subprocess::Spawn(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.stdout_to = Stdio::File("");
  EXPECT_EQ(Subprocess::Spawn(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.stdout_to = Stdio::Inherit();
  options.ignored_signals = {SIGKILL};
  EXPECT_EQ(Subprocess::Spawn(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.ignored_signals = {};
  options.parent_death_signal = -1;
  EXPECT_EQ(Subprocess::Spawn(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Subprocess, AddsAndReplacesEnvironmentEntries) {
  ASSERT_EQ(setenv("CZ_SUBPROCESS_KEPT", "kept", 1), 0);
  ASSERT_EQ(setenv("CZ_SUBPROCESS_REPLACED", "old", 1), 0);
  SpawnOptions options = Shell(
      "echo \"$CZ_SUBPROCESS_KEPT $CZ_SUBPROCESS_REPLACED "
      "$CZ_SUBPROCESS_ADDED\"; env | grep -c '^CZ_SUBPROCESS_REPLACED='");
  options.env = {"CZ_SUBPROCESS_REPLACED=new", "CZ_SUBPROCESS_ADDED=a=b"};
  EXPECT_EQ(Output(options), "kept new a=b\n1\n");
  unsetenv("CZ_SUBPROCESS_KEPT");
  unsetenv("CZ_SUBPROCESS_REPLACED");
}

TEST(Subprocess, StartsInTheWorkingDirectory) {
  SpawnOptions options;
  options.argv = {"pwd"};
  options.working_dir = "/";
  EXPECT_EQ(Output(options), "/\n");
  options.working_dir = "/nonexistent/dir";
  options.name = "pwd in nowhere";
  EXPECT_EQ(Subprocess::Spawn(options).status(),
            absl::NotFoundError("chdir to /nonexistent/dir for pwd in nowhere: "
                                "No such file or directory"));
}

TEST(Subprocess, RedirectsToFilesAndPipes) {
  const std::string out = TempPath("out");
  SpawnOptions options = Shell("echo to-stdout; echo to-stderr >&2");
  options.stdout_to = Stdio::File(out);
  options.stderr_to = Stdio::SameAsStdout();
  absl::StatusOr<ExitStatus> end = RunSubprocess(options, absl::Seconds(30));
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(ReadFile(out), "to-stdout\nto-stderr\n");
  // Truncated again, then appended to.
  options = Shell("echo first");
  options.stdout_to = Stdio::File(out);
  ASSERT_TRUE(RunSubprocess(options, absl::Seconds(30)).ok());
  options = Shell("echo second");
  options.stdout_to = Stdio::File(out, /*append=*/true);
  ASSERT_TRUE(RunSubprocess(options, absl::Seconds(30)).ok());
  EXPECT_EQ(ReadFile(out), "first\nsecond\n");
  // A file that cannot be opened is named.
  options.stdout_to = Stdio::File("/nonexistent/dir/log");
  EXPECT_EQ(Subprocess::Spawn(options).status(),
            absl::NotFoundError("open /nonexistent/dir/log for /bin/sh: No "
                                "such file or directory"));

  // A FIFO nobody reads is refused, not waited on.
  const std::string fifo = TempPath("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  options.stdout_to = Stdio::File(fifo);
  EXPECT_EQ(Subprocess::Spawn(options).status(),
            absl::NotFoundError(absl::StrCat(
                "open ", fifo, " for /bin/sh: No such device or address")));
  unlink(fifo.c_str());

  // stdin from a pipe, stderr into another.
  options = Shell("cat; echo err >&2");
  options.stdin_from = Stdio::Pipe();
  options.stdout_to = Stdio::Pipe();
  options.stderr_to = Stdio::Pipe();
  absl::StatusOr<Subprocess> child = Subprocess::Spawn(options);
  ASSERT_TRUE(child.ok()) << child.status();
  const std::string text = "through the pipe\n";
  ASSERT_EQ(write(child->pipe_fd(STDIN_FILENO), text.data(), text.size()),
            static_cast<ssize_t>(text.size()));
  child->ClosePipe(STDIN_FILENO);
  EXPECT_EQ(child->pipe_fd(STDIN_FILENO), -1);
  EXPECT_EQ(ReadAll(child->pipe_fd(STDOUT_FILENO)), text);
  const int err = child->ReleasePipe(STDERR_FILENO);
  EXPECT_EQ(ReadAll(err), "err\n");
  close(err);
  end = child->Wait(absl::Seconds(30));
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_TRUE(end->success());

  // stdin from /dev/null: cat reads EOF at once.
  options = Shell("cat; echo done");
  options.stdin_from = Stdio::Null();
  EXPECT_EQ(Output(options), "done\n");
}

TEST(Subprocess, RedirectsToDescriptorsEvenOnesAmongZeroToTwo) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  SpawnOptions options = Shell("echo out; echo err >&2");
  options.stdout_to = Stdio::Fd(fds[1]);
  options.stderr_to = Stdio::Fd(fds[1]);
  absl::StatusOr<ExitStatus> end = RunSubprocess(options, absl::Seconds(30));
  close(fds[1]);
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(ReadAll(fds[0]), "out\nerr\n");
  close(fds[0]);
  // This process's 1 and 2, swapped for the child: each source is moved
  // out of the way before any is replaced.
  const std::string out = TempPath("swap_out");
  const std::string err = TempPath("swap_err");
  const int saved_out = dup(STDOUT_FILENO);
  const int saved_err = dup(STDERR_FILENO);
  ASSERT_GE(saved_out, 0);
  ASSERT_GE(saved_err, 0);
  const int out_fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int err_fd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(out_fd, 0);
  ASSERT_GE(err_fd, 0);
  fflush(stdout);
  fflush(stderr);
  dup2(out_fd, STDOUT_FILENO);
  dup2(err_fd, STDERR_FILENO);
  options = Shell("echo a; echo b >&2");
  options.stdout_to = Stdio::Fd(STDERR_FILENO);
  options.stderr_to = Stdio::Fd(STDOUT_FILENO);
  end = RunSubprocess(options, absl::Seconds(30));
  dup2(saved_out, STDOUT_FILENO);
  dup2(saved_err, STDERR_FILENO);
  for (const int fd : {saved_out, saved_err, out_fd, err_fd}) close(fd);
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(ReadFile(out), "b\n");
  EXPECT_EQ(ReadFile(err), "a\n");
}

TEST(Subprocess, LeadsAGroupThatDiesWithIt) {
  const std::string pid_file = TempPath("group_pid");
  SpawnOptions options =
      Shell(absl::StrCat("sleep 100 & echo $! > ", pid_file, "; exit 4"));
  options.new_process_group = true;
  absl::StatusOr<Subprocess> child = Subprocess::Spawn(options);
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(getpgid(child->pid()), child->pid());
  absl::StatusOr<ExitStatus> end = child->Wait(absl::Seconds(30));
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->exit_code(), 4);
  // The background sleep was in its group: killed when it was reaped.
  const pid_t orphan = std::atoi(ReadFile(pid_file).c_str());
  ASSERT_GT(orphan, 0);
  EXPECT_TRUE(Dies(orphan));
}

TEST(Subprocess, SignalGroupReachesWhatTheChildStarted) {
  const std::string pid_file = TempPath("signal_group_pid");
  SpawnOptions options =
      Shell(absl::StrCat("sleep 100 & echo $! > ", pid_file, "; wait"));
  options.new_process_group = true;
  absl::StatusOr<Subprocess> child = Subprocess::Spawn(options);
  ASSERT_TRUE(child.ok()) << child.status();
  pid_t grandchild = 0;
  for (int i = 0; i < 1000 && grandchild <= 0; ++i) {
    grandchild = std::atoi(ReadFile(pid_file).c_str());
    if (grandchild <= 0) absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_GT(grandchild, 0);
  ASSERT_TRUE(child->SignalGroup(SIGTERM).ok());
  EXPECT_TRUE(Dies(grandchild));
  absl::StatusOr<ExitStatus> end = child->Wait(absl::Seconds(30));
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_FALSE(end->success());
}

TEST(Subprocess, TheDestructorKillsARunningChild) {
  pid_t pid = -1;
  {
    SpawnOptions options;
    options.argv = {"sleep", "100"};
    absl::StatusOr<Subprocess> child = Subprocess::Spawn(options);
    ASSERT_TRUE(child.ok()) << child.status();
    pid = child->pid();
    // Moved: the new owner kills it.
    Subprocess moved = *std::move(child);
    EXPECT_EQ(moved.pid(), pid);
  }
  EXPECT_NE(kill(pid, 0), 0);
}

TEST(Subprocess, TheParentDeathSignalFiresWhenTheStartingThreadExits) {
  for (const bool armed : {true, false}) {
    SCOPED_TRACE(armed);
    absl::StatusOr<Subprocess> child = absl::UnknownError("not started");
    std::thread starter([&] {
      SpawnOptions options;
      options.argv = {"sleep", "100"};
      if (armed) options.parent_death_signal = SIGKILL;
      child = Subprocess::Spawn(options);
    });
    starter.join();
    ASSERT_TRUE(child.ok()) << child.status();
    absl::StatusOr<ExitStatus> end =
        child->Wait(absl::Seconds(armed ? 30 : 0.3));
    if (armed) {
      ASSERT_TRUE(end.ok()) << end.status();
      EXPECT_EQ(end->signal(), SIGKILL);
    } else {
      EXPECT_EQ(end.status().code(), absl::StatusCode::kDeadlineExceeded);
    }
  }
}

TEST(Subprocess, IgnoredSignalsStayIgnoredAfterExec) {
  SpawnOptions options;
  options.argv = {"sleep", "100"};
  options.ignored_signals = {SIGTERM};
  absl::StatusOr<Subprocess> child = Subprocess::Spawn(options);
  ASSERT_TRUE(child.ok()) << child.status();
  ASSERT_TRUE(child->Signal(SIGTERM).ok());
  EXPECT_EQ(child->Wait(absl::Milliseconds(300)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(Subprocess, ACaughtSignalHasItsDefaultActionInTheChild) {
  struct sigaction action {};
  action.sa_handler = [](int) {};
  sigemptyset(&action.sa_mask);
  struct sigaction old {};
  ASSERT_EQ(sigaction(SIGUSR2, &action, &old), 0);
  // The shell would keep an ignored signal ignored; a caught one it must
  // see at its default.
  absl::StatusOr<ExitStatus> end =
      RunSubprocess(Shell("kill -USR2 $$; exit 0"), absl::Seconds(30));
  sigaction(SIGUSR2, &old, nullptr);
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->signal(), SIGUSR2);
}

TEST(Subprocess, ClosesOtherDescriptorsOnRequest) {
  // Inherited: no close-on-exec.
  const int fd = open("/dev/null", O_RDONLY);
  ASSERT_GE(fd, 3);
  // $$ is the shell: the program the child exec'd.
  SpawnOptions options = Shell(absl::StrCat("[ -e /proc/$$/fd/", fd, " ]"));
  absl::StatusOr<ExitStatus> end = RunSubprocess(options, absl::Seconds(30));
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->exit_code(), 0);
  options.close_other_fds = true;
  end = RunSubprocess(options, absl::Seconds(30));
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->exit_code(), 1);
  close(fd);
}

}  // namespace
}  // namespace chunkzero
