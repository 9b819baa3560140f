#include "tests/multihost/netns_testbed.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/multihost/subprocess.h"

namespace chunkzero {
namespace multihost {

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
  char path[] = "/tmp/cz-delay-link.XXXXXX";
  const int fd = mkstemp(path);
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
