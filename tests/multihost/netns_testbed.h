// NetnsTestbed: several "hosts" on this machine for tests of what crosses a
// network. Each host is a network namespace with its own loopback and one
// interface, eth0, at 10.233.0.(i+1)/24, wired by a veth pair to a bridge
// in a switch namespace of its own; nothing is attached to the machine's
// own network, so nothing the test sends can leave it.
//
//   TestbedOptions options;
//   options.hosts = 3;
//   absl::StatusOr<std::unique_ptr<NetnsTestbed>> bed =
//       NetnsTestbed::Create(options);
//   if (!bed.ok()) GTEST_SKIP() << bed.status();  // not root, no `ip`, ...
//   Child::Start((*bed)->OnHost(1, {"train", "--rank=1"}), log);
//   (*bed)->SetLink(2, /*up=*/false);               // host 2 drops off
//
// A command OnHost() runs in the host's namespace with a private /dev/shm
// (a tmpfs of its own), so that processes on different hosts cannot meet in
// shared memory either: the host is a host to Gloo too.
//
// Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) and iproute2's `ip`. The
// namespaces are named after this process (czmh<pid>-...), so concurrent
// tests do not collide, and are deleted by the destructor. If the process
// dies first (SIGKILL), the next Create, of any process, removes them.
#ifndef CHUNKZERO_TESTS_MULTIHOST_NETNS_TESTBED_H_
#define CHUNKZERO_TESTS_MULTIHOST_NETNS_TESTBED_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "tests/multihost/subprocess.h"

namespace chunkzero {
namespace multihost {

struct TestbedOptions {
  int hosts = 3;
  // Hosts whose link delays every frame they send by this much (as netem's
  // `delay` on their eth0 would): a delay_link process (delay_link.cc)
  // stands in for their veth pair.
  std::map<int, absl::Duration> latency;
  // The delay_link binary, needed when `latency` is not empty.
  std::string delay_link;
};

class NetnsTestbed {
 public:
  // FailedPrecondition saying why when namespaces cannot be made here (not
  // root, no `ip`, no veth, bridge or TAP support); what was made is
  // removed.
  //
  // First removes what testbeds whose owner is gone left behind, their
  // owner being the process whose pid is in their names (czmh<pid>-...)
  // and gone when no process has that pid, or it is a zombie, or it is
  // this process and none of its testbeds is alive: the processes still
  // running in their namespaces (SIGKILL), the namespaces with the links in
  // them, and the owner's files /tmp/czmh<pid>-* (TempPath). What a live
  // process named after itself is never touched.
  static absl::StatusOr<std::unique_ptr<NetnsTestbed>> Create(
      const TestbedOptions& options);
  ~NetnsTestbed();
  NetnsTestbed(const NetnsTestbed&) = delete;
  NetnsTestbed& operator=(const NetnsTestbed&) = delete;

  int hosts() const { return hosts_; }
  // "10.233.0.(i+1)".
  std::string address(int host) const;
  // The argv that runs `argv` on `host`.
  std::vector<std::string> OnHost(int host,
                                  const std::vector<std::string>& argv) const;
  // `ip link set eth0 up|down` on the host.
  absl::Status SetLink(int host, bool up) const;

  // A mkstemp() template for a file of this testbed's owner, named after
  // it ("/tmp/czmh<pid>-WHAT.XXXXXX"), so that a later Create removes it
  // if the owner dies without removing it itself.
  std::string TempPath(absl::string_view what) const;

 private:
  NetnsTestbed(std::string prefix, int hosts);
  std::string HostNamespace(int host) const;
  std::string SwitchNamespace() const;
  // Joins the host's eth0 to switch port `port`: a veth pair, or a
  // delay_link with `latency`.
  absl::Status Wire(int host, const std::string& port, absl::Duration latency,
                    const std::string& delay_link);

  const std::string prefix_;
  const int hosts_;
  // The delay_link processes, killed before the namespaces go.
  std::vector<Child> links_;
};

}  // namespace multihost
}  // namespace chunkzero

#endif  // CHUNKZERO_TESTS_MULTIHOST_NETNS_TESTBED_H_
