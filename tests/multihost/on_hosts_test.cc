// on_hosts SIGKILLed mid-run: the launchers it started and their ranks die
// with it, and the namespaces it leaves are removed when the next testbed
// starts.
//
// Needs root; where namespaces cannot be made the test skips, saying why.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "tests/multihost/netns_testbed.h"
#include "tests/multihost/subprocess.h"

namespace chunkzero {
namespace multihost {
namespace {

using Clock = std::chrono::steady_clock;

std::string Runfile(const std::string& path) {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/chunkzero/", path);
}

bool NamespaceExists(const std::string& name) {
  return access(("/var/run/netns/" + name).c_str(), F_OK) == 0;
}

// Gone, or a zombie its new parent has not reaped yet: it runs no more.
bool Dead(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  const std::string stat =
      ReadFileOrEmpty(absl::StrCat("/proc/", pid, "/stat"));
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return true;
  return stat[paren + 2] == 'Z' || stat[paren + 2] == 'X';
}

std::vector<std::string> FilesIn(const std::string& path) {
  std::vector<std::string> names;
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return names;
  while (const dirent* entry = readdir(dir)) names.emplace_back(entry->d_name);
  closedir(dir);
  return names;
}

// The parent of `pid` (its PPid in /proc/PID/status); -1 if unknown.
pid_t ParentOf(pid_t pid) {
  const std::string status =
      ReadFileOrEmpty(absl::StrCat("/proc/", pid, "/status"));
  const size_t at = status.find("\nPPid:");
  if (at == std::string::npos) return -1;
  const size_t end = status.find('\n', at + 1);
  int parent = -1;
  if (!absl::SimpleAtoi(absl::string_view(status).substr(at + 6, end - at - 6),
                        &parent)) {
    return -1;
  }
  return parent;
}

// The pid in `path`, waiting up to `seconds` for the file; -1 if none.
pid_t AwaitPid(const std::string& path, double seconds) {
  const Clock::time_point until =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(seconds));
  while (access(path.c_str(), F_OK) != 0 && Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  int pid = -1;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFileOrEmpty(path)),
                        &pid)) {
    return -1;
  }
  return pid;
}

TEST(OnHosts, SigkilledItsLaunchersAndRanksDieAndTheNextStartRemovesItsHosts) {
  {
    absl::StatusOr<std::unique_ptr<NetnsTestbed>> probe =
        NetnsTestbed::Create(TestbedOptions{1, {}, ""});
    if (!probe.ok()) GTEST_SKIP() << probe.status();
  }
  const std::string dir = std::getenv("TEST_TMPDIR");
  for (int host = 0; host < 2; ++host) {
    ASSERT_EQ(mkdir(absl::StrCat(dir, "/h", host).c_str(), 0700), 0);
  }
  // Two hosts, each running a launcher of two ranks that sleep.
  std::vector<std::string> args = {Runfile("tests/multihost/on_hosts"),
                                   "--hosts=2",
                                   "--",
                                   Runfile("tools/launch/launch"),
                                   "2",
                                   Runfile("tools/launch/fake_rank"),
                                   absl::StrCat("--pid_dir=", dir, "/h{host}"),
                                   "--sleep_s=600"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string log = dir + "/on_hosts.log";
  const pid_t on_hosts = fork();
  if (on_hosts == 0) {
    // The launchers' rendezvous directories too: a SIGKILLed launcher
    // cannot remove its own.
    setenv("TMPDIR", dir.c_str(), 1);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  ASSERT_GT(on_hosts, 0);
  std::vector<pid_t> ranks;
  std::vector<pid_t> launchers;
  for (int host = 0; host < 2; ++host) {
    for (int rank = 0; rank < 2; ++rank) {
      const pid_t pid =
          AwaitPid(absl::StrCat(dir, "/h", host, "/rank", rank, ".pid"), 30);
      if (pid > 0) ranks.push_back(pid);
    }
    if (!ranks.empty()) launchers.push_back(ParentOf(ranks.back()));
  }
  const std::string prefix = absl::StrCat("czmh", on_hosts);
  const std::vector<std::string> hosts = {prefix + "-sw", prefix + "-h0",
                                          prefix + "-h1"};
  ASSERT_EQ(ranks.size(), 4u) << ReadFileOrEmpty(log);
  // Its hosts' logs.
  std::vector<std::string> logs;
  for (const std::string& name : FilesIn("/tmp")) {
    if (absl::StartsWith(name, prefix + "-")) logs.push_back("/tmp/" + name);
  }
  EXPECT_EQ(logs.size(), 2u);
  for (const pid_t launcher : launchers) ASSERT_GT(launcher, 1);
  for (const std::string& name : hosts) {
    ASSERT_TRUE(NamespaceExists(name)) << name;
  }

  ASSERT_EQ(kill(on_hosts, SIGKILL), 0);
  waitpid(on_hosts, nullptr, 0);
  std::vector<pid_t> all = launchers;
  all.insert(all.end(), ranks.begin(), ranks.end());
  const Clock::time_point until = Clock::now() + std::chrono::seconds(5);
  auto all_dead = [&all] {
    for (const pid_t pid : all) {
      if (!Dead(pid)) return false;
    }
    return true;
  };
  while (!all_dead() && Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (const pid_t pid : all) {
    EXPECT_TRUE(Dead(pid)) << "pid " << pid << " ("
                           << ReadFileOrEmpty(
                                  absl::StrCat("/proc/", pid, "/cmdline"))
                           << ") outlived on_hosts";
  }
  // Its namespaces stay until the next testbed starts.
  {
    absl::StatusOr<std::unique_ptr<NetnsTestbed>> next =
        NetnsTestbed::Create(TestbedOptions{1, {}, ""});
    ASSERT_TRUE(next.ok()) << next.status();
    for (const std::string& name : hosts) {
      EXPECT_FALSE(NamespaceExists(name)) << name << " is still there";
    }
    for (const std::string& path : logs) {
      EXPECT_NE(access(path.c_str(), F_OK), 0) << path << " is still there";
    }
  }

  // What a failing run leaves.
  for (const pid_t pid : all) {
    if (!Dead(pid)) kill(pid, SIGKILL);
  }
  for (const std::string& path : logs) unlink(path.c_str());
  for (const std::string& name : hosts) {
    if (NamespaceExists(name)) {
      RunCommand({"ip", "netns", "del", name}).IgnoreError();
    }
  }
}

// SIGINT, SIGTERM and SIGHUP end on_hosts as its command ending does: the
// commands are killed and the namespaces removed.
TEST(OnHosts, ASignalEndsItAndRemovesItsHosts) {
  {
    absl::StatusOr<std::unique_ptr<NetnsTestbed>> probe =
        NetnsTestbed::Create(TestbedOptions{1, {}, ""});
    if (!probe.ok()) GTEST_SKIP() << probe.status();
  }
  const std::string dir = std::getenv("TEST_TMPDIR");
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
    SCOPED_TRACE(strsignal(sig));
    const std::string pid_file = absl::StrCat(dir, "/", sig, ".pid");
    std::vector<std::string> args = {
        Runfile("tests/multihost/on_hosts"),
        "--hosts=1",
        "--",
        "sh",
        "-c",
        absl::StrCat("echo $$ > ", pid_file, ".tmp && mv ", pid_file, ".tmp ",
                     pid_file, " && exec sleep 600")};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string log = absl::StrCat(dir, "/", sig, ".log");
    const pid_t on_hosts = fork();
    if (on_hosts == 0) {
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      execv(argv[0], argv.data());
      _exit(127);
    }
    ASSERT_GT(on_hosts, 0);
    const pid_t command = AwaitPid(pid_file, 30);
    ASSERT_GT(command, 0) << ReadFileOrEmpty(log);
    ASSERT_EQ(kill(on_hosts, sig), 0);
    int status = -1;
    const Clock::time_point until = Clock::now() + std::chrono::seconds(10);
    while (waitpid(on_hosts, &status, WNOHANG) == 0) {
      if (Clock::now() > until) {
        ADD_FAILURE() << "on_hosts still runs 10 s after the signal";
        kill(on_hosts, SIGKILL);
        waitpid(on_hosts, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 130)
        << "wait status " << status << "\n"
        << ReadFileOrEmpty(log);
    EXPECT_TRUE(Dead(command));
    const std::string prefix = absl::StrCat("czmh", on_hosts);
    for (const std::string& name : {prefix + "-sw", prefix + "-h0"}) {
      EXPECT_FALSE(NamespaceExists(name)) << name;
      if (NamespaceExists(name)) {
        RunCommand({"ip", "netns", "del", name}).IgnoreError();
      }
    }
    if (!Dead(command)) kill(command, SIGKILL);
  }
}

}  // namespace
}  // namespace multihost
}  // namespace chunkzero
