#include "comm/rendezvous/tcp_store_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <list>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/thread.h"
#include "comm/rendezvous/tcp_store_wire.h"

namespace chunkzero {
namespace comm {
namespace {

namespace wire = tcp_store_wire;

std::string ErrnoText(int error) { return std::strerror(error); }

// A socket on every interface at `port`: dual-stack IPv6 where the host has
// IPv6, else IPv4. Returns the descriptor or -errno.
int ListenOnEveryInterface(int port) {
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  const int one = 1;
  if (fd >= 0) {
    const int zero = 0;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in6 address{};
    address.sin6_family = AF_INET6;
    address.sin6_addr = in6addr_any;
    address.sin6_port = htons(static_cast<uint16_t>(port));
    if (bind(fd, reinterpret_cast<const sockaddr*>(&address),
             sizeof(address)) == 0 &&
        listen(fd, SOMAXCONN) == 0) {
      return fd;
    }
    const int error = errno;
    close(fd);
    // In use is in use on IPv4 too; only a host without IPv6 falls back.
    if (error != EAFNOSUPPORT && error != EADDRNOTAVAIL) return -error;
  }
  fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -errno;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) !=
          0 ||
      listen(fd, SOMAXCONN) != 0) {
    const int error = errno;
    close(fd);
    return -error;
  }
  return fd;
}

int BoundPort(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    return -1;
  }
  if (address.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&address)->sin6_port);
  }
  return ntohs(reinterpret_cast<const sockaddr_in*>(&address)->sin_port);
}

struct Connection {
  explicit Connection(int fd) : fd(fd) {}
  int fd;
  std::string in;
  std::string out;
  // After a kBadRequest: hang up once `out` has gone.
  bool closing = false;

  // The bytes it holds in flight: a request half received, answers not
  // yet taken.
  size_t held() const { return in.size() + out.size(); }
};

// The server's keys and values, and the bytes they take.
struct Stored {
  std::map<std::string, std::string> data;
  size_t bytes = 0;
};

// Answers one request against `stored`, which may hold `max_bytes`.
std::string Answer(const wire::Frame& request, Stored& stored, size_t max_bytes,
                   bool* bad) {
  std::map<std::string, std::string>& data = stored.data;
  auto bad_request = [&](std::string message) {
    *bad = true;
    return wire::EncodeFrame(wire::kBadRequest, {std::move(message)});
  };
  switch (request.code) {
    case wire::kSet: {
      if (request.parts.size() != 2) {
        return bad_request(absl::StrCat("set takes a key and a value, got ",
                                        request.parts.size(), " parts"));
      }
      if (data.count(request.parts[0]) > 0) {
        return wire::EncodeFrame(wire::kExists, {});
      }
      const size_t bytes = request.parts[0].size() + request.parts[1].size();
      if (bytes > max_bytes - std::min(max_bytes, stored.bytes)) {
        return bad_request(
            absl::StrCat("the store holds ", stored.bytes, " bytes; ", bytes,
                         " more would pass its limit of ", max_bytes));
      }
      data.emplace(request.parts[0], request.parts[1]);
      stored.bytes += bytes;
      return wire::EncodeFrame(wire::kOk, {});
    }
    case wire::kGet: {
      if (request.parts.size() != 1) {
        return bad_request(absl::StrCat("get takes one key, got ",
                                        request.parts.size(), " parts"));
      }
      auto it = data.find(request.parts[0]);
      if (it == data.end()) return wire::EncodeFrame(wire::kMissing, {});
      return wire::EncodeFrame(wire::kOk, {it->second});
    }
    case wire::kCheck: {
      for (const std::string& key : request.parts) {
        if (data.count(key) == 0) return wire::EncodeFrame(wire::kMissing, {});
      }
      return wire::EncodeFrame(wire::kOk, {});
    }
    default:
      return bad_request(
          absl::StrCat("unknown request code ", int{request.code}));
  }
}

// Moves every complete request out of `c.in` and queues its answer. Stops
// at the first malformed one (the connection is then closing).
void AnswerBuffered(Connection& c, Stored& stored, size_t max_bytes) {
  size_t used = 0;
  while (!c.closing && c.in.size() - used >= wire::kLengthBytes) {
    absl::string_view rest = absl::string_view(c.in).substr(used);
    absl::StatusOr<size_t> length =
        wire::DecodeBodyLength(rest.substr(0, wire::kLengthBytes));
    if (!length.ok()) {
      c.out += wire::EncodeFrame(wire::kBadRequest,
                                 {std::string(length.status().message())});
      c.closing = true;
      break;
    }
    if (rest.size() < wire::kLengthBytes + *length) break;
    absl::StatusOr<wire::Frame> request =
        wire::DecodeBody(rest.substr(wire::kLengthBytes, *length));
    used += wire::kLengthBytes + *length;
    if (!request.ok()) {
      c.out += wire::EncodeFrame(wire::kBadRequest,
                                 {std::string(request.status().message())});
      c.closing = true;
      break;
    }
    bool bad = false;
    c.out += Answer(*request, stored, max_bytes, &bad);
    if (bad) c.closing = true;
  }
  c.in.erase(0, used);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(
    int port, size_t max_held_bytes) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous store: port ", port, " is not in [0, 65535]"));
  }
  const int fd = ListenOnEveryInterface(port);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat(
        "rendezvous store: cannot listen on port ", port, ": ", ErrnoText(-fd),
        -fd == EADDRINUSE ? " (another job, or another program, "
                            "holds it; choose another port)"
                          : ""));
  }
  int wake[2];
  if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    const int error = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("rendezvous store: pipe: ", ErrnoText(error)));
  }
  std::unique_ptr<TcpStoreServer> server(
      new TcpStoreServer(fd, BoundPort(fd), wake[0], wake[1], max_held_bytes));
  absl::StatusOr<std::thread> thread = StartThread(
      absl::StrCat("the rendezvous store server on port ", server->port()),
      [s = server.get()] { s->Serve(); });
  if (!thread.ok()) return thread.status();
  server->thread_ = *std::move(thread);
  return server;
}

TcpStoreServer::TcpStoreServer(int listen_fd, int port, int wake_read,
                               int wake_write, size_t max_held_bytes)
    : listen_fd_(listen_fd),
      port_(port),
      wake_read_(wake_read),
      wake_write_(wake_write),
      max_held_bytes_(max_held_bytes) {}

TcpStoreServer::~TcpStoreServer() {
  const char byte = 0;
  // The pipe is empty until now, so the write cannot block or fail short.
  while (write(wake_write_, &byte, 1) < 0 && errno == EINTR) {
  }
  if (thread_.joinable()) thread_.join();
  close(listen_fd_);
  close(wake_read_);
  close(wake_write_);
}

void TcpStoreServer::Serve() {
  Stored stored;
  std::list<Connection> connections;
  std::vector<pollfd> fds;
  std::vector<Connection*> polled;
  absl::Time accept_again = absl::InfinitePast();
  char buffer[64 * 1024];
  while (true) {
    fds.clear();
    polled.clear();
    fds.push_back({wake_read_, POLLIN, 0});
    // Out of descriptors, accept() fails while the listener stays readable:
    // leave it alone for a while instead of spinning.
    const bool accepting = absl::Now() >= accept_again;
    fds.push_back({listen_fd_, static_cast<short>(accepting ? POLLIN : 0), 0});
    for (Connection& c : connections) {
      // A client that does not read its answers gets no more of them.
      short events =
          c.closing || c.out.size() > wire::kMaxBodyBytes ? 0 : POLLIN;
      if (!c.out.empty()) events |= POLLOUT;
      fds.push_back({c.fd, events, 0});
      polled.push_back(&c);
    }
    if (poll(fds.data(), fds.size(), accepting ? -1 : 100) < 0) {
      if (errno == EINTR) continue;
      break;  // Cannot happen with valid descriptors; stop serving.
    }
    if (fds[0].revents != 0) break;
    if (fds[1].revents & POLLIN) {
      const int fd =
          accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) {
        const int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        connections.emplace_back(fd);
      } else if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
                 errno == ENOMEM) {
        accept_again = absl::Now() + absl::Milliseconds(100);
      }
    }
    for (size_t i = 0; i < polled.size(); ++i) {
      Connection& c = *polled[i];
      const short revents = fds[i + 2].revents;
      bool hang_up = false;
      if (revents & POLLIN) {
        const ssize_t n = read(c.fd, buffer, sizeof(buffer));
        if (n > 0) {
          c.in.append(buffer, static_cast<size_t>(n));
          AnswerBuffered(c, stored, max_held_bytes_);
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          hang_up = true;
        }
      } else if (revents & (POLLERR | POLLHUP | POLLNVAL)) {
        hang_up = true;
      }
      if (!hang_up && (revents & POLLOUT) && !c.out.empty()) {
        const ssize_t n = send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
        if (n > 0) {
          c.out.erase(0, static_cast<size_t>(n));
        } else if (errno != EAGAIN && errno != EINTR) {
          hang_up = true;
        }
      }
      if (c.closing && c.out.empty()) hang_up = true;
      if (hang_up) c.fd = -1 - c.fd;  // Marked; closed below.
    }
    // Past the cap on what is in flight (the values have their own), the
    // connection holding the most goes: one that sends without reading, or
    // sends half a request and stops.
    size_t held = 0;
    for (const Connection& c : connections) held += c.held();
    while (held > max_held_bytes_) {
      Connection* biggest = nullptr;
      for (Connection& c : connections) {
        if (c.fd >= 0 && (biggest == nullptr || c.held() > biggest->held())) {
          biggest = &c;
        }
      }
      if (biggest == nullptr || biggest->held() == 0) break;
      held -= biggest->held();
      biggest->in.clear();
      biggest->out.clear();
      biggest->fd = -1 - biggest->fd;
    }
    for (auto it = connections.begin(); it != connections.end();) {
      if (it->fd < 0) {
        close(-1 - it->fd);
        it = connections.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (Connection& c : connections) close(c.fd);
}

}  // namespace comm
}  // namespace chunkzero
