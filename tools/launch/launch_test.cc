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
#include "absl/strings/str_replace.h"
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

// The state letter of `pid` in /proc/PID/stat ('R', 'S', 'T', 'Z', ...);
// '?' if it cannot be read.
char State(pid_t pid) {
  const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return '?';
  return stat[paren + 2];
}

// Gone, or a zombie nobody has reaped yet (an orphan's new parent may not
// reap at once): either way it runs no more.
bool Dead(pid_t pid) {
  if (Gone(pid)) return true;
  const char state = State(pid);
  return state == 'Z' || state == 'X' || state == '?';
}

// Whether `done(pid)` holds for every pid within `limit` seconds.
template <typename Predicate>
bool AllWithin(const std::vector<pid_t>& pids, double limit, Predicate done) {
  const Clock::time_point start = Clock::now();
  while (true) {
    bool all = true;
    for (const pid_t pid : pids) all = all && done(pid);
    if (all) return true;
    if (SecondsSince(start) > limit) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// A directory of its own for each test: the launcher's $TMPDIR, where its
// stdout and stderr go, and fake_rank's --pid_dir.
class LaunchTest : public testing::Test {
 protected:
  void SetUp() override {
    // A parameterised test's name holds a '/'.
    dir_ = absl::StrCat(
        std::getenv("TEST_TMPDIR"), "/",
        absl::StrReplaceAll(
            testing::UnitTest::GetInstance()->current_test_info()->name(),
            {{"/", "_"}}));
    tmpdir_ = dir_ + "/tmp";
    pids_ = dir_ + "/pids";
    ASSERT_EQ(mkdir(dir_.c_str(), 0700), 0) << dir_;
    ASSERT_EQ(mkdir(tmpdir_.c_str(), 0700), 0);
    ASSERT_EQ(mkdir(pids_.c_str(), 0700), 0);
  }

  // Starts `launch ARGS...` with stdout and stderr in files, and stdin from
  // `stdin_path` if given (else this process's).
  pid_t Start(const std::vector<std::string>& args,
              const std::string& stdin_path = "") {
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
      if (!stdin_path.empty()) {
        const int in_fd = open(stdin_path.c_str(), O_RDONLY);
        if (in_fd < 0 || dup2(in_fd, 0) < 0) _exit(122);
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

  Result Run(const std::vector<std::string>& args,
             const std::string& stdin_path = "") {
    const Clock::time_point start = Clock::now();
    const int status = WaitFor(Start(args, stdin_path), 30);
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

// --rank, --world_size and --rendezvous are the launcher's: among the
// ranks' arguments they are refused before any rank starts.
TEST_F(LaunchTest, FlagsTheLauncherSetsAreRefusedAmongTheRankArgs) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--rank=1"},
       "launch: --rank is set by the launcher (--node_rank x NPROC + the "
       "local rank); drop it from the rank arguments\n"},
      {{"--world_size", "3"},
       "launch: --world_size is set by the launcher (NPROC x --nnodes); "
       "drop it from the rank arguments\n"},
      {{"-rendezvous=/tmp/x"},
       "launch: --rendezvous is set by the launcher; drop it from the rank "
       "arguments (the launcher's own --rendezvous, before NPROC, chooses "
       "it)\n"}};
  for (const auto& [flag, message] : cases) {
    SCOPED_TRACE(absl::StrJoin(flag, " "));
    std::vector<std::string> args = {"2", FakeRank(), PidDir(), "--sleep_s=0"};
    args.insert(args.end(), flag.begin(), flag.end());
    EXPECT_EQ(Run(args).exit_code, 2);
    EXPECT_TRUE(absl::StartsWith(Err(), message + "usage: launch ")) << Err();
    EXPECT_EQ(Out(), "");
    EXPECT_EQ(access((pids_ + "/rank0.pid").c_str(), F_OK), -1);
    EXPECT_EQ(access((pids_ + "/rank1.pid").c_str(), F_OK), -1);
    EXPECT_TRUE(TmpdirIsEmpty());
  }
}

// Each rank leads a process group of its own (so that the launcher can
// signal what the rank started too), reads nothing from the launcher's
// stdin (a terminal would stop a rank outside its foreground group), and
// ignores SIGTTOU (so that rank 0, writing to the launcher's terminal from
// outside its foreground group, is not stopped under `stty tostop`).
TEST_F(LaunchTest, EachRankLeadsAProcessGroupWithStdinFromDevNull) {
  const std::string input = dir_ + "/stdin.txt";
  {
    std::ofstream out(input);
    out << "hello\n";
  }
  Result result = Run({"2", FakeRank(), "--print_process"}, input);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(Out(), RankLine(0, 2, "--print_process") +
                       "fake_rank 0: leads its process group: yes\n"
                       "fake_rank 0: stdin: 0 bytes\n"
                       "fake_rank 0: SIGTTOU: ignored\n");
  EXPECT_EQ(Err(), "");
  result = Run({"2", FakeRank(), "--print_process", "--fail_rank=1"}, input);
  EXPECT_EQ(result.exit_code, 1);
  const std::string args = "--print_process --fail_rank=1";
  EXPECT_EQ(Err(), absl::StrCat("launch: rank 1 failed (exit code 1)\n",
                                "[rank 1] ", RankLine(1, 2, args),
                                "[rank 1] fake_rank 1: leads its process "
                                "group: yes\n"
                                "[rank 1] fake_rank 1: stdin: 0 bytes\n"
                                "[rank 1] fake_rank 1: SIGTTOU: ignored\n"
                                "[rank 1] fake_rank 1: exiting with code 1\n"));
}

// A rank whose BINARY is a wrapper script: each starts a long-lived child
// (its pid in PIDS/childR.pid), rank 1 then exits 3 once rank 0's child
// runs, and rank 0 waits for its child. With `ignore_term` the wrapper and
// its child ignore SIGTERM.
std::string WrapperScript(const std::string& pids, bool ignore_term) {
  return absl::StrCat(
      "#!/bin/sh\n", ignore_term ? "trap '' TERM\n" : "",
      "for arg; do case \"$arg\" in --rank=*) rank=${arg#--rank=} ;; esac; "
      "done\n"
      "sleep 1000 &\n"
      "echo $! > ",
      pids, "/child$rank.tmp && mv ", pids, "/child$rank.tmp ", pids,
      "/child$rank.pid\n"
      "if [ \"$rank\" = 1 ]; then\n"
      "  while [ ! -e ",
      pids,
      "/child0.pid ]; do sleep 0.01; done\n"
      "  echo \"wrapper 1: exiting with code 3\" >&2\n"
      "  exit 3\n"
      "fi\n"
      "wait\n");
}

class WrapperTest : public LaunchTest,
                    public testing::WithParamInterface<bool> {};

// When another rank fails, what a wrapper started dies with it: the stop
// signal (or the SIGKILL after the grace period, for children that ignore
// it) goes to each rank's process group, and what a rank that has exited
// left behind is killed too.
TEST_P(WrapperTest, AWrappersChildrenDieWithTheJob) {
  const bool ignore_term = GetParam();
  const std::string script = dir_ + "/rank.sh";
  {
    std::ofstream out(script);
    out << WrapperScript(pids_, ignore_term);
  }
  ASSERT_EQ(chmod(script.c_str(), 0755), 0);
  const Result result = Run({"--grace_period_s=1", "2", script});
  EXPECT_EQ(result.exit_code, 3);
  // Rank 0's wrapper ends on SIGTERM at once, or on SIGKILL after 1 s.
  EXPECT_LT(result.seconds, 3.0);
  EXPECT_TRUE(absl::StartsWith(Err(),
                               "launch: rank 1 failed (exit code 3)\n"
                               "[rank 1] wrapper 1: exiting with code "
                               "3\n"))
      << Err();
  std::vector<pid_t> children;
  for (int r = 0; r < 2; ++r) {
    int pid = 0;
    std::string text = ReadFile(absl::StrCat(pids_, "/child", r, ".pid"));
    if (!text.empty() && text.back() == '\n') text.pop_back();
    ASSERT_TRUE(absl::SimpleAtoi(text, &pid)) << text;
    children.push_back(pid);
  }
  // Within the grace period of the launcher's exit.
  EXPECT_TRUE(AllWithin(children, 1.0, Dead))
      << "a wrapper's child outlived the job";
  for (const pid_t pid : children) {
    if (!Dead(pid)) kill(pid, SIGKILL);
  }
}

INSTANTIATE_TEST_SUITE_P(SigtermOrSigkill, WrapperTest, testing::Bool(),
                         [](const testing::TestParamInfo<bool>& info) {
                           return info.param ? "IgnoringSigterm"
                                             : "ActingOnSigterm";
                         });

// Ranks outside the terminal's foreground process group no longer get its
// Ctrl-Z: the launcher passes SIGTSTP on and stops itself, and passes the
// SIGCONT that resumes it on too.
TEST_F(LaunchTest, SigtstpAndSigcontToTheLauncherArePassedOn) {
  const pid_t launcher = Start({"2", FakeRank(), PidDir(), "--sleep_s=600"});
  std::vector<pid_t> ranks = AwaitPids(2);
  ASSERT_EQ(kill(launcher, SIGTSTP), 0);
  auto stopped = [](pid_t pid) { return State(pid) == 'T'; };
  EXPECT_TRUE(AllWithin(ranks, 5, stopped)) << "the ranks were not stopped";
  EXPECT_TRUE(AllWithin({launcher}, 5, stopped)) << "the launcher did not stop";
  ASSERT_EQ(kill(launcher, SIGCONT), 0);
  auto running = [](pid_t pid) {
    const char state = State(pid);
    return state == 'S' || state == 'R';
  };
  EXPECT_TRUE(AllWithin(ranks, 5, running)) << "the ranks were not resumed";
  EXPECT_TRUE(AllWithin({launcher}, 5, running));
  ASSERT_EQ(kill(launcher, SIGTERM), 0);
  EXPECT_EQ(ExitCode(WaitFor(launcher, 30)), 143);
  EXPECT_EQ(Err(), "launch: got SIGTERM; passing it on to the ranks\n");
  for (const pid_t pid : ranks) EXPECT_TRUE(Gone(pid)) << pid;
  for (const pid_t pid : ranks) {
    if (!Dead(pid)) kill(pid, SIGKILL);
  }
}

}  // namespace
