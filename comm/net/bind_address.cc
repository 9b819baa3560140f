#include "comm/net/bind_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace chunkzero {
namespace comm {
namespace {

std::string Numeric(const sockaddr* address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(address)->sin_addr,
              text, sizeof(text));
  } else {
    inet_ntop(AF_INET6,
              &reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr, text,
              sizeof(text));
  }
  return text;
}

}  // namespace

absl::StatusOr<std::string> InterfaceAddress(absl::string_view name) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return absl::UnavailableError(absl::StrCat(
        "interface ", name, ": getifaddrs: ", std::strerror(errno)));
  }
  std::string v4, v6;
  std::set<std::string> with_addresses;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    with_addresses.insert(i->ifa_name);
    if (name != i->ifa_name) continue;
    if (family == AF_INET && v4.empty()) {
      v4 = Numeric(i->ifa_addr);
    } else if (family == AF_INET6 && v6.empty() &&
               !IN6_IS_ADDR_LINKLOCAL(
                   &reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)
                        ->sin6_addr)) {
      v6 = Numeric(i->ifa_addr);
    }
  }
  freeifaddrs(list);
  if (!v4.empty()) return v4;
  if (!v6.empty()) return v6;
  return absl::NotFoundError(absl::StrCat(
      "interface ", name,
      with_addresses.count(std::string(name)) != 0
          ? " has only link-local addresses"
          : " has no address or does not exist",
      "; interfaces with addresses: ", absl::StrJoin(with_addresses, ", ")));
}

absl::StatusOr<std::string> LocalAddressToward(const std::string& host,
                                               int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  if (const int error =
          getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
      error != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", host, ": ", gai_strerror(error)));
  }
  std::string local;
  int last_error = 0;
  for (addrinfo* a = found; a != nullptr && local.empty(); a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      last_error = errno;
      continue;
    }
    sockaddr_storage mine{};
    socklen_t length = sizeof(mine);
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &length) == 0) {
      local = Numeric(reinterpret_cast<const sockaddr*>(&mine));
    } else {
      last_error = errno;
    }
    close(fd);
  }
  freeaddrinfo(found);
  if (local.empty()) {
    return absl::UnavailableError(absl::StrCat(
        "no route from this host to ", host, ": ", std::strerror(last_error)));
  }
  return local;
}

bool IsLoopbackAddress(absl::string_view address) {
  const std::string text(address);
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6{};
  return inet_pton(AF_INET6, text.c_str(), &v6) == 1 &&
         IN6_IS_ADDR_LOOPBACK(&v6);
}

}  // namespace comm
}  // namespace chunkzero
