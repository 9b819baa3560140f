// NetnsTestbed::Create removes what testbeds whose owner process is gone
// left behind (their namespaces, the links in them, and the processes still
// running in them) and leaves a live owner's alone.
//
// Needs root; where namespaces cannot be made the test skips, saying why.
#include "tests/multihost/netns_testbed.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/multihost/subprocess.h"

namespace chunkzero {
namespace multihost {
namespace {

bool NamespaceExists(const std::string& name) {
  return access(("/var/run/netns/" + name).c_str(), F_OK) == 0;
}

// Starts argv with its output in /dev/null; its pid.
pid_t Spawn(const std::vector<std::string>& argv) {
  std::vector<std::string> args = argv;
  std::vector<char*> raw;
  for (std::string& a : args) raw.push_back(a.data());
  raw.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = open("/dev/null", O_RDWR);
    dup2(null, STDOUT_FILENO);
    dup2(null, STDERR_FILENO);
    execvp(raw[0], raw.data());
    _exit(127);
  }
  return pid;
}

// A pid that no process has: that of a child that has exited and been
// reaped.
pid_t DeadPid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  int status = 0;
  waitpid(pid, &status, 0);
  return pid;
}

// The wait status of child `pid` if it ends within `seconds`, else -1.
int WaitWithin(pid_t pid, double seconds) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

TEST(NetnsTestbed, RemovesWhatDeadOwnersLeftAndNothingOfLiveOnes) {
  {
    absl::StatusOr<std::unique_ptr<NetnsTestbed>> probe =
        NetnsTestbed::Create(TestbedOptions{1, {}, ""});
    if (!probe.ok()) GTEST_SKIP() << probe.status();
  }
  // A testbed of a process that is gone: a switch and a host wired by a
  // veth pair, with a process still running on the host.
  const std::string dead = absl::StrCat("czmh", DeadPid());
  // A live process's, which may be a concurrent test's.
  const pid_t live_owner = Spawn({"sleep", "600"});
  ASSERT_GT(live_owner, 0);
  const std::string live = absl::StrCat("czmh", live_owner, "-h0");
  // One this process left before, when no testbed of it is live: an
  // earlier process with the same pid made it.
  const std::string mine = absl::StrCat("czmh", getpid(), "-h7");
  // Not a testbed's name.
  const std::string other = absl::StrCat(dead, "x-h0");
  for (const std::vector<std::string>& step :
       std::vector<std::vector<std::string>>{
           {"ip", "netns", "add", dead + "-sw"},
           {"ip", "netns", "add", dead + "-h0"},
           {"ip", "-n", dead + "-sw", "link", "add", "v0", "type", "veth",
            "peer", "name", "eth0", "netns", dead + "-h0"},
           {"ip", "netns", "add", live},
           {"ip", "netns", "add", mine},
           {"ip", "netns", "add", other},
       }) {
    absl::StatusOr<std::string> done = RunCommand(step);
    ASSERT_TRUE(done.ok()) << done.status();
  }
  const pid_t left =
      Spawn({"ip", "netns", "exec", dead + "-h0", "sleep", "600"});
  ASSERT_GT(left, 0);
  // Running in the namespace before the testbed starts.
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (ReadFileOrEmpty(absl::StrCat("/proc/", left, "/cmdline"))
                 .rfind("sleep", 0) != 0 &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  absl::StatusOr<std::unique_ptr<NetnsTestbed>> bed =
      NetnsTestbed::Create(TestbedOptions{1, {}, ""});
  ASSERT_TRUE(bed.ok()) << bed.status();
  EXPECT_FALSE(NamespaceExists(dead + "-sw"));
  EXPECT_FALSE(NamespaceExists(dead + "-h0"));
  EXPECT_FALSE(NamespaceExists(mine));
  const int status = WaitWithin(left, 5);
  EXPECT_TRUE(status != -1 && WIFSIGNALED(status) &&
              WTERMSIG(status) == SIGKILL)
      << "the process left in " << dead << "-h0: wait status " << status;
  EXPECT_TRUE(NamespaceExists(live));
  EXPECT_TRUE(NamespaceExists(other));
  EXPECT_TRUE(NamespaceExists(absl::StrCat("czmh", getpid(), "-sw")));
  EXPECT_TRUE(NamespaceExists(absl::StrCat("czmh", getpid(), "-h0")));
  bed->reset();

  // What a failing run leaves.
  kill(live_owner, SIGKILL);
  waitpid(live_owner, nullptr, 0);
  if (status == -1) {
    kill(left, SIGKILL);
    waitpid(left, nullptr, 0);
  }
  for (const std::string& name :
       {dead + "-sw", dead + "-h0", live, mine, other}) {
    if (NamespaceExists(name)) {
      RunCommand({"ip", "netns", "del", name}).IgnoreError();
    }
  }
}

}  // namespace
}  // namespace multihost
}  // namespace chunkzero
