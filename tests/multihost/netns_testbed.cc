#include "tests/multihost/netns_testbed.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "tests/multihost/subprocess.h"

namespace chunkzero {
namespace multihost {

absl::StatusOr<std::unique_ptr<NetnsTestbed>> NetnsTestbed::Create(int hosts) {
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
  std::vector<std::vector<std::string>> steps = {
      {"ip", "netns", "add", sw},
      {"ip", "-n", sw, "link", "add", "br0", "type", "bridge"},
      {"ip", "-n", sw, "link", "set", "br0", "up"},
  };
  for (int i = 0; i < hosts; ++i) {
    const std::string ns = bed->HostNamespace(i);
    const std::string port = absl::StrCat("v", i);
    std::vector<std::vector<std::string>> host = {
        {"ip", "netns", "add", ns},
        {"ip", "-n", sw, "link", "add", port, "type", "veth", "peer", "name",
         "eth0", "netns", ns},
        {"ip", "-n", sw, "link", "set", port, "master", "br0"},
        {"ip", "-n", sw, "link", "set", port, "up"},
        {"ip", "-n", ns, "addr", "add", absl::StrCat(bed->address(i), "/24"),
         "dev", "eth0"},
        {"ip", "-n", ns, "link", "set", "lo", "up"},
        {"ip", "-n", ns, "link", "set", "eth0", "up"},
    };
    steps.insert(steps.end(), host.begin(), host.end());
  }
  for (const std::vector<std::string>& step : steps) {
    absl::StatusOr<std::string> done = RunCommand(step);
    if (!done.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot make the test's network namespaces here: ",
                       done.status().message()));
    }
  }
  return bed;
}

NetnsTestbed::~NetnsTestbed() {
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

absl::Status NetnsTestbed::AddLatency(int host, absl::Duration delay) const {
  return RunCommand({"ip", "netns", "exec", HostNamespace(host), "tc", "qdisc",
                     "add", "dev", "eth0", "root", "netem", "delay",
                     absl::StrCat(absl::ToInt64Milliseconds(delay), "ms")})
      .status();
}

}  // namespace multihost
}  // namespace chunkzero
