// TcpStore: a rendezvous store (gloo::rendezvous::Store) whose keys live in
// a TcpStoreServer that rank 0 of the job hosts (tcp_store_server.h): the
// store of torchrun's MASTER_ADDR:MASTER_PORT convention, with no other
// service to run.
//
//   absl::StatusOr<std::unique_ptr<TcpStore>> store =
//       TcpStore::Connect("node0", 29500, absl::Seconds(300));
//   GlooProcessGroup::Create(rank, size, **store, options);
//
// Connect() keeps trying until the server answers or `timeout` passes, so
// ranks may start before rank 0 listens. Every request then waits at most
// `timeout` for its answer; a server that went away or stopped answering is
// a gloo::IoException (as for Gloo's own stores; the process groups turn it
// into a status naming the store), never a hang. set() of a key that is
// already set throws "key ... already set", as Gloo's HashStore does. wait()
// polls the server every 10 ms; get() waits for its key first, as the Store
// contract asks.
//
// Not thread-safe: one thread uses a store at a time (it is one socket).
#ifndef CHUNKZERO_COMM_RENDEZVOUS_TCP_STORE_H_
#define CHUNKZERO_COMM_RENDEZVOUS_TCP_STORE_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gloo/rendezvous/store.h"

namespace chunkzero {
namespace comm {

class TcpStore final : public gloo::rendezvous::Store {
 public:
  // InvalidArgument for a bad port or timeout; DeadlineExceeded, naming
  // host:port and the last connect error, if no server answered within
  // `timeout`; Unavailable if `host` does not resolve.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<TcpStore>> Connect(
      const std::string& host, int port, absl::Duration timeout);

  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  // Waits at most the `timeout` given to Connect().
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  TcpStore(int fd, std::string address, absl::Duration timeout)
      : fd_(fd), address_(std::move(address)), timeout_(timeout) {}

  // Sends a request and returns the answer; throws gloo::IoException.
  struct Reply;
  Reply Call(uint8_t code, const std::vector<std::string>& parts);
  bool Check(const std::vector<std::string>& keys);

  const int fd_;
  // "tcp://host:port", for messages.
  const std::string address_;
  const absl::Duration timeout_;
  // Why the connection can no longer be used; empty while it can.
  std::string broken_;
};

}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_RENDEZVOUS_TCP_STORE_H_
