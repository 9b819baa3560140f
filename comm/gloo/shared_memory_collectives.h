// The data phase of a Gloo group's AllGather, ReduceScatter and AllReduce
// through the ranks' shared-memory segments (gloo_process_group.h, "Ranks on
// one host"): each rank copies what its peers need into its own segment,
// passes a barrier, and reads (and reduces) straight from its peers'
// segments, with the same bits as the TCP path.
//
//   if (all_ready) {  // Every rank reserved SharedMemoryBytes(call, size).
//     CZ_RETURN_IF_ERROR(MoveDataThroughSharedMemory(
//         segments, rank, size, call, send, recv,
//         [&](SharedMemoryPoint point) { return Barrier(point); }));
//   }
//
// Every rank writes only its own segment and reads the others' after a
// barrier; the next collective's header exchange is the barrier that lets a
// segment be written again (every rank has finished this one by then).
// Internal to the Gloo backend; runs on the group's worker thread.
#ifndef CHUNKZERO_COMM_GLOO_SHARED_MEMORY_COLLECTIVES_H_
#define CHUNKZERO_COMM_GLOO_SHARED_MEMORY_COLLECTIVES_H_

#include <cstddef>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "comm/gloo/shared_segments.h"
#include "comm/types.h"

namespace chunkzero {
namespace comm {
namespace gloo_internal {

// The points of a collective that every rank passes before it reads its
// peers' segments: once it has written its own, and (AllReduce) once it has
// published its reduced part.
enum class SharedMemoryPoint { kWritten, kReduced };

// Returns once every rank has passed `point` of the collective; a failure
// (an aborted wait) ends the collective with it. Gloo's failures throw.
using SharedMemoryBarrier = absl::FunctionRef<absl::Status(SharedMemoryPoint)>;

// The bytes each rank's segment must hold for `call` in a group of `size`
// ranks to go through shared memory (AllGather: the send; ReduceScatter: the
// whole send; AllReduce: the buffer); 0 for the kinds that always go over
// TCP (Broadcast and Reduce: rare, and small where chunkzero uses them).
size_t SharedMemoryBytes(const CollectiveCall& call, int size);

// Moves the data of `call` (`send` and `recv` as the Gloo worker's queued
// collective has them) through `segments`. REQUIRES: call.count > 0 and
// every rank reserved SharedMemoryBytes(call, size) in its segment. Internal
// for a kind without a shared-memory path; a peer's segment that cannot be
// mapped is ResourceExhausted (SharedSegments::Peer).
[[nodiscard]] absl::Status MoveDataThroughSharedMemory(
    SharedSegments& segments, int rank, int size, const CollectiveCall& call,
    const void* send, void* recv, SharedMemoryBarrier barrier);

}  // namespace gloo_internal
}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_GLOO_SHARED_MEMORY_COLLECTIVES_H_
