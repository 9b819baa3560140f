// SharedSegments: one growable shared-memory segment per rank of a Gloo
// group whose ranks share a host. Each rank writes only its own segment and
// reads its peers', so a collective's data crosses between processes as
// plain memory copies instead of going through the kernel's TCP stack twice.
//
//   // Every rank, after the Gloo mesh is up, over the same store:
//   absl::StatusOr<std::unique_ptr<SharedSegments>> shm =
//       SharedSegments::Connect(rank, size, store, limit, deadline);
//   if (*shm != nullptr && (*shm)->Reserve(bytes).ok()) {  // Else TCP.
//     std::memcpy((*shm)->mine(), data, bytes);
//     ... every rank has written (a barrier) ...
//     const uint8_t* theirs = *(*shm)->Peer(peer, bytes);
//   }
//
// The segments are POSIX shared memory (/dev/shm). Connect() creates this
// rank's under a random name, publishes the name in the store, opens every
// peer's, and unlinks its own once every rank has said whether it could
// open the others': after Connect() no name is left behind, even if the job
// is killed, and the memory goes back when the last rank closes it. Ranks
// that cannot open each other's segments (different hosts, or containers
// with separate /dev/shm) agree on that through the store, and Connect()
// returns nullptr on every rank: the group then moves its data over TCP.
//
// Growth. A segment starts empty; Reserve(bytes) grows this rank's to at
// least `bytes` with posix_fallocate, so that a full /dev/shm is an error
// from Reserve and never a SIGBUS on a later write, and maps every peer's
// segment for as many bytes, so that reading them cannot fail for want of
// memory once the data moves. A rank whose Reserve fails says in its
// collective's header that its segment is not ready, and every rank moves
// that collective over TCP. Segments never shrink. A peer reserves before
// it tells the others it is ready (in the collective's header), so Peer()
// may read as many bytes as that collective needs.
//
// Not thread-safe: one thread (the group's worker) uses it.
#ifndef CHUNKZERO_COMM_GLOO_SHARED_SEGMENTS_H_
#define CHUNKZERO_COMM_GLOO_SHARED_SEGMENTS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
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

class SharedSegments {
 public:
  // See the header comment. `max_bytes` caps this rank's segment (0: no
  // shared memory; Connect() still takes part in the agreement, so that
  // every rank returns nullptr). Errors: DeadlineExceeded if a rank does
  // not publish its keys by `deadline`; Unavailable if the store fails.
  static absl::StatusOr<std::unique_ptr<SharedSegments>> Connect(
      int rank, int size, gloo::rendezvous::Store& store, size_t max_bytes,
      absl::Time deadline);

  ~SharedSegments();
  SharedSegments(const SharedSegments&) = delete;
  SharedSegments& operator=(const SharedSegments&) = delete;

  // Grows this rank's segment to hold at least `bytes` and maps every
  // peer's segment for at least as many (see "Growth"). ResourceExhausted,
  // naming this rank, the segment, the bytes and errno's text, if that would
  // pass the cap, if /dev/shm has no room (or RLIMIT_FSIZE forbids it), or
  // if a mapping fails for want of address space or memory; the segment
  // then keeps its size and contents and stays usable. Other errnos as
  // absl::ErrnoToStatus gives them.
  [[nodiscard]] absl::Status Reserve(size_t bytes);

  // This rank's segment, reserved() bytes long.
  uint8_t* mine() { return mine_; }
  size_t reserved() const { return reserved_; }

  // Rank `peer`'s segment, mapped for at least `bytes`, which that rank has
  // reserved. Maps it only if this rank's Reserve did not (for fewer
  // bytes); a mapping that fails is ResourceExhausted as in Reserve.
  absl::StatusOr<const uint8_t*> Peer(int peer, size_t bytes);

 private:
  SharedSegments(int rank, size_t max_bytes, std::vector<int> fds);

  struct Mapping {
    void* data = nullptr;
    size_t bytes = 0;
  };

  // Maps rank `peer`'s segment for `bytes`, replacing its mapping.
  [[nodiscard]] absl::Status Map(int peer, size_t bytes);

  const int rank_;
  const size_t max_bytes_;
  // One per rank: this rank's read-write, the peers' read-only.
  std::vector<int> fds_;
  std::vector<Mapping> mappings_;
  uint8_t* mine_ = nullptr;
  size_t reserved_ = 0;
  // Every peer's segment is mapped for at least this many bytes.
  size_t peers_mapped_ = 0;
};

// Test-only fault injection. While a fault is set, it is called before each
// system call that gives a segment memory: kGrow (posix_fallocate of this
// rank's segment to `bytes`), kMapMine (mapping it) and kMapPeer (mapping
// peer `segment`'s); a non-zero result fails that call with that errno
// instead of making it. nullptr (the default) clears it. Thread-safe; set it
// before the ranks start.
enum class SegmentCall { kGrow, kMapMine, kMapPeer };
using SegmentFault = int (*)(int rank, SegmentCall call, int segment,
                             size_t bytes);
void SetSegmentFaultForTesting(SegmentFault fault);

}  // namespace gloo_internal
}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_GLOO_SHARED_SEGMENTS_H_
