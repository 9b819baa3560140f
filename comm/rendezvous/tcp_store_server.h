// TcpStoreServer: the key-value server of chunkzero's TCP rendezvous store,
// which rank 0 of a job hosts at MASTER_ADDR:MASTER_PORT, as torchrun's
// ranks meet in a store rank 0 hosts. Every rank (rank 0 too) talks to it
// through a TcpStore (tcp_store.h).
//
//   absl::StatusOr<std::unique_ptr<TcpStoreServer>> server =
//       TcpStoreServer::Start(29500);
//   ... the job's ranks rendezvous through it ...
//   server->reset();  // stops serving; connected clients see a hang-up
//
// The server listens on every interface (IPv6 and IPv4 where the host has
// both) and serves from one thread: each request (tcp_store_wire.h) is
// answered in the order its connection sent it. Keys are set once (a second
// set is refused with kExists, so a rank started twice is caught); values
// live as long as the server. A connection that breaks the protocol gets a
// kBadRequest naming what was wrong and is closed; the server goes on
// serving the others.
//
// The server listens on every interface, so anyone who can reach the port
// can send to it: the values it holds are capped at max_held_bytes, and so
// are the requests half received and answers not yet taken. A set past the
// cap is refused (kBadRequest naming the cap, then a hang-up); when what is
// in flight passes it, the connection holding the most is closed. A job's
// rendezvous holds a few KiB per rank.
//
// Thread-safety: Start() and the destructor from one thread; port() from
// any.
#ifndef CHUNKZERO_COMM_RENDEZVOUS_TCP_STORE_SERVER_H_
#define CHUNKZERO_COMM_RENDEZVOUS_TCP_STORE_SERVER_H_

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace chunkzero {
namespace comm {

class TcpStoreServer {
 public:
  // Listens on `port` (0: a free port the system picks; see port()).
  // InvalidArgument for a port outside [0, 65535]; Unavailable, naming the
  // port and the system's reason, if it cannot be bound (most often: in use
  // by another job).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<TcpStoreServer>> Start(
      int port, size_t max_held_bytes = kDefaultMaxHeldBytes);

  static constexpr size_t kDefaultMaxHeldBytes = size_t{256} << 20;

  // Stops the serving thread and closes every connection.
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return port_; }

 private:
  TcpStoreServer(int listen_fd, int port, int wake_read, int wake_write,
                 size_t max_held_bytes);
  void Serve();

  const int listen_fd_;
  const int port_;
  // The destructor writes a byte here to wake the serving thread.
  const int wake_read_;
  const int wake_write_;
  const size_t max_held_bytes_;
  std::thread thread_;
};

}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_RENDEZVOUS_TCP_STORE_SERVER_H_
