// ProcessGroup: the interface every chunkzero collective goes through.
//
//   ProcessGroup& group = ...;                      // one per rank
//   std::unique_ptr<Work> w = group.AllReduce(MutableBuffer::Of(grads), {});
//   CZ_RETURN_IF_ERROR(w->Wait(), "gradient all-reduce");
//
// Contract (every backend):
//  - Every collective is asynchronous: it returns a Work at once and runs in
//    the background. Buffers must stay valid and untouched until it completes
//    (see work.h).
//  - Ranks must issue the same collectives in the same order (matched by
//    their position in each rank's issue order, like NCCL). A backend that
//    can detect a mismatch fails the collective on every rank.
//  - Argument errors (send/recv count or dtype mismatch, bad root, a dtype the
//    backend does not support, null data with a nonzero count, a partial
//    overlap of send and recv) come back as an already-failed Work with
//    InvalidArgument naming the rank and the op; the public collectives
//    below run those checks (argument_checks.h) once, for every backend,
//    before its Do* function sees the call. Such a call is not issued to the
//    peers, so they wait for it until their timeout.
//  - Reductions are deterministic: the result is the serial reduction in rank
//    order, ((x0 op x1) op x2) ..., bit for bit, with f16/bf16 accumulated in
//    f32 and rounded once at the end (see ReduceOp).
//
// Thread-safety: rank(), size(), backend_name() and SupportsDType() are
// thread-safe. Collectives may be issued from any thread, but the issue order
// on one rank is the order in which the calls enter the group; callers that
// issue from several threads must order those calls themselves.
#ifndef CHUNKZERO_COMM_PROCESS_GROUP_H_
#define CHUNKZERO_COMM_PROCESS_GROUP_H_

#include <memory>

#include "absl/base/attributes.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "comm/options.h"
#include "comm/types.h"
#include "comm/work.h"
#include "tensor/dtype.h"

namespace chunkzero {
namespace comm {

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  // This rank, in [0, size()). Constant for the group's lifetime.
  virtual int rank() const = 0;
  // Number of ranks. Constant for the group's lifetime.
  virtual int size() const = 0;
  // A short name for messages, e.g. "inprocess".
  virtual absl::string_view backend_name() const = 0;
  // True if every collective accepts buffers of `dtype`.
  virtual bool SupportsDType(DType dtype) const = 0;

  // The collectives. Each is non-virtual and [[nodiscard]] so that dropping
  // its Work fails to compile (GCC does not check [[nodiscard]] on calls of
  // virtual functions); backends implement the protected Do* functions.
  // Each checks its arguments first (see ArgumentChecks below): a call that
  // fails a check returns an already-failed Work and never reaches Do*.

  // Copies root's `buffer` into every other rank's `buffer`.
  [[nodiscard]] std::unique_ptr<Work> Broadcast(
      MutableBuffer buffer, const BroadcastOptions& options);

  // Reduces every rank's `send` into root's `recv`. `recv` is used at the
  // root only (other ranks may pass {}); at the root it must have send.count
  // elements and may alias `send` exactly (in place).
  [[nodiscard]] std::unique_ptr<Work> Reduce(ConstBuffer send,
                                             MutableBuffer recv,
                                             const ReduceOptions& options);

  // Reduces every rank's `buffer` and leaves the result in all of them.
  [[nodiscard]] std::unique_ptr<Work> AllReduce(
      MutableBuffer buffer, const AllReduceOptions& options);

  // Gathers every rank's `send` (count elements) into `recv` (size() * count
  // elements, rank r's data at offset r * count). In place when `send` is
  // exactly recv's slot for this rank.
  [[nodiscard]] std::unique_ptr<Work> AllGather(
      ConstBuffer send, MutableBuffer recv, const AllGatherOptions& options);

  // Reduces slot r of every rank's `send` (size() * count elements) into
  // rank r's `recv` (count elements). In place when `recv` is exactly send's
  // slot for this rank.
  [[nodiscard]] std::unique_ptr<Work> ReduceScatter(
      ConstBuffer send, MutableBuffer recv,
      const ReduceScatterOptions& options);

  // Completes once every rank has entered the barrier.
  [[nodiscard]] std::unique_ptr<Work> Barrier(const BarrierOptions& options) {
    return DoBarrier(options);
  }

  // Gives up on this group so that the buffers of its collectives may be
  // freed (as c10d's abort() and ncclCommAbort): every collective of this
  // rank that has not started fails with a status quoting `cause`, one in
  // flight is stopped where the backend can stop it (else it finishes), and
  // Abort returns once no collective of this rank reads or writes a
  // caller's buffer any more and every Work it issued is complete. Later
  // collectives fail at once. The peers' collectives fail too, promptly
  // where the backend can tell them (in-process, Gloo, NCCL). The group
  // cannot be used again; Abort may be called more than once (the first
  // cause stays) and from any thread. REQUIRES: !cause.ok().
  //
  // Call it on the way out of a failure, before freeing what collectives
  // still in flight use (ChunkManager's destructor does).
  void Abort(const absl::Status& cause) { DoAbort(cause); }

 protected:
  // Where the public collectives check their arguments (argument_checks.h).
  enum class ArgumentChecks {
    // Here, once, before the Do* function: it sees valid arguments only.
    // Every backend.
    kAtEntry,
    // Not here: each Do* function sees every call as made. For a decorator
    // whose Do* functions hand each call to another group's public
    // collectives, which check it there (so that the message names that
    // group, and the decorator still sees, counts or reroutes the call), and
    // for test doubles. A Do* function of such a group must not touch the
    // buffers of a call itself.
    kDelegated,
  };

  ProcessGroup() = default;
  explicit ProcessGroup(ArgumentChecks checks) : checks_(checks) {}

  virtual std::unique_ptr<Work> DoBroadcast(
      MutableBuffer buffer, const BroadcastOptions& options) = 0;
  virtual std::unique_ptr<Work> DoReduce(ConstBuffer send, MutableBuffer recv,
                                         const ReduceOptions& options) = 0;
  virtual std::unique_ptr<Work> DoAllReduce(
      MutableBuffer buffer, const AllReduceOptions& options) = 0;
  virtual std::unique_ptr<Work> DoAllGather(
      ConstBuffer send, MutableBuffer recv,
      const AllGatherOptions& options) = 0;
  virtual std::unique_ptr<Work> DoReduceScatter(
      ConstBuffer send, MutableBuffer recv,
      const ReduceScatterOptions& options) = 0;
  virtual std::unique_ptr<Work> DoBarrier(const BarrierOptions& options) = 0;
  virtual void DoAbort(const absl::Status& cause) = 0;

 private:
  const ArgumentChecks checks_ = ArgumentChecks::kAtEntry;
};

// Blocking conveniences: issue the collective and wait for it. Each is
// functionally equivalent to `group.X(args...)->Wait()`.
[[nodiscard]] absl::Status Broadcast(ProcessGroup& group, MutableBuffer buffer,
                                     const BroadcastOptions& options = {});
[[nodiscard]] absl::Status Reduce(ProcessGroup& group, ConstBuffer send,
                                  MutableBuffer recv,
                                  const ReduceOptions& options = {});
[[nodiscard]] absl::Status AllReduce(ProcessGroup& group, MutableBuffer buffer,
                                     const AllReduceOptions& options = {});
[[nodiscard]] absl::Status AllGather(ProcessGroup& group, ConstBuffer send,
                                     MutableBuffer recv,
                                     const AllGatherOptions& options = {});
[[nodiscard]] absl::Status ReduceScatter(
    ProcessGroup& group, ConstBuffer send, MutableBuffer recv,
    const ReduceScatterOptions& options = {});
[[nodiscard]] absl::Status Barrier(ProcessGroup& group,
                                   const BarrierOptions& options = {});

}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_PROCESS_GROUP_H_
