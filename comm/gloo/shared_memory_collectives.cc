#include "comm/gloo/shared_memory_collectives.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "comm/internal/reduce_kernels.h"

namespace chunkzero {
namespace comm {
namespace gloo_internal {
namespace {

// The reference reduction (see reduce_kernels.h): shared with the in-process
// backend so that both produce the same bits.
using ::chunkzero::comm::internal::ReduceInto;

uint8_t* Bytes(void* p, size_t offset) {
  return static_cast<uint8_t*>(p) + offset;
}

// Each rank's send into its segment; then every rank copies the others'.
absl::Status AllGather(SharedSegments& segments, int rank, int size,
                       const CollectiveCall& call, const void* send, void* recv,
                       SharedMemoryBarrier barrier) {
  const size_t bytes = call.count * ElementSize(call.dtype);
  std::memcpy(segments.mine(), send, bytes);
  if (absl::Status s = barrier(SharedMemoryPoint::kWritten); !s.ok()) {
    return s;
  }
  for (int k = 0; k < size; ++k) {
    uint8_t* slot = Bytes(recv, k * bytes);
    if (k == rank) {
      if (send != slot) std::memmove(slot, send, bytes);
      continue;
    }
    absl::StatusOr<const uint8_t*> theirs = segments.Peer(k, bytes);
    if (!theirs.ok()) return theirs.status();
    std::memcpy(slot, *theirs, bytes);
  }
  return absl::OkStatus();
}

// Each rank's send slots for the others into its segment; then rank r
// reduces slot r of every segment (its own from its send) in rank order.
absl::Status ReduceScatter(SharedSegments& segments, int rank, int size,
                           const CollectiveCall& call, const void* send_data,
                           void* recv, SharedMemoryBarrier barrier) {
  const size_t bytes = call.count * ElementSize(call.dtype);
  const uint8_t* send = static_cast<const uint8_t*>(send_data);
  for (int k = 0; k < size; ++k) {
    if (k == rank) continue;
    std::memcpy(segments.mine() + k * bytes, send + k * bytes, bytes);
  }
  if (absl::Status s = barrier(SharedMemoryPoint::kWritten); !s.ok()) {
    return s;
  }
  std::vector<const void*> inputs(size);
  for (int k = 0; k < size; ++k) {
    if (k == rank) {
      inputs[k] = send + rank * bytes;  // recv may be exactly this.
      continue;
    }
    absl::StatusOr<const uint8_t*> theirs = segments.Peer(k, size * bytes);
    if (!theirs.ok()) return theirs.status();
    inputs[k] = *theirs + rank * bytes;
  }
  ReduceInto(recv, inputs.data(), size, call.count, call.dtype, call.op);
  return absl::OkStatus();
}

// The buffer's segments as in the TCP AllReduce: rank k reduces segment k.
// Each rank puts the others' segments of its buffer into its shared
// segment, reduces its own segment in place in its buffer and publishes the
// result in the same place of its shared segment (which no peer reads in
// the first phase); after a second barrier each rank copies the others'
// results.
absl::Status AllReduce(SharedSegments& segments, int rank, int size,
                       const CollectiveCall& call, void* recv,
                       SharedMemoryBarrier barrier) {
  const size_t es = ElementSize(call.dtype);
  const size_t count = call.count;
  const size_t per = (count + size - 1) / size;
  auto begin = [&](int k) { return std::min(count, k * per) * es; };
  auto length = [&](int k) { return begin(k + 1) - begin(k); };
  uint8_t* mine = segments.mine();
  uint8_t* buffer = static_cast<uint8_t*>(recv);
  for (int k = 0; k < size; ++k) {
    if (k != rank) std::memcpy(mine + begin(k), buffer + begin(k), length(k));
  }
  if (absl::Status s = barrier(SharedMemoryPoint::kWritten); !s.ok()) {
    return s;
  }
  std::vector<const uint8_t*> peers(size);
  for (int k = 0; k < size; ++k) {
    if (k == rank) continue;
    absl::StatusOr<const uint8_t*> theirs = segments.Peer(k, count * es);
    if (!theirs.ok()) return theirs.status();
    peers[k] = *theirs;
  }
  std::vector<const void*> inputs(size);
  for (int k = 0; k < size; ++k) {
    inputs[k] = k == rank ? buffer + begin(rank) : peers[k] + begin(rank);
  }
  ReduceInto(buffer + begin(rank), inputs.data(), size, length(rank) / es,
             call.dtype, call.op);
  std::memcpy(mine + begin(rank), buffer + begin(rank), length(rank));
  if (absl::Status s = barrier(SharedMemoryPoint::kReduced); !s.ok()) {
    return s;
  }
  for (int k = 0; k < size; ++k) {
    if (k != rank) {
      std::memcpy(buffer + begin(k), peers[k] + begin(k), length(k));
    }
  }
  return absl::OkStatus();
}

}  // namespace

size_t SharedMemoryBytes(const CollectiveCall& call, int size) {
  const size_t bytes = call.count * ElementSize(call.dtype);
  switch (call.kind) {
    case CollectiveKind::kAllGather:
    case CollectiveKind::kAllReduce:
      return bytes;
    case CollectiveKind::kReduceScatter:
      return size * bytes;
    default:
      return 0;
  }
}

absl::Status MoveDataThroughSharedMemory(SharedSegments& segments, int rank,
                                         int size, const CollectiveCall& call,
                                         const void* send, void* recv,
                                         SharedMemoryBarrier barrier) {
  switch (call.kind) {
    case CollectiveKind::kAllGather:
      return AllGather(segments, rank, size, call, send, recv, barrier);
    case CollectiveKind::kReduceScatter:
      return ReduceScatter(segments, rank, size, call, send, recv, barrier);
    case CollectiveKind::kAllReduce:
      return AllReduce(segments, rank, size, call, recv, barrier);
    default:
      return absl::InternalError(
          absl::StrCat("no shared-memory path for ", call.ToString()));
  }
}

}  // namespace gloo_internal
}  // namespace comm
}  // namespace chunkzero
