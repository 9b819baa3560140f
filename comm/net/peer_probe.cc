#include "comm/net/peer_probe.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "comm/internal/deadline.h"
#include "comm/internal/gloo_timeout.h"
#include "comm/net/host_port.h"
#include "gloo/rendezvous/store.h"

namespace chunkzero {
namespace comm {
namespace gloo_internal {
namespace {

constexpr char kKeyPrefix[] = "chunkzero_gloo_probe_";

// "host:port" as Open() wrote it (an IPv6 host in brackets).
std::pair<std::string, std::string> SplitAddress(const std::string& address) {
  absl::StatusOr<HostPort> split = SplitHostPort(address);
  if (!split.ok()) return {address, ""};  // Not one of ours: fails to resolve.
  return {split->host, split->port};
}

// Starts a non-blocking connect to `address`; -1 if it failed at once,
// with *reach saying how: refused, silent (no route), or unknown (a failure
// here: no descriptor, no name).
int StartConnect(const std::string& address, PeerProbe::Reach* reach) {
  *reach = PeerProbe::Reach::kUnknown;
  const auto [host, port] = SplitAddress(address);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0) {
    // A name rather than an address: resolve it (the probe is rare).
    hints.ai_flags = AI_NUMERICSERV;
    if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0) {
      return -1;
    }
  }
  const int fd =
      socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(found);
    return -1;
  }
  if (connect(fd, found->ai_addr, found->ai_addrlen) != 0 &&
      errno != EINPROGRESS) {
    *reach = errno == ECONNREFUSED ? PeerProbe::Reach::kRefuses
             : errno == ENETUNREACH || errno == EHOSTUNREACH
                 ? PeerProbe::Reach::kSilent
                 : PeerProbe::Reach::kUnknown;
    close(fd);
    freeaddrinfo(found);
    return -1;
  }
  freeaddrinfo(found);
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PeerProbe>> PeerProbe::Open(
    int rank, int size, const std::string& hostname,
    gloo::rendezvous::Store& store, absl::Time deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (const int error = getaddrinfo(hostname.c_str(), "0", &hints, &found);
      error != 0) {
    return absl::UnavailableError(
        absl::StrCat("probe port on ", hostname, ": ", gai_strerror(error)));
  }
  const int fd =
      socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0 || bind(fd, found->ai_addr, found->ai_addrlen) != 0 ||
      listen(fd, SOMAXCONN) != 0) {
    const int error = errno;
    if (fd >= 0) close(fd);
    freeaddrinfo(found);
    return absl::UnavailableError(
        absl::StrCat("probe port on ", hostname, ": ", std::strerror(error)));
  }
  freeaddrinfo(found);
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  const int port =
      bound.ss_family == AF_INET6
          ? ntohs(reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port)
          : ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
  const std::string mine = absl::StrCat(absl::StrContains(hostname, ':')
                                            ? absl::StrCat("[", hostname, "]")
                                            : hostname,
                                        ":", port);
  std::vector<std::string> addresses(size);
  addresses[rank] = mine;
  try {
    store.set(absl::StrCat(kKeyPrefix, rank),
              std::vector<char>(mine.begin(), mine.end()));
    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      const std::string key = absl::StrCat(kKeyPrefix, r);
      store.wait({key}, comm_internal::MillisecondsLeft(deadline));
      const std::vector<char> theirs = store.get(key);
      addresses[r] = std::string(theirs.begin(), theirs.end());
    }
  } catch (const std::exception& e) {
    close(fd);
    return absl::Status(comm_internal::IsGlooTimeoutMessage(e.what())
                            ? absl::StatusCode::kDeadlineExceeded
                            : absl::StatusCode::kUnavailable,
                        absl::StrCat("exchanging probe addresses: ", e.what()));
  }
  return std::unique_ptr<PeerProbe>(
      new PeerProbe(rank, fd, std::move(addresses)));
}

PeerProbe::~PeerProbe() { close(listen_fd_); }

std::vector<PeerProbe::Finding> PeerProbe::Probe(absl::Duration wait) {
  // Earlier probes' connections to this rank: close them.
  while (true) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) break;
    close(fd);
  }
  std::vector<Finding> findings;
  std::vector<pollfd> fds;
  std::vector<size_t> which;
  for (int r = 0; r < static_cast<int>(addresses_.size()); ++r) {
    if (r == rank_) continue;
    findings.push_back({r, addresses_[r], Reach::kSilent});
    Reach reach = Reach::kUnknown;
    const int fd = StartConnect(addresses_[r], &reach);
    if (fd < 0) {
      findings.back().reach = reach;
      continue;
    }
    fds.push_back({fd, POLLOUT, 0});
    which.push_back(findings.size() - 1);
  }
  const absl::Time deadline = absl::Now() + wait;
  size_t open = fds.size();
  while (open > 0) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    const int64_t ms =
        absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1)));
    if (poll(fds.data(), fds.size(), static_cast<int>(ms)) <= 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      int error = 0;
      socklen_t length = sizeof(error);
      getsockopt(fds[i].fd, SOL_SOCKET, SO_ERROR, &error, &length);
      Finding& f = findings[which[i]];
      if (error == 0) {
        f.reach = Reach::kAnswers;
      } else if (error == ECONNREFUSED) {
        f.reach = Reach::kRefuses;
      } else if (error != ENETUNREACH && error != EHOSTUNREACH &&
                 error != ETIMEDOUT) {
        f.reach = Reach::kUnknown;
      }
      close(fds[i].fd);
      fds[i].fd = -1;
      --open;
    }
  }
  for (pollfd& p : fds) {
    if (p.fd >= 0) close(p.fd);
  }
  return findings;
}

std::string PeerProbe::Describe(absl::Duration wait) {
  // Silent ranks grouped by host, in rank order.
  std::vector<std::pair<std::string, std::vector<int>>> silent;
  std::vector<std::string> gone;
  for (const Finding& f : Probe(wait)) {
    const std::string host = SplitAddress(f.address).first;
    if (f.reach == Reach::kUnknown) {
      gone.push_back(absl::StrCat("rank ", f.rank, " (", host,
                                  ") could not be probed from here"));
    } else if (f.reach == Reach::kRefuses) {
      gone.push_back(absl::StrCat("rank ", f.rank, "'s process is gone (", host,
                                  " refuses)"));
    } else if (f.reach == Reach::kSilent) {
      auto it = silent.begin();
      while (it != silent.end() && it->first != host) ++it;
      if (it == silent.end()) {
        silent.push_back({host, {}});
        it = silent.end() - 1;
      }
      it->second.push_back(f.rank);
    }
  }
  std::vector<std::string> parts;
  for (const auto& [host, ranks] : silent) {
    parts.push_back(absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ",
                                 absl::StrJoin(ranks, ", "), " (", host,
                                 ") cannot be reached"));
  }
  parts.insert(parts.end(), gone.begin(), gone.end());
  if (parts.empty()) {
    return "every peer's host answers (so a rank stopped, or the network "
           "between some hosts is down)";
  }
  return absl::StrJoin(parts, "; ");
}

}  // namespace gloo_internal
}  // namespace comm
}  // namespace chunkzero
