// SplitHostPort: "HOST:PORT" taken apart, an IPv6 host written in brackets
// ("[::1]:29500"), as every address in comm/gloo is written (rendezvous
// stores, probe ports).
//
//   absl::StatusOr<HostPort> a = SplitHostPort("[fe80::1]:6379");
//   // a->host == "fe80::1", a->port == "6379"
//
// The port is text, unchecked, and may be empty ("host" or "[::1]"): the
// callers decide on defaults and ranges.
#ifndef CHUNKZERO_COMM_NET_HOST_PORT_H_
#define CHUNKZERO_COMM_NET_HOST_PORT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace chunkzero {
namespace comm {
namespace gloo_internal {

struct HostPort {
  std::string host;  // Without brackets.
  std::string port;  // As written; empty if none.
};

// InvalidArgument saying what is wrong (no prefix: the caller names the
// flag or address): a '[' with no ']', something other than ":PORT" after
// ']', an IPv6 host without brackets, or no host.
absl::StatusOr<HostPort> SplitHostPort(absl::string_view text);

}  // namespace gloo_internal
}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_NET_HOST_PORT_H_
