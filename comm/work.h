// Work: the handle every asynchronous collective returns.
//
//   std::unique_ptr<Work> w = group.AllReduce(buf, {});
//   DoOtherThings();                         // the collective runs meanwhile
//   CZ_RETURN_IF_ERROR(w->Wait());           // the collective's status
//
// Lifetime: the buffers passed to a collective must stay valid, and must not
// be touched by the caller, until the operation has completed, i.e. until
// IsCompleted() returns true or Wait() returns. Destroying the handle does NOT
// cancel the operation (it still runs and still uses the buffers); a backend
// completes every operation, at the latest with Cancelled when it is
// destroyed.
//
// Thread-safety: all methods may be called from any thread, concurrently.
#ifndef CHUNKZERO_COMM_WORK_H_
#define CHUNKZERO_COMM_WORK_H_

#include <memory>
#include <string>

#include "absl/base/attributes.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "tensor/cuda/cuda_handles.h"

namespace chunkzero {
namespace comm {

class [[nodiscard]] Work {
 public:
  virtual ~Work() = default;

  // True once the operation has finished, successfully or not. Never blocks.
  virtual bool IsCompleted() = 0;

  // Blocks until the operation completes or `deadline` passes. Returns the
  // operation's status if it completed; otherwise DeadlineExceeded (the
  // operation is NOT cancelled and keeps running under its own timeout; call
  // Wait again later). Distinguish the two with IsCompleted().
  // Non-virtual, so that GCC checks [[nodiscard]]; backends implement
  // DoWait.
  [[nodiscard]] absl::Status Wait(absl::Time deadline) {
    return DoWait(deadline);
  }

  // Blocks until the operation completes and returns its status. Equivalent
  // to Wait(absl::InfiniteFuture()). Cannot hang forever on a healthy backend:
  // the operation's own timeout bounds it.
  [[nodiscard]] absl::Status Wait() { return DoWait(absl::InfiniteFuture()); }

  // Orders the work enqueued on CUDA stream `stream` from now on after the
  // operation, without the host waiting where the backend can do that
  // (NCCL: the stream waits for the operation's event). Returns the
  // operation's status when it is already known, else OK: a later failure
  // then surfaces through the backend (NCCL aborts the group, and every
  // later collective fails). The default waits on the host, as Wait().
  [[nodiscard]] absl::Status WaitOnStream(CudaStream stream) {
    return DoWaitOnStream(stream);
  }

 protected:
  virtual absl::Status DoWait(absl::Time deadline) = 0;
  virtual absl::Status DoWaitOnStream(CudaStream /*stream*/) {
    return DoWait(absl::InfiniteFuture());
  }
};

// Returns a Work that is already completed with `status`. Used for argument
// errors and by test doubles.
[[nodiscard]] std::unique_ptr<Work> MakeCompletedWork(absl::Status status);

// The producer side of a Work, for backends. A backend creates one
// WorkCompletion per operation, hands out its MakeWork() handle and calls
// Complete() exactly once when the operation ends. Either side may be
// destroyed first (they share the completion state).
//
// Thread-safety: thread-safe.
class WorkCompletion {
 public:
  // `description` (e.g. "AllReduce #3 on rank 1") is quoted by Wait when the
  // wait deadline passes.
  explicit WorkCompletion(std::string description);
  WorkCompletion(WorkCompletion&&) = default;
  WorkCompletion& operator=(WorkCompletion&&) = default;
  ~WorkCompletion();

  // A handle observing this completion. May be called more than once.
  [[nodiscard]] std::unique_ptr<Work> MakeWork() const;

  // Completes the operation with `status` and wakes every waiter.
  // REQUIRES: called at most once.
  void Complete(absl::Status status);

  struct State;

 private:
  // Shared with every Work from MakeWork(): the handle and the backend have
  // independent lifetimes (a caller may drop the handle early; a backend may
  // be destroyed before the caller waits).
  std::shared_ptr<State> state_;
};

}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_WORK_H_
