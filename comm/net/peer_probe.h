// PeerProbe: after a collective times out, which peers' hosts can still be
// reached? Gloo's waits do not say whom they waited for, and a rank whose
// host (or link) is gone looks the same as one that stopped.
//
//   // Every rank, while the group is made, over the group's store:
//   absl::StatusOr<std::unique_ptr<PeerProbe>> probe =
//       PeerProbe::Open(rank, size, hostname, store, deadline);
//   ...
//   std::string finding = (*probe)->Describe(absl::Seconds(2));
//   // "ranks 4, 5 (10.233.0.3) cannot be reached"
//
// Each rank listens on a TCP port of its own (on the address it gives its
// peers) for the life of its group, and publishes host:port in the store.
// Probe() connects to every peer's port at once: the kernel of a live host
// accepts even for a stopped process, a host whose process is gone refuses,
// and a lost host or link does not answer. Nothing is sent; this rank's own
// queue of such connections is drained on each probe.
//
// Thread-safety: Probe() and Describe() from one thread at a time.
#ifndef CHUNKZERO_COMM_NET_PEER_PROBE_H_
#define CHUNKZERO_COMM_NET_PEER_PROBE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gloo {
namespace rendezvous {
class Store;
}  // namespace rendezvous
}  // namespace gloo

namespace chunkzero {
namespace comm {
namespace gloo_internal {

class PeerProbe {
 public:
  // kUnknown: the probe failed on this side (no descriptor, a name that
  // does not resolve), which says nothing of the peer.
  enum class Reach { kAnswers, kRefuses, kSilent, kUnknown };
  struct Finding {
    int rank = 0;
    std::string address;  // "host:port".
    Reach reach = Reach::kAnswers;
  };

  // Listens on `hostname`, port 0, and exchanges addresses through `store`
  // (keys chunkzero_gloo_probe_<rank>). Unavailable if the port cannot be
  // opened or the store fails; DeadlineExceeded if a peer's address does
  // not come by `deadline`.
  static absl::StatusOr<std::unique_ptr<PeerProbe>> Open(
      int rank, int size, const std::string& hostname,
      gloo::rendezvous::Store& store, absl::Time deadline);

  ~PeerProbe();
  PeerProbe(const PeerProbe&) = delete;
  PeerProbe& operator=(const PeerProbe&) = delete;

  // Every peer, in rank order, as found within `wait`.
  std::vector<Finding> Probe(absl::Duration wait);

  // Probe(wait) in words: "ranks 4, 5 (10.233.0.3) cannot be reached; rank
  // 2's process is gone (10.233.0.1 refuses)", or "every peer's host
  // answers (so a rank stopped, or the network between hosts is partly
  // down)".
  std::string Describe(absl::Duration wait);

 private:
  PeerProbe(int rank, int listen_fd, std::vector<std::string> addresses)
      : rank_(rank), listen_fd_(listen_fd), addresses_(std::move(addresses)) {}

  const int rank_;
  const int listen_fd_;
  // Every rank's "host:port", this one's included.
  const std::vector<std::string> addresses_;
};

}  // namespace gloo_internal
}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_NET_PEER_PROBE_H_
