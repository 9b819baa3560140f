#include "comm/rendezvous/tcp_store.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "comm/internal/deadline.h"
#include "comm/rendezvous/store_wait.h"
#include "comm/rendezvous/tcp_store_wire.h"
#include "gloo/common/error.h"

namespace chunkzero {
namespace comm {
namespace {

namespace wire = tcp_store_wire;

// One connect attempt to `address`, bounded by `deadline`. Returns the
// connected (blocking) descriptor or -errno.
int ConnectOnce(const addrinfo& address, absl::Time deadline) {
  const int fd = socket(address.ai_family,
                        address.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                        address.ai_protocol);
  if (fd < 0) return -errno;
  int error = 0;
  if (connect(fd, address.ai_addr, address.ai_addrlen) != 0) {
    error = errno;
    if (error == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      const int64_t ms = comm_internal::MillisecondsLeft(deadline).count();
      const int ready = poll(&p, 1, static_cast<int>(std::max<int64_t>(ms, 1)));
      if (ready == 0) {
        error = ETIMEDOUT;
      } else if (ready < 0) {
        error = errno;
      } else {
        socklen_t length = sizeof(error);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
      }
    }
  }
  if (error != 0) {
    close(fd);
    return -error;
  }
  const int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

}  // namespace

struct TcpStore::Reply {
  uint8_t code = 0;
  std::vector<std::string> parts;
};

absl::StatusOr<std::unique_ptr<TcpStore>> TcpStore::Connect(
    const std::string& host, int port, absl::Duration timeout) {
  const std::string address = absl::StrCat("tcp://", host, ":", port);
  if (port < 1 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rendezvous store ", address, ": port is not in [1, 65535]"));
  }
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous store ", address, ": timeout ",
                     absl::FormatDuration(timeout), " is not positive"));
  }
  const absl::Time deadline = absl::Now() + timeout;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  if (const int error =
          getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
      error != 0) {
    return absl::UnavailableError(absl::StrCat("rendezvous store ", address,
                                               ": cannot resolve ", host, ": ",
                                               gai_strerror(error)));
  }
  // Until rank 0 listens its port refuses connections: try every address
  // the name has, again every 100 ms, until the deadline.
  int last_error = 0;
  int fd = -1;
  comm_internal::RetryUntil(deadline, absl::Milliseconds(100), [&] {
    for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
      const int result = ConnectOnce(*a, deadline);
      if (result >= 0) {
        fd = result;
      } else {
        last_error = -result;
      }
    }
    return fd >= 0;
  });
  freeaddrinfo(found);
  if (fd < 0) {
    return absl::DeadlineExceededError(absl::StrCat(
        "rendezvous store ", address, ": no server answered within ",
        absl::FormatDuration(timeout),
        " (last attempt: ", std::strerror(last_error),
        "); is rank 0 running, and is this its address (MASTER_ADDR, "
        "MASTER_PORT)?"));
  }
  // Every send and receive after this is bounded by the timeout.
  const timeval tv = absl::ToTimeval(timeout);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  return std::unique_ptr<TcpStore>(new TcpStore(fd, address, timeout));
}

TcpStore::~TcpStore() { close(fd_); }

TcpStore::Reply TcpStore::Call(uint8_t code,
                               const std::vector<std::string>& parts) {
  if (!broken_.empty()) {
    throw gloo::IoException(absl::StrCat("rendezvous store ", address_,
                                         ": unusable after: ", broken_));
  }
  auto fail = [&](absl::string_view what, int error) {
    // "timed out" lets the process groups report a DeadlineExceeded.
    const bool timed_out = error == EAGAIN || error == EWOULDBLOCK;
    // A request half sent or an answer half read leaves the stream out of
    // step: no later request may use it.
    broken_ = absl::StrCat(
        what, timed_out    ? absl::StrCat(": timed out after ",
                                          absl::FormatDuration(timeout_))
              : error != 0 ? absl::StrCat(": ", std::strerror(error))
                           : std::string());
    throw gloo::IoException(
        absl::StrCat("rendezvous store ", address_, ": ", broken_));
  };
  size_t bytes = 0;
  for (const std::string& p : parts) bytes += p.size() + 4;
  if (bytes > wire::kMaxBodyBytes - 5) {
    // Refused before anything is sent, so the connection stays usable.
    throw gloo::IoException(absl::StrCat(
        "rendezvous store ", address_, ": a request of ", bytes,
        " bytes is over the store's limit of ", wire::kMaxBodyBytes));
  }
  const std::string request = wire::EncodeFrame(code, parts);
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n =
        send(fd_, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("sending a request", errno);
    }
    sent += static_cast<size_t>(n);
  }
  auto receive = [&](size_t bytes) {
    std::string out(bytes, '\0');
    for (size_t got = 0; got < bytes;) {
      const ssize_t n = recv(fd_, out.data() + got, bytes - got, 0);
      if (n == 0) fail("the server closed the connection", 0);
      if (n < 0) {
        if (errno == EINTR) continue;
        fail("waiting for an answer", errno);
      }
      got += static_cast<size_t>(n);
    }
    return out;
  };
  absl::StatusOr<size_t> length =
      wire::DecodeBodyLength(receive(wire::kLengthBytes));
  if (!length.ok()) fail(length.status().message(), 0);
  absl::StatusOr<wire::Frame> frame = wire::DecodeBody(receive(*length));
  if (!frame.ok()) fail(frame.status().message(), 0);
  if (frame->code == wire::kBadRequest) {
    fail(absl::StrCat("the server refused a request: ",
                      absl::StrJoin(frame->parts, "; ")),
         0);
  }
  return Reply{frame->code, std::move(frame->parts)};
}

void TcpStore::set(const std::string& key, const std::vector<char>& data) {
  const Reply reply =
      Call(wire::kSet, {key, std::string(data.begin(), data.end())});
  if (reply.code == wire::kExists) {
    throw gloo::IoException(absl::StrCat("rendezvous store ", address_,
                                         ": key '", key, "' already set"));
  }
  if (reply.code != wire::kOk) {
    throw gloo::IoException(absl::StrCat("rendezvous store ", address_,
                                         ": unexpected answer ",
                                         int{reply.code}, " to set"));
  }
}

std::vector<char> TcpStore::get(const std::string& key) {
  wait({key});
  const Reply reply = Call(wire::kGet, {key});
  if (reply.code != wire::kOk || reply.parts.size() != 1) {
    throw gloo::IoException(absl::StrCat("rendezvous store ", address_,
                                         ": key '", key,
                                         "' vanished after it was set"));
  }
  return std::vector<char>(reply.parts[0].begin(), reply.parts[0].end());
}

bool TcpStore::Check(const std::vector<std::string>& keys) {
  const Reply reply = Call(wire::kCheck, keys);
  return reply.code == wire::kOk;
}

void TcpStore::wait(const std::vector<std::string>& keys) {
  wait(keys, std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout_)));
}

void TcpStore::wait(const std::vector<std::string>& keys,
                    const std::chrono::milliseconds& timeout) {
  PollForKeys(keys, timeout, absl::StrCat("rendezvous store ", address_),
              [&] { return Check(keys); });
}

}  // namespace comm
}  // namespace chunkzero
