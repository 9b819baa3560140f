// What NcclProcessGroup needs from NCCL and the CUDA runtime, behind an
// interface so that its logic (stream ordering, completion, the watchdog,
// abort) is tested on machines without a GPU against a fake
// (comm/nccl/testing/fake_nccl_api.h).
//
//   std::unique_ptr<NcclApi> api = MakeCudaNcclApi(/*device_index=*/0);
//   CZ_ASSIGN_OR_RETURN(std::string id, api->GetUniqueId());   // rank 0
//   CZ_ASSIGN_OR_RETURN(NcclApi::Comm comm, api->InitRank(size, id, rank));
//   ... poll api->Ready(comm) until true, or abort at the deadline ...
//
// Implementations must be thread-safe: the group's callers and its
// watchdog thread use one concurrently. The CUDA one selects its GPU for
// each call and restores the caller's current GPU after it.
#ifndef CHUNKZERO_COMM_NCCL_NCCL_API_H_
#define CHUNKZERO_COMM_NCCL_NCCL_API_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/types.h"
#include "tensor/cuda/cuda_handles.h"
#include "tensor/dtype.h"

namespace chunkzero {
namespace comm {

// One NCCL collective: the device buffers and what to do with them.
// Broadcast and AllReduce read `send` and write `recv` (the same pointer
// when in place); Reduce writes `recv` at the root only; AllGather reads
// `count` elements and writes size * count; ReduceScatter reads
// size * count and writes `count`.
struct NcclCall {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
};

class NcclApi {
 public:
  struct CommOpaque;
  using Comm = CommOpaque*;

  virtual ~NcclApi() = default;

  // ncclGetUniqueId: the bytes every rank passes to InitRank.
  [[nodiscard]] virtual absl::StatusOr<std::string> GetUniqueId() = 0;
  // Starts ncclCommInitRankConfig for a non-blocking communicator
  // (config.blocking = 0) on this API's GPU and returns it at once, so that
  // a rank that never joins cannot hold the caller past its deadline. The
  // communicator is usable once Ready says so.
  [[nodiscard]] virtual absl::StatusOr<Comm> InitRank(
      int size, const std::string& unique_id, int rank) = 0;
  // ncclCommGetAsyncError on a non-blocking communicator: false while its
  // last call (init, an enqueue) is still in progress, true once it has
  // finished, the error if it failed. NCCL's rule: after a call, wait for
  // Ready before the next NCCL call and before more work on its stream.
  [[nodiscard]] virtual absl::StatusOr<bool> Ready(Comm comm) = 0;
  // ncclCommGetAsyncError: OK while the communicator is healthy (or still
  // working), else the error.
  [[nodiscard]] virtual absl::Status AsyncError(Comm comm) = 0;
  // ncclCommAbort: frees the communicator, making any of its kernels still
  // on the GPU return. The group's only way to free one: ncclCommDestroy
  // waits for every peer to be quiescent, so it can hang when a peer has
  // died (what PyTorch's process group does at shutdown too).
  [[nodiscard]] virtual absl::Status Abort(Comm comm) = 0;

  // Device memory of this API's GPU (the group's barrier word).
  [[nodiscard]] virtual absl::StatusOr<void*> Malloc(size_t bytes) = 0;
  virtual void Free(void* ptr) = 0;

  // Enqueues `call` on `stream`; it may still be in progress on return
  // (wait for Ready). kBarrier is an all-reduce of the call's buffer (NCCL
  // has no barrier).
  [[nodiscard]] virtual absl::Status Enqueue(Comm comm, const NcclCall& call,
                                             CudaStream stream) = 0;

  // A stream of this API's GPU that does not synchronise with the legacy
  // default stream.
  [[nodiscard]] virtual absl::StatusOr<CudaStream> CreateStream() = 0;
  virtual void DestroyStream(CudaStream stream) = 0;
  // Makes work enqueued on `stream` from now on wait for the work enqueued
  // on `after` so far, without the host waiting.
  [[nodiscard]] virtual absl::Status StreamWaitStream(CudaStream stream,
                                                      CudaStream after) = 0;
  // Makes work enqueued on `stream` from now on wait for `event` (its state
  // when this is called), without the host waiting.
  [[nodiscard]] virtual absl::Status StreamWaitEvent(CudaStream stream,
                                                     CudaEvent event) = 0;
  // An event done once the work enqueued on `stream` so far has finished.
  [[nodiscard]] virtual absl::StatusOr<CudaEvent> RecordEvent(
      CudaStream stream) = 0;
  // Whether the event's work has finished; an error if it failed.
  [[nodiscard]] virtual absl::StatusOr<bool> EventDone(CudaEvent event) = 0;
  virtual void ReleaseEvent(CudaEvent event) = 0;
};

// The real one, for GPU `device_index`. Without --config=cuda every call
// fails with Unimplemented.
std::unique_ptr<NcclApi> MakeCudaNcclApi(int device_index);

}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_NCCL_NCCL_API_H_
