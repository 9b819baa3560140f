#include "comm/net/host_port.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"

namespace chunkzero {
namespace comm {
namespace gloo_internal {

absl::StatusOr<HostPort> SplitHostPort(absl::string_view text) {
  absl::string_view host = text;
  absl::string_view port;
  if (absl::ConsumePrefix(&host, "[")) {
    const size_t close = host.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          "an IPv6 host opened with '[' has no ']'");
    }
    absl::string_view after = host.substr(close + 1);
    host = host.substr(0, close);
    if (!after.empty() && !absl::ConsumePrefix(&after, ":")) {
      return absl::InvalidArgumentError("after ']' comes ':PORT' or nothing");
    }
    port = after;
  } else if (const size_t colon = host.rfind(':');
             colon != absl::string_view::npos) {
    port = host.substr(colon + 1);
    host = host.substr(0, colon);
    if (absl::StrContains(host, ':')) {
      return absl::InvalidArgumentError(
          "write an IPv6 host in brackets: [::1]:PORT");
    }
  }
  if (host.empty()) return absl::InvalidArgumentError("no host");
  return HostPort{std::string(host), std::string(port)};
}

}  // namespace gloo_internal
}  // namespace comm
}  // namespace chunkzero
