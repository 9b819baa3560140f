// Which of this host's addresses a rank listens on and tells its peers
// (GlooOptions::hostname), for hosts with several networks.
//
//   InterfaceAddress("eth1");                  // "10.0.1.7"
//   LocalAddressToward("10.0.0.1", 6379);      // the source address the
//                                              // kernel routes 10.0.0.1 by
//
// A rank that advertised loopback could be reached only from its own host,
// and one that advertised the wrong network's address not at all: with
// ranks on several hosts, name the interface (--interface, or
// GLOO_SOCKET_IFNAME as Gloo's users know it), or let the route to the
// rendezvous server decide, which is right whenever the peers share that
// network with the server.
#ifndef CHUNKZERO_COMM_NET_BIND_ADDRESS_H_
#define CHUNKZERO_COMM_NET_BIND_ADDRESS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace chunkzero {
namespace comm {

// The first IPv4 address of the network interface `name`, else its first
// IPv6 address that is not link-local. NotFound naming the interface and
// listing the interfaces that have an address, if it has none or does not
// exist.
[[nodiscard]] absl::StatusOr<std::string> InterfaceAddress(
    absl::string_view name);

// The local address of the route to host:port: a UDP socket is "connected"
// (nothing is sent) and asked for its own address. Unavailable naming the
// host if it does not resolve or no route reaches it.
[[nodiscard]] absl::StatusOr<std::string> LocalAddressToward(
    const std::string& host, int port);

// True for 127.0.0.0/8 and ::1 (numeric addresses only).
bool IsLoopbackAddress(absl::string_view address);

}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_NET_BIND_ADDRESS_H_
