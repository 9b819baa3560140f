// NcclProcessGroup: a ProcessGroup over NCCL, for buffers in GPU memory,
// one rank per GPU (NCCL refuses two ranks on one device; ranks sharing a
// GPU use the Gloo backend, staged through host memory).
//
//   // Every rank, in its own process, with the same directory:
//   CZ_ASSIGN_OR_RETURN(std::unique_ptr<NcclProcessGroup> group,
//                       NcclProcessGroup::CreateWithFileStore(
//                           rank, size, /*device_index=*/rank, "/tmp/job42"));
//   CZ_RETURN_IF_ERROR(comm::AllReduce(*group, grads_on_gpu));
//
// Rendezvous. Every rank sets a join key in the store and waits (up to
// NcclOptions::timeout) for all others', naming the ranks that do not come;
// given a NcclOptions::job_config, every rank's must equal this rank's
// (and the world sizes too), else Create fails at once naming the key and
// both values, as GlooProcessGroup's does (comm/rendezvous/job_config.h);
// rank 0 then publishes ncclGetUniqueId's bytes, which the others read, and
// every rank starts a non-blocking ncclCommInitRankConfig and polls it
// until it is ready, all within the same timeout; past it the communicator
// is aborted and Create fails with DeadlineExceeded. A store holding an
// earlier job's keys is refused (FailedPrecondition). The store is used
// only inside Create.
//
// How a collective runs. ProcessGroup has checked its arguments
// (argument_checks.h); each call
// makes the group's communication stream wait for the compute stream
// (kComputeStream, where every kernel's output is produced) without the
// host waiting, enqueues the NCCL
// call there (polling the non-blocking communicator until the enqueue has
// finished, within the collective's timeout), records an event after it,
// and returns a Work at once. The
// Work completes when the event has: Wait and IsCompleted poll it, and so
// does a watchdog thread every NcclOptions::watchdog_interval. Collectives
// complete in issue order (one stream). Every dtype (f32, f16, bf16, u8,
// i32, i64, f64) and every ReduceOp are supported (avg: NCCL's, which
// divides integers after the sum, truncating, but multiplies floating-point
// inputs by 1/size before it); Barrier all-reduces one word.
//
// Differences from the ProcessGroup contract, as with NCCL anywhere:
//  - Reductions are NCCL's (ring or tree order, 16-bit types accumulated as
//    NCCL does), not the serial rank-order reduction of the other
//    backends: deterministic for a fixed topology and size, but not the
//    same bits as the in-process backend beyond one rank.
//  - Nothing checks that the ranks issue matching calls; NCCL matches them
//    by position alone, so mismatched calls hang until the timeout (or, if
//    sizes agree, exchange the wrong data). The `tag` option is ignored.
//
// Timeouts, errors and abort. A collective that has not completed within
// its options.timeout of being issued, an asynchronous NCCL error
// (ncclCommGetAsyncError), a failed enqueue or a failed event ABORT the
// group: ncclCommAbort frees the communicator (its kernels on the GPU
// return), every pending Work fails with a status naming the rank and the
// collective (DeadlineExceeded for a timeout), and every later collective
// fails at once with FailedPrecondition quoting the first failure. Make a
// new group (a new store) on every rank to go on.
//
// Thread-safety: all methods are thread-safe; collectives may be issued
// from any thread (process_group.h on ordering). ncclCommAbort runs outside
// the group's lock (it can block), after the pending Works have failed.
// Destruction fails pending Works with Cancelled and aborts the
// communicator: ncclCommDestroy would wait for every peer to be quiescent,
// and hang behind a dead one. Works may outlive the group.
#ifndef CHUNKZERO_COMM_NCCL_NCCL_PROCESS_GROUP_H_
#define CHUNKZERO_COMM_NCCL_NCCL_PROCESS_GROUP_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/nccl/nccl_api.h"
#include "comm/options.h"
#include "comm/process_group.h"
#include "tensor/cuda/cuda_handles.h"

namespace gloo {
namespace rendezvous {
class Store;
}  // namespace rendezvous
}  // namespace gloo

namespace chunkzero {
namespace comm {

namespace nccl_internal {
class Core;
class Watchdog;
}  // namespace nccl_internal

struct NcclOptions {
  // How long Create waits for every rank to join.
  absl::Duration timeout = kDefaultCollectiveTimeout;
  // How often the watchdog looks at pending collectives and at NCCL's
  // asynchronous errors.
  absl::Duration watchdog_interval = absl::Milliseconds(50);
  // What every rank of the job must agree on (flags, shapes), compared at
  // the rendezvous together with the world size, as GlooOptions::job_config:
  // a rank started with other values fails at once, naming the first key
  // that differs. Empty: nothing is compared (not even the world size).
  // Keys and values are free text.
  std::map<std::string, std::string> job_config;
};

class NcclProcessGroup final : public ProcessGroup {
 public:
  // Joins rank `rank` of `size` on GPU `device_index` through `store` (see
  // "Rendezvous"). Errors: InvalidArgument for a bad rank, size, device or
  // timeout; FailedPrecondition for a store left over from another job, or
  // when a rank's size or options.job_config differs from this rank's
  // (naming both ranks, the key and the two values);
  // DeadlineExceeded naming the ranks that did not join; Unimplemented in a
  // build without --config=cuda; NCCL's and CUDA's errors otherwise.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<NcclProcessGroup>> Create(
      int rank, int size, int device_index, gloo::rendezvous::Store& store,
      const NcclOptions& options = {});

  // As Create over a gloo FileStore in `directory` (created if missing).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<NcclProcessGroup>>
  CreateWithFileStore(int rank, int size, int device_index,
                      const std::string& directory,
                      const NcclOptions& options = {});

  // As Create, over `api` instead of NCCL itself (tests).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<NcclProcessGroup>>
  CreateWithApi(int rank, int size, std::unique_ptr<NcclApi> api,
                gloo::rendezvous::Store& store,
                const NcclOptions& options = {});

  ~NcclProcessGroup() override;
  NcclProcessGroup(const NcclProcessGroup&) = delete;
  NcclProcessGroup& operator=(const NcclProcessGroup&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::string_view backend_name() const override { return "nccl"; }
  bool SupportsDType(DType dtype) const override;

  // The stream the collectives run on.
  CudaStream comm_stream() const;
  // The status that aborted the group (its first failure), or OK.
  [[nodiscard]] absl::Status abort_status() const;

 protected:
  std::unique_ptr<Work> DoBroadcast(MutableBuffer buffer,
                                    const BroadcastOptions& options) override;
  std::unique_ptr<Work> DoReduce(ConstBuffer send, MutableBuffer recv,
                                 const ReduceOptions& options) override;
  std::unique_ptr<Work> DoAllReduce(MutableBuffer buffer,
                                    const AllReduceOptions& options) override;
  std::unique_ptr<Work> DoAllGather(ConstBuffer send, MutableBuffer recv,
                                    const AllGatherOptions& options) override;
  std::unique_ptr<Work> DoReduceScatter(
      ConstBuffer send, MutableBuffer recv,
      const ReduceScatterOptions& options) override;
  std::unique_ptr<Work> DoBarrier(const BarrierOptions& options) override;
  // Fails every pending collective with `cause` and aborts the
  // communicator (ncclCommAbort, which stops its kernels).
  void DoAbort(const absl::Status& cause) override;

 private:
  NcclProcessGroup(int rank, int size,
                   std::shared_ptr<nccl_internal::Core> core,
                   std::unique_ptr<nccl_internal::Watchdog> watchdog);

  const int rank_;
  const int size_;
  std::shared_ptr<nccl_internal::Core> core_;
  std::unique_ptr<nccl_internal::Watchdog> watchdog_;
};

}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_NCCL_NCCL_PROCESS_GROUP_H_
