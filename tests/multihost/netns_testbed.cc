#include "tests/multihost/netns_testbed.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "tests/multihost/subprocess.h"

namespace chunkzero {
namespace multihost {
namespace {

// Where `ip netns` keeps the names of namespaces.
constexpr char kNetnsDir[] = "/var/run/netns";
// Where the testbeds' owners keep files named after them.
constexpr char kTempDir[] = "/tmp";

// The testbeds of this process now alive: while there is one, the names
// made after this process are its.
std::atomic<int> g_live_testbeds{0};

// The pid in a testbed's name, "czmh<pid>-..."; -1 for any other name.
pid_t OwnerOf(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, "czmh")) return -1;
  const size_t dash = name.find('-');
  if (dash == 0 || dash == absl::string_view::npos) return -1;
  const absl::string_view digits = name.substr(0, dash);
  for (const char c : digits) {
    if (!absl::ascii_isdigit(c)) return -1;
  }
  int pid = -1;
  if (!absl::SimpleAtoi(digits, &pid) || pid <= 0) return -1;
  return pid;
}

// Whether the process that named a testbed after itself is gone (or a
// zombie), so that nobody uses what it left. A pid reused since counts as
// alive: its testbeds are then left for a later start. This process's own
// pid is gone when no testbed of it is alive: an earlier process with the
// same pid made them.
bool OwnerIsGone(pid_t owner) {
  if (owner == getpid()) return g_live_testbeds.load() == 0;
  if (kill(owner, 0) != 0) return errno == ESRCH;
  const std::string stat =
      ReadFileOrEmpty(absl::StrCat("/proc/", owner, "/stat"));
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() &&
         stat[paren + 2] == 'Z';
}

bool SameFile(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// SIGKILLs every process whose network namespace is `ns` (a path under
// kNetnsDir): a host's command, still running after its owner died.
void KillProcessesIn(const std::string& ns) {
  struct stat target {};
  if (stat(ns.c_str(), &target) != 0) return;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return;
  while (const dirent* entry = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(entry->d_name, &pid) || pid <= 1 || pid == getpid()) {
      continue;
    }
    const std::string net = absl::StrCat("/proc/", pid, "/ns/net");
    struct stat theirs {};
    if (stat(net.c_str(), &theirs) != 0 || !SameFile(theirs, target)) {
      continue;
    }
    // Through a pidfd, checked again once it is open, so that a pid reused
    // in between is not hit.
    const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    if (pidfd < 0) {
      if (errno == ENOSYS) kill(pid, SIGKILL);
      continue;
    }
    if (stat(net.c_str(), &theirs) == 0 && SameFile(theirs, target)) {
      syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0);
    }
    close(pidfd);
  }
  closedir(proc);
}

// The names in `dir` whose owner (OwnerOf) is gone.
std::vector<std::string> StaleNames(const char* dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir);
  if (d == nullptr) return names;
  while (const dirent* entry = readdir(d)) {
    const pid_t owner = OwnerOf(entry->d_name);
    if (owner > 0 && OwnerIsGone(owner)) names.emplace_back(entry->d_name);
  }
  closedir(d);
  return names;
}

// Removes what testbeds whose owner is gone left behind: the processes
// still running in their namespaces, the namespaces (and with them the
// bridge, veth pairs and TAP devices in them), and their owner's files in
// kTempDir. Best effort: what cannot be removed is left for a later start.
void RemoveStaleTestbeds() {
  for (const std::string& name : StaleNames(kNetnsDir)) {
    KillProcessesIn(absl::StrCat(kNetnsDir, "/", name));
    RunCommand({"ip", "netns", "del", name}).IgnoreError();
  }
  for (const std::string& name : StaleNames(kTempDir)) {
    const std::string path = absl::StrCat(kTempDir, "/", name);
    struct stat file {};
    if (lstat(path.c_str(), &file) == 0 && S_ISREG(file.st_mode)) {
      unlink(path.c_str());
    }
  }
}

}  // namespace

NetnsTestbed::NetnsTestbed(std::string prefix, int hosts)
    : prefix_(std::move(prefix)), hosts_(hosts) {
  ++g_live_testbeds;
}

absl::StatusOr<std::unique_ptr<NetnsTestbed>> NetnsTestbed::Create(
    const TestbedOptions& options) {
  const int hosts = options.hosts;
  if (geteuid() != 0) {
    return absl::FailedPreconditionError(
        "network namespaces need root; this test runs as root in CI");
  }
  if (hosts < 1 || hosts > 250) {
    return absl::InvalidArgumentError(
        absl::StrCat("hosts ", hosts, " is not in [1, 250]"));
  }
  RemoveStaleTestbeds();
  // Deletes whatever part was made if a later step fails.
  std::unique_ptr<NetnsTestbed> bed(
      new NetnsTestbed(absl::StrCat("czmh", getpid()), hosts));
  const std::string sw = bed->SwitchNamespace();
  auto fail = [](const absl::Status& s) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot make the test's network namespaces here: ", s.message()));
  };
  std::vector<std::vector<std::string>> steps = {
      {"ip", "netns", "add", sw},
      {"ip", "-n", sw, "link", "add", "br0", "type", "bridge"},
      {"ip", "-n", sw, "link", "set", "br0", "up"},
  };
  for (int i = 0; i < hosts; ++i) {
    steps.push_back({"ip", "netns", "add", bed->HostNamespace(i)});
  }
  for (const std::vector<std::string>& step : steps) {
    if (absl::Status s = RunCommand(step).status(); !s.ok()) return fail(s);
  }
  for (int i = 0; i < hosts; ++i) {
    const std::string ns = bed->HostNamespace(i);
    const std::string port = absl::StrCat("v", i);
    auto latency = options.latency.find(i);
    if (absl::Status s =
            bed->Wire(i, port,
                      latency == options.latency.end() ? absl::ZeroDuration()
                                                       : latency->second,
                      options.delay_link);
        !s.ok()) {
      return fail(s);
    }
    const std::vector<std::vector<std::string>> host = {
        {"ip", "-n", sw, "link", "set", port, "master", "br0"},
        {"ip", "-n", sw, "link", "set", port, "up"},
        {"ip", "-n", ns, "addr", "add", absl::StrCat(bed->address(i), "/24"),
         "dev", "eth0"},
        {"ip", "-n", ns, "link", "set", "lo", "up"},
        {"ip", "-n", ns, "link", "set", "eth0", "up"},
    };
    for (const std::vector<std::string>& step : host) {
      if (absl::Status s = RunCommand(step).status(); !s.ok()) return fail(s);
    }
  }
  return bed;
}

absl::Status NetnsTestbed::Wire(int host, const std::string& port,
                                absl::Duration latency,
                                const std::string& delay_link) {
  const std::string ns = HostNamespace(host);
  const std::string sw = SwitchNamespace();
  if (latency == absl::ZeroDuration()) {
    return RunCommand({"ip", "-n", sw, "link", "add", port, "type", "veth",
                       "peer", "name", "eth0", "netns", ns})
        .status();
  }
  std::string path = TempPath("delay-link");
  const int fd = mkstemp(path.data());
  if (fd < 0) return absl::UnavailableError("mkstemp for delay_link's log");
  close(fd);
  const std::string log = path;
  absl::StatusOr<Child> link =
      Child::Start({delay_link, ns, "eth0", sw, port,
                    absl::StrCat(absl::ToInt64Milliseconds(latency)), "0"},
                   log);
  if (!link.ok()) return link.status();
  links_.push_back(*std::move(link));
  // Both TAP devices exist once it says so.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!absl::StrContains(ReadFileOrEmpty(log), "ready")) {
    if (absl::Now() > deadline) {
      return absl::UnavailableError(absl::StrCat(
          delay_link, " did not make its TAP devices: ", ReadFileOrEmpty(log)));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  unlink(log.c_str());
  return absl::OkStatus();
}

NetnsTestbed::~NetnsTestbed() {
  links_.clear();
  // Deleting a namespace deletes its end of each veth pair, and with it the
  // other end.
  for (int i = 0; i < hosts_; ++i) {
    RunCommand({"ip", "netns", "del", HostNamespace(i)}).IgnoreError();
  }
  RunCommand({"ip", "netns", "del", SwitchNamespace()}).IgnoreError();
  --g_live_testbeds;
}

std::string NetnsTestbed::TempPath(absl::string_view what) const {
  return absl::StrCat(kTempDir, "/", prefix_, "-", what, ".XXXXXX");
}

std::string NetnsTestbed::HostNamespace(int host) const {
  return absl::StrCat(prefix_, "-h", host);
}

std::string NetnsTestbed::SwitchNamespace() const {
  return absl::StrCat(prefix_, "-sw");
}

std::string NetnsTestbed::address(int host) const {
  return absl::StrCat("10.233.0.", host + 1);
}

std::vector<std::string> NetnsTestbed::OnHost(
    int host, const std::vector<std::string>& argv) const {
  // `ip netns exec` runs the command in a mount namespace of its own, so
  // the tmpfs on /dev/shm is this command's alone.
  std::vector<std::string> out = {
      "ip",
      "netns",
      "exec",
      HostNamespace(host),
      "sh",
      "-c",
      "mount -t tmpfs -o size=512m czshm /dev/shm && exec \"$@\"",
      "sh"};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

absl::Status NetnsTestbed::SetLink(int host, bool up) const {
  return RunCommand({"ip", "-n", HostNamespace(host), "link", "set", "eth0",
                     up ? "up" : "down"})
      .status();
}

}  // namespace multihost
}  // namespace chunkzero
