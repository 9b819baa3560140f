// The launch binary run as a subprocess over fake_rank: a failing, stopped
// or stubborn rank ends the job within seconds and leaves no process behind,
// and so do signals to the launcher, even SIGKILL.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tools/launch/redact_rendezvous.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

std::string Runfile(const std::string& path) {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/chunkzero/", path);
}

const std::string& Launch() {
  static const std::string* path =
      new std::string(Runfile("tools/launch/launch"));
  return *path;
}

const std::string& FakeRank() {
  static const std::string* path =
      new std::string(Runfile("tools/launch/fake_rank"));
  return *path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Waits for `pid` (a child of this process) for at most `limit` seconds and
// returns its wait status; past the limit it is SIGKILLed, the test fails
// and -1 is returned.
int WaitFor(pid_t pid, double limit) {
  const Clock::time_point start = Clock::now();
  while (true) {
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) return status;
    if (done < 0) {
      ADD_FAILURE() << "waitpid " << pid << ": " << std::strerror(errno);
      return -1;
    }
    if (SecondsSince(start) > limit) {
      ADD_FAILURE() << "pid " << pid << " still running after " << limit
                    << " s; killing it";
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// The exit code of a process that exited; -1 (and a test failure)
// otherwise.
int ExitCode(int wait_status) {
  if (wait_status != -1 && WIFEXITED(wait_status)) {
    return WEXITSTATUS(wait_status);
  }
  ADD_FAILURE() << "did not exit normally: wait status " << wait_status;
  return -1;
}

bool Gone(pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

// A directory of its own for each test: the launcher's $TMPDIR, where its
// stdout and stderr go, and fake_rank's --pid_dir.
class LaunchTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(
        std::getenv("TEST_TMPDIR"), "/",
        testing::UnitTest::GetInstance()->current_test_info()->name());
    tmpdir_ = dir_ + "/tmp";
    pids_ = dir_ + "/pids";
    ASSERT_EQ(mkdir(dir_.c_str(), 0700), 0) << dir_;
    ASSERT_EQ(mkdir(tmpdir_.c_str(), 0700), 0);
    ASSERT_EQ(mkdir(pids_.c_str(), 0700), 0);
  }

  // Starts `launch ARGS...` with stdout and stderr in files.
  pid_t Start(const std::vector<std::string>& args) {
    std::vector<std::string> argv_strings = {Launch()};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& arg : argv_strings) argv.push_back(arg.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_strings = {absl::StrCat("TMPDIR=", tmpdir_)};
    for (char** e = environ; *e != nullptr; ++e) {
      if (!absl::StartsWith(*e, "TMPDIR=")) env_strings.push_back(*e);
    }
    std::vector<char*> env;
    for (std::string& e : env_strings) env.push_back(e.data());
    env.push_back(nullptr);
    const std::string out = dir_ + "/out.txt";
    const std::string err = dir_ + "/err.txt";
    const pid_t pid = fork();
    if (pid == 0) {
      const int out_fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      const int err_fd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (out_fd < 0 || err_fd < 0 || dup2(out_fd, 1) < 0 ||
          dup2(err_fd, 2) < 0) {
        _exit(120);
      }
      execve(argv[0], argv.data(), env.data());
      _exit(121);
    }
    EXPECT_GT(pid, 0) << std::strerror(errno);
    return pid;
  }

  struct Result {
    int exit_code;
    double seconds;
  };

  Result Run(const std::vector<std::string>& args) {
    const Clock::time_point start = Clock::now();
    const int status = WaitFor(Start(args), 30);
    return {ExitCode(status), SecondsSince(start)};
  }

  std::string Out() const { return Redacted(ReadFile(dir_ + "/out.txt")); }
  std::string Err() const { return Redacted(ReadFile(dir_ + "/err.txt")); }

  // The pids fake_rank wrote for ranks 0..n-1, waiting up to 10 s for them.
  std::vector<pid_t> AwaitPids(int n) const {
    std::vector<pid_t> pids;
    const Clock::time_point start = Clock::now();
    for (int r = 0; r < n; ++r) {
      const std::string path = absl::StrCat(pids_, "/rank", r, ".pid");
      while (access(path.c_str(), F_OK) != 0 && SecondsSince(start) < 10) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      int pid = 0;
      std::string text = ReadFile(path);
      if (!text.empty() && text.back() == '\n') text.pop_back();
      EXPECT_TRUE(absl::SimpleAtoi(text, &pid)) << path << ": " << text;
      pids.push_back(pid);
    }
    return pids;
  }

  // Every rank of an n-rank job wrote its pid, and none of them exists now.
  void ExpectRanksGone(int n) const {
    const std::vector<pid_t> pids = AwaitPids(n);
    for (int r = 0; r < n; ++r) {
      EXPECT_TRUE(Gone(pids[r]))
          << "rank " << r << " (pid " << pids[r] << ") is still there";
    }
  }

  // What fake_rank prints as its first line: the rendezvous directory with
  // mkdtemp's random suffix as the XXXXXX it replaced.
  std::string RankLine(int rank, int world_size,
                       const std::string& args) const {
    return absl::StrCat("fake_rank ", rank, ": --world_size=", world_size,
                        " --backend=gloo --rank=", rank,
                        " --rendezvous=", tmpdir_,
                        "/chunkzero-rendezvous.XXXXXX/store ", args, "\n");
  }

  std::string Redacted(std::string text) const {
    return chunkzero::RedactRendezvousDirs(std::move(text), tmpdir_);
  }

  bool TmpdirIsEmpty() const {
    DIR* dir = opendir(tmpdir_.c_str());
    if (dir == nullptr) return false;
    int entries = 0;
    while (readdir(dir) != nullptr) ++entries;
    closedir(dir);
    return entries == 2;  // . and ..
  }

  std::string PidDir() const { return "--pid_dir=" + pids_; }

  std::string dir_;
  std::string tmpdir_;
  std::string pids_;
};

TEST_F(LaunchTest, AllRanksExitingZeroIsZero) {
  const Result result = Run({"3", FakeRank(), PidDir(), "--sleep_s=0.1"});
  EXPECT_EQ(result.exit_code, 0);
  // Rank 0's output is the launcher's; the other ranks' is not shown.
  EXPECT_EQ(Out(), RankLine(0, 3, PidDir() + " --sleep_s=0.1"));
  EXPECT_EQ(Err(), "");
  ExpectRanksGone(3);
  EXPECT_TRUE(TmpdirIsEmpty());
}

TEST_F(LaunchTest, ARankFailingAtStartUpEndsTheJobWithItsCode) {
  const std::string args = absl::StrCat(
      PidDir(), " --await_all --fail_rank=1 --exit_code=3 --sleep_s=600");
  const Result result =
      Run({"3", FakeRank(), PidDir(), "--await_all", "--fail_rank=1",
           "--exit_code=3", "--sleep_s=600"});
  EXPECT_EQ(result.exit_code, 3);
  // The others end on SIGTERM: no waiting for a deadline or the grace
  // period (5 s).
  EXPECT_LT(result.seconds, 3.0);
  EXPECT_EQ(Err(), absl::StrCat("launch: rank 1 failed (exit code 3)\n",
                                "[rank 1] ", RankLine(1, 3, args), "[rank 1] ",
                                "fake_rank 1: exiting with code 3\n"));
  EXPECT_EQ(Out(), RankLine(0, 3, args));
  ExpectRanksGone(3);
  EXPECT_TRUE(TmpdirIsEmpty());
}

TEST_F(LaunchTest, RankZerosFailureFollowsItsOwnOutput) {
  const Result result =
      Run({"2", FakeRank(), PidDir(), "--await_all", "--fail_rank=0",
           "--exit_code=9", "--sleep_s=600"});
  EXPECT_EQ(result.exit_code, 9);
  EXPECT_EQ(Err(),
            "fake_rank 0: exiting with code 9\n"
            "launch: rank 0 failed (exit code 9)\n");
  ExpectRanksGone(2);
}

TEST_F(LaunchTest, ARankKilledByASignalGives128PlusItsNumber) {
  const Result result = Run({"2", FakeRank(), PidDir(), "--await_all",
                             "--signal_rank=1", "--sleep_s=600"});
  EXPECT_EQ(result.exit_code, 128 + SIGUSR1);
  EXPECT_TRUE(absl::StartsWith(
      Err(), "launch: rank 1 failed (killed by signal SIGUSR1)\n"))
      << Err();
  ExpectRanksGone(2);
}

TEST_F(LaunchTest, AStoppedRankIsWokenToDieWhenAnotherFails) {
  const Clock::time_point start = Clock::now();
  const pid_t launcher = Start(
      {"3", FakeRank(), PidDir(), "--await_all", "--stop_rank=1",
       "--fail_rank=2", "--fail_after_s=1", "--exit_code=5", "--sleep_s=600"});
  // Rank 1 really is stopped before rank 2 fails.
  const pid_t stopped = AwaitPids(3)[1];
  bool seen_stopped = false;
  while (!seen_stopped && SecondsSince(start) < 10) {
    const std::string stat = ReadFile(absl::StrCat("/proc/", stopped, "/stat"));
    const size_t paren = stat.rfind(')');
    seen_stopped = paren != std::string::npos && paren + 2 < stat.size() &&
                   stat[paren + 2] == 'T';
    if (!seen_stopped)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(seen_stopped);
  EXPECT_EQ(ExitCode(WaitFor(launcher, 30)), 5);
  // Within the 5 s grace period: SIGCONT let the stopped rank act on
  // SIGTERM; no SIGKILL was needed.
  EXPECT_LT(SecondsSince(start), 4.0);
  EXPECT_TRUE(absl::StartsWith(Err(), "launch: rank 2 failed (exit code 5)\n"))
      << Err();
  // The report names the stopped rank: its peers' timeouts may not.
  EXPECT_TRUE(absl::StrContains(
      Err(),
      "launch: rank 1 was stopped (SIGSTOP or a debugger) when rank 2 "
      "failed\n"))
      << Err();
  EXPECT_FALSE(absl::StrContains(Err(), "SIGKILL")) << Err();
  ExpectRanksGone(3);
}

TEST_F(LaunchTest, ARankIgnoringSigtermIsKilledAfterTheGracePeriod) {
  const Result result =
      Run({"--grace_period_s=1", "3", FakeRank(), PidDir(), "--ignore_term",
           "--await_all", "--fail_rank=0", "--exit_code=4", "--sleep_s=600"});
  EXPECT_EQ(result.exit_code, 4);
  EXPECT_GE(result.seconds, 1.0);
  EXPECT_LT(result.seconds, 3.0);
  EXPECT_EQ(Err(),
            "fake_rank 0: exiting with code 4\n"
            "launch: rank 0 failed (exit code 4)\n"
            "launch: rank 1 did not exit within 1s of SIGTERM; sending "
            "SIGKILL\n"
            "launch: rank 2 did not exit within 1s of SIGTERM; sending "
            "SIGKILL\n");
  ExpectRanksGone(3);
}

TEST_F(LaunchTest, SignalsToTheLauncherArePassedOn) {
  for (const int sig : {SIGTERM, SIGINT, SIGHUP}) {
    SCOPED_TRACE(strsignal(sig));
    const Clock::time_point start = Clock::now();
    const pid_t launcher = Start({"3", FakeRank(), PidDir(), "--sleep_s=600"});
    const std::vector<pid_t> pids = AwaitPids(3);
    ASSERT_EQ(kill(launcher, sig), 0);
    EXPECT_EQ(ExitCode(WaitFor(launcher, 30)), 128 + sig);
    EXPECT_LT(SecondsSince(start), 4.0);
    EXPECT_EQ(Err(), absl::StrCat("launch: got SIG", sigabbrev_np(sig),
                                  "; passing it on to the ranks\n"));
    for (const pid_t pid : pids) EXPECT_TRUE(Gone(pid)) << pid;
    EXPECT_TRUE(TmpdirIsEmpty());
    for (int r = 0; r < 3; ++r) {
      unlink(absl::StrCat(pids_, "/rank", r, ".pid").c_str());
    }
  }
}

TEST_F(LaunchTest, RanksIgnoringASignalToTheLauncherAreKilledAfterTheGrace) {
  const Clock::time_point start = Clock::now();
  const pid_t launcher = Start({"--grace_period_s=1", "2", FakeRank(), PidDir(),
                                "--ignore_term", "--sleep_s=600"});
  AwaitPids(2);
  const Clock::time_point signalled = Clock::now();
  ASSERT_EQ(kill(launcher, SIGTERM), 0);
  EXPECT_EQ(ExitCode(WaitFor(launcher, 30)), 143);
  EXPECT_GE(SecondsSince(signalled), 1.0);
  EXPECT_LT(SecondsSince(start), 4.0);
  EXPECT_EQ(Err(),
            "launch: got SIGTERM; passing it on to the ranks\n"
            "launch: rank 0 did not exit within 1s of SIGTERM; sending "
            "SIGKILL\n"
            "launch: rank 1 did not exit within 1s of SIGTERM; sending "
            "SIGKILL\n");
  ExpectRanksGone(2);
}

TEST_F(LaunchTest, ASecondSignalKillsTheRanksAtOnce) {
  const Clock::time_point start = Clock::now();
  const pid_t launcher = Start({"--grace_period_s=60", "2", FakeRank(),
                                PidDir(), "--ignore_term", "--sleep_s=600"});
  AwaitPids(2);
  ASSERT_EQ(kill(launcher, SIGTERM), 0);
  while (!absl::StrContains(Err(), "got SIGTERM") && SecondsSince(start) < 10) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(kill(launcher, SIGINT), 0);
  EXPECT_EQ(ExitCode(WaitFor(launcher, 30)), 143);
  EXPECT_LT(SecondsSince(start), 4.0);
  EXPECT_EQ(Err(),
            "launch: got SIGTERM; passing it on to the ranks\n"
            "launch: got SIGINT while stopping; sending SIGKILL to the "
            "ranks\n");
  ExpectRanksGone(2);
}

TEST_F(LaunchTest, AKilledLauncherTakesItsRanksWithIt) {
  // The ranks' new parent is this process, so that it can see how they end.
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0) << std::strerror(errno);
  const pid_t launcher = Start({"2", FakeRank(), PidDir(), "--sleep_s=600"});
  const std::vector<pid_t> pids = AwaitPids(2);
  ASSERT_EQ(kill(launcher, SIGKILL), 0);
  WaitFor(launcher, 30);
  for (const pid_t pid : pids) {
    const int status = WaitFor(pid, 5);
    EXPECT_TRUE(status != -1 && WIFSIGNALED(status) &&
                WTERMSIG(status) == SIGKILL)
        << "pid " << pid << ": wait status " << status;
  }
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 0), 0);
}

TEST_F(LaunchTest, AMissingBinaryIsNamedWithTheErrnoText) {
  const Result result = Run({"2", "/nonexistent/fake_rank"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(Err(),
            "launch: cannot execute /nonexistent/fake_rank for rank 0: No "
            "such file or directory\n");
  EXPECT_TRUE(TmpdirIsEmpty());
}

TEST_F(LaunchTest, BadUsageExitsTwoWithTheUsage) {
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"2"},
      {"0", FakeRank()},
      {"x", FakeRank()},
      {"--grace_period_s=-1", "2", FakeRank()},
      {"--bogus", "2", FakeRank()},
  };
  for (const std::vector<std::string>& args : cases) {
    SCOPED_TRACE(absl::StrCat("args: ", absl::StrJoin(args, " ")));
    EXPECT_EQ(Run(args).exit_code, 2);
    const std::string err = Err();
    EXPECT_TRUE(absl::StartsWith(err, "launch: ")) << err;
    EXPECT_TRUE(absl::StrContains(
        err, "\nusage: launch [--grace_period_s=S] [--nnodes=N "))
        << err;
    EXPECT_EQ(Out(), "");
  }
}

}  // namespace
