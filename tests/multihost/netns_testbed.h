// NetnsTestbed: several "hosts" on this machine for tests of what crosses a
// network. Each host is a network namespace with its own loopback and one
// interface, eth0, at 10.233.0.(i+1)/24, wired by a veth pair to a bridge
// in a switch namespace of its own; nothing is attached to the machine's
// own network, so nothing the test sends can leave it.
//
//   absl::StatusOr<std::unique_ptr<NetnsTestbed>> bed =
//   NetnsTestbed::Create(3); if (!bed.ok()) GTEST_SKIP() << bed.status();   //
//   not root, no `ip`, ... Child::Start((*bed)->OnHost(1, {"train", ...}),
//   log);
//   (*bed)->SetLink(2, /*up=*/false);               // host 2 drops off
//
// A command OnHost() runs in the host's namespace with a private /dev/shm
// (a tmpfs of its own), so that processes on different hosts cannot meet in
// shared memory either: the host is a host to Gloo too.
//
// Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) and iproute2's `ip`. The
// namespaces are named after this process (czmh<pid>-...), so concurrent
// tests do not collide, and are deleted by the destructor.
#ifndef CHUNKZERO_TESTS_MULTIHOST_NETNS_TESTBED_H_
#define CHUNKZERO_TESTS_MULTIHOST_NETNS_TESTBED_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace chunkzero {
namespace multihost {

class NetnsTestbed {
 public:
  // FailedPrecondition saying why when namespaces cannot be made here (not
  // root, no `ip`, no veth or bridge support); what was made is removed.
  static absl::StatusOr<std::unique_ptr<NetnsTestbed>> Create(int hosts);
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
  // Delays every packet the host sends by `delay` (tc netem on its eth0).
  absl::Status AddLatency(int host, absl::Duration delay) const;

 private:
  NetnsTestbed(std::string prefix, int hosts)
      : prefix_(std::move(prefix)), hosts_(hosts) {}
  std::string HostNamespace(int host) const;
  std::string SwitchNamespace() const;

  const std::string prefix_;
  const int hosts_;
};

}  // namespace multihost
}  // namespace chunkzero

#endif  // CHUNKZERO_TESTS_MULTIHOST_NETNS_TESTBED_H_
