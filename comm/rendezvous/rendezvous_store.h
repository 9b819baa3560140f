// Where the ranks of a job meet, as a user writes it (--rendezvous,
// CHUNKZERO_RENDEZVOUS), and the store that address opens.
//
//   absl::StatusOr<RendezvousAddress> address =
//       ParseRendezvousAddress("redis://10.0.0.1:6379/job42");
//   absl::StatusOr<std::unique_ptr<RendezvousStore>> store =
//       RendezvousStore::Open(*address, rank, absl::Seconds(300));
//   GlooProcessGroup::Create(rank, size, (*store)->store(), options);
//
// Three forms:
//  - DIR: a directory every rank can reach (one machine, or a shared
//    filesystem): Gloo's FileStore. Fresh per job.
//  - redis://HOST[:PORT]/PREFIX: a Redis server (PORT 6379 by default)
//    through Gloo's RedisStore (timed_redis_store.h), every key under
//    PREFIX/, so that one server serves many jobs at once. Each rank
//    deletes its keys once all have met (DeleteKeysItSet), or as it gives
//    up on a server that stopped answering, so a prefix serves job after
//    job; keys a killed job left make the next job under that prefix fail
//    instead of meeting them, until they expire
//    (TimedRedisStore::KeyLifetime: ten timeouts, at least an hour).
//  - tcp://HOST:PORT: a store that rank 0 hosts on PORT of every interface
//    (tcp_store_server.h) and every rank reaches at HOST:PORT (torchrun's
//    MASTER_ADDR and MASTER_PORT). Fresh per job by construction.
// HOST is a name, an IPv4 address or an IPv6 address in brackets.
#ifndef CHUNKZERO_COMM_RENDEZVOUS_RENDEZVOUS_STORE_H_
#define CHUNKZERO_COMM_RENDEZVOUS_RENDEZVOUS_STORE_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gloo/rendezvous/store.h"

namespace chunkzero {
namespace comm {

class TcpStoreServer;
class TimedRedisStore;

struct RendezvousAddress {
  enum class Kind { kDirectory, kRedis, kTcp };
  Kind kind = Kind::kDirectory;
  // kDirectory.
  std::string directory;
  // kRedis and kTcp: the server's host (without brackets) and port.
  std::string host;
  int port = 0;
  // kRedis: the job's key prefix (non-empty).
  std::string prefix;

  // The address as ParseRendezvousAddress reads it back.
  std::string ToString() const;
  // True for a store on a server (redis://, tcp://).
  bool IsNetworked() const { return kind != Kind::kDirectory; }
};

// InvalidArgument, quoting `text`, for an empty address, an unknown scheme,
// a missing host or port, a port outside [1, 65535], or a redis:// address
// without a prefix.
[[nodiscard]] absl::StatusOr<RendezvousAddress> ParseRendezvousAddress(
    absl::string_view text);

// One rank's handle on the job's store; for tcp:// on rank 0 it also owns
// the server, which serves as long as this object lives (keep it until the
// job's process groups are gone: ranks may still be reading keys after
// rank 0's own setup is done).
class RendezvousStore {
 public:
  // Opens `address` for `rank`, waiting at most `timeout` for a server.
  // Errors name the address: InvalidArgument (a directory that cannot be
  // made), Unavailable (a server that cannot be reached or a port rank 0
  // cannot listen on), DeadlineExceeded (no tcp:// server within timeout).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<RendezvousStore>> Open(
      const RendezvousAddress& address, int rank, absl::Duration timeout);

  ~RendezvousStore();
  RendezvousStore(const RendezvousStore&) = delete;
  RendezvousStore& operator=(const RendezvousStore&) = delete;

  gloo::rendezvous::Store& store() { return *base_; }

  // Deletes the keys this rank set on a redis:// server, so that the job's
  // prefix is free again (a directory is fresh per job, and a tcp:// store
  // ends with rank 0). Call it only once every rank has read them: after a
  // barrier of every group made through store(). DeadlineExceeded naming
  // the server if it does not answer within the timeout, Unavailable if it
  // fails otherwise; OK (nothing to do) for the other forms.
  [[nodiscard]] absl::Status DeleteKeysItSet();

 private:
  RendezvousStore() = default;

  std::unique_ptr<TcpStoreServer> server_;
  std::unique_ptr<gloo::rendezvous::Store> base_;
  // base_, for a redis:// store; else null.
  TimedRedisStore* redis_ = nullptr;
};

}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_RENDEZVOUS_RENDEZVOUS_STORE_H_
