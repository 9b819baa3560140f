#include "comm/nccl/nccl_process_group.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <exception>
#include <filesystem>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/mutex.h"
#include "base/status_macros.h"
#include "base/thread.h"
#include "comm/argument_checks.h"
#include "comm/internal/deadline.h"
#include "comm/rendezvous/job_config.h"
#include "comm/rendezvous/rendezvous_join.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/rendezvous/store.h"

namespace chunkzero {
namespace comm {
namespace nccl_internal {
namespace {

// Rendezvous keys (comm/rendezvous/rendezvous_join.h). FileStore keys are
// file names: no '/'.
constexpr char kJoinKeyPrefix[] = "chunkzero_nccl_joined_";
constexpr char kUniqueIdKey[] = "chunkzero_nccl_unique_id";

// Polls Ready until the communicator's last call has finished: spins
// briefly (an enqueue takes microseconds), then naps up to 1 ms. The
// error Ready reports, or DeadlineExceeded (no message) at `deadline`.
absl::Status AwaitReady(NcclApi& api, NcclApi::Comm comm, absl::Time deadline) {
  absl::Duration nap = absl::Microseconds(1);
  while (true) {
    absl::StatusOr<bool> ready = api.Ready(comm);
    if (!ready.ok()) return ready.status();
    if (*ready) return absl::OkStatus();
    if (absl::Now() >= deadline) return absl::DeadlineExceededError("");
    absl::SleepFor(nap);
    nap = std::min(nap * 2, absl::Milliseconds(1));
  }
}

}  // namespace

// One issued collective until it completes.
struct PendingOp {
  std::string description;  // "rank 1: AllReduce #3 (f32, count=4, op=sum)"
  CudaEvent event = nullptr;
  absl::Time deadline;
  absl::Duration timeout;
  WorkCompletion completion;
};

// The state shared by the group, its watchdog and its Works (which may
// outlive the group). Every NCCL and CUDA call goes through here, under
// mu_.
class Core : public std::enable_shared_from_this<Core> {
 public:
  Core(int rank, std::unique_ptr<NcclApi> api, NcclApi::Comm comm,
       CudaStream comm_stream, void* barrier_word)
      : rank_(rank),
        api_(std::move(api)),
        comm_(comm),
        comm_stream_(comm_stream),
        barrier_word_(barrier_word) {}

  CudaStream comm_stream() const { return comm_stream_; }

  // Makes `stream` wait for `op` if it is still pending; false if it was
  // not (its status is then final).
  absl::StatusOr<bool> WaitOnStream(const std::shared_ptr<PendingOp>& op,
                                    CudaStream stream) {
    MutexLock lock(&mu_);
    for (const std::shared_ptr<PendingOp>& pending : pending_) {
      if (pending != op) continue;
      CZ_RETURN_IF_ERROR(api_->StreamWaitEvent(stream, op->event),
                         op->description);
      return true;
    }
    return false;
  }
  void* barrier_word() const { return barrier_word_; }

  absl::Status abort_status() const {
    MutexLock lock(&mu_);
    return abort_status_;
  }

  std::unique_ptr<Work> Issue(const CollectiveCall& described,
                              const NcclCall& call, absl::Duration timeout);
  std::unique_ptr<Work> IssueLocked(const CollectiveCall& described,
                                    const NcclCall& call,
                                    absl::Duration timeout);

  // Completes the collectives that have finished; aborts on an error or a
  // passed deadline.
  void Poll() {
    {
      MutexLock lock(&mu_);
      PollLocked();
    }
    AbortIfDue();
  }

  // Fails every pending collective with `cause` and aborts the
  // communicator (once: a group already aborted keeps its first cause).
  void Abort(const absl::Status& cause) {
    {
      MutexLock lock(&mu_);
      if (closed_) return;
      PollLocked();
      if (abort_status_.ok()) AbortLocked(cause);
    }
    AbortIfDue();
  }

  // The group is going away: collectives still pending fail with Cancelled
  // (Works still held see it), and the communicator is aborted, not
  // destroyed: ncclCommDestroy waits for every peer to be quiescent and
  // would hang behind a dead one.
  void Close() {
    {
      MutexLock lock(&mu_);
      if (closed_) return;
      PollLocked();
      if (abort_status_.ok()) {
        FailPendingLocked(absl::CancelledError(
            absl::StrCat("rank ", rank_, ": the NCCL group was destroyed")));
        abort_due_ = true;
      }
      closed_ = true;
    }
    AbortIfDue();
    api_->Free(barrier_word_);
    api_->DestroyStream(comm_stream_);
  }

 private:
  void PollLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records `cause` as the abort status and fails every pending Work with
  // it; the communicator is aborted by AbortIfDue, outside the lock, since
  // ncclCommAbort can block and waiters must still see their Works fail.
  void AbortLocked(absl::Status cause) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailPendingLocked(const absl::Status& cause)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AbortIfDue() ABSL_LOCKS_EXCLUDED(mu_);

  const int rank_;
  const std::unique_ptr<NcclApi> api_;
  const NcclApi::Comm comm_;
  const CudaStream comm_stream_;
  void* const barrier_word_;

  mutable Mutex mu_;
  std::deque<std::shared_ptr<PendingOp>> pending_ ABSL_GUARDED_BY(mu_);
  absl::Status abort_status_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool abort_due_ ABSL_GUARDED_BY(mu_) =
      false;  // ncclCommAbort not yet called.
  uint64_t issued_ ABSL_GUARDED_BY(mu_) = 0;
};

namespace {

// A Work that polls its collective's event while it waits, so that a
// caller sees completion at once rather than at the watchdog's next look.
class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<Core> core, std::shared_ptr<PendingOp> op,
           std::unique_ptr<Work> done)
      : core_(std::move(core)), op_(std::move(op)), done_(std::move(done)) {}

  bool IsCompleted() override {
    core_->Poll();
    return done_->IsCompleted();
  }

 protected:
  absl::Status DoWait(absl::Time deadline) override {
    // Spin briefly (short collectives), then back off to 1 ms naps.
    absl::Duration nap = absl::Microseconds(5);
    while (true) {
      core_->Poll();
      if (done_->IsCompleted()) return done_->Wait();
      const absl::Time now = absl::Now();
      if (now >= deadline) return done_->Wait(deadline);
      const absl::Status waited = done_->Wait(std::min(deadline, now + nap));
      if (done_->IsCompleted()) return waited;
      nap = std::min(nap * 2, absl::Milliseconds(1));
    }
  }

  absl::Status DoWaitOnStream(CudaStream stream) override {
    absl::StatusOr<bool> waiting = core_->WaitOnStream(op_, stream);
    if (!waiting.ok()) return waiting.status();
    if (*waiting) return absl::OkStatus();
    return done_->Wait();  // Completed already: its final status.
  }

 private:
  std::shared_ptr<Core> core_;
  std::shared_ptr<PendingOp> op_;
  std::unique_ptr<Work> done_;
};

}  // namespace

std::unique_ptr<Work> Core::Issue(const CollectiveCall& described,
                                  const NcclCall& call,
                                  absl::Duration timeout) {
  std::unique_ptr<Work> work = IssueLocked(described, call, timeout);
  AbortIfDue();
  return work;
}

std::unique_ptr<Work> Core::IssueLocked(const CollectiveCall& described,
                                        const NcclCall& call,
                                        absl::Duration timeout) {
  MutexLock lock(&mu_);
  const std::string description =
      absl::StrCat("rank ", rank_, ": ", CollectiveKindName(described.kind),
                   " #", issued_++, " ", described.ToString(), " [nccl]");
  if (closed_) {
    return MakeCompletedWork(absl::FailedPreconditionError(
        absl::StrCat(description, ": the group is closed")));
  }
  if (!abort_status_.ok()) {
    return MakeCompletedWork(absl::FailedPreconditionError(
        absl::StrCat(description,
                     ": the group was aborted by an earlier "
                     "failure: ",
                     abort_status_.message())));
  }
  // The input was produced on the compute stream (docs/DESIGN.md,
  // "Streams"): the collective waits for it there, the host does not.
  absl::Status status = api_->StreamWaitStream(comm_stream_, kComputeStream);
  if (status.ok()) status = api_->Enqueue(comm_, call, comm_stream_);
  if (status.ok()) {
    // A non-blocking communicator may still be enqueueing: NCCL allows no
    // other call, and no event on its stream, until it has finished.
    status = AwaitReady(*api_, comm_, absl::Now() + timeout);
    if (absl::IsDeadlineExceeded(status)) {
      status = absl::DeadlineExceededError(
          absl::StrCat("still being enqueued after its timeout of ",
                       absl::FormatDuration(timeout),
                       "; the NCCL communicator was aborted"));
    }
  }
  absl::StatusOr<CudaEvent> event = status.ok()
                                        ? api_->RecordEvent(comm_stream_)
                                        : absl::StatusOr<CudaEvent>(status);
  if (!event.ok()) {
    // The ranks are out of step now: nothing after this can match.
    const absl::Status failed =
        absl::Status(event.status().code(),
                     absl::StrCat(description, ": ", event.status().message()));
    AbortLocked(failed);
    return MakeCompletedWork(failed);
  }
  auto op = std::make_shared<PendingOp>(
      PendingOp{description, *event, absl::Now() + timeout, timeout,
                WorkCompletion(description)});
  std::unique_ptr<Work> done = op->completion.MakeWork();
  pending_.push_back(op);
  return std::make_unique<NcclWork>(shared_from_this(), std::move(op),
                                    std::move(done));
}

void Core::PollLocked() {
  if (closed_ || !abort_status_.ok()) return;
  if (!pending_.empty()) {
    if (absl::Status async = api_->AsyncError(comm_); !async.ok()) {
      AbortLocked(absl::Status(
          async.code(), absl::StrCat(pending_.front()->description,
                                     ": NCCL reported an asynchronous error: ",
                                     async.message())));
      return;
    }
  }
  const absl::Time now = absl::Now();
  while (!pending_.empty()) {
    PendingOp& op = *pending_.front();
    absl::StatusOr<bool> done = api_->EventDone(op.event);
    if (!done.ok()) {
      AbortLocked(absl::Status(
          done.status().code(),
          absl::StrCat(op.description, ": ", done.status().message())));
      return;
    }
    if (!*done) {
      if (now >= op.deadline) {
        AbortLocked(absl::DeadlineExceededError(absl::StrCat(
            op.description, ": not complete within its timeout of ",
            absl::FormatDuration(op.timeout),
            "; the NCCL communicator was aborted")));
      }
      return;  // Later collectives finish after this one (one stream).
    }
    api_->ReleaseEvent(op.event);
    op.completion.Complete(absl::OkStatus());
    pending_.pop_front();
  }
}

void Core::AbortLocked(absl::Status cause) {
  abort_status_ = cause;
  abort_due_ = true;
  FailPendingLocked(cause);
}

void Core::FailPendingLocked(const absl::Status& cause) {
  bool first = true;
  for (const std::shared_ptr<PendingOp>& op : pending_) {
    api_->ReleaseEvent(op->event);
    op->completion.Complete(
        first && !absl::IsCancelled(cause)
            ? cause
            : absl::Status(
                  cause.code(),
                  absl::StrCat(op->description,
                               ": aborted with the group: ", cause.message())));
    first = false;
  }
  pending_.clear();
}

void Core::AbortIfDue() {
  {
    MutexLock lock(&mu_);
    if (!abort_due_) return;
    abort_due_ = false;
  }
  // The communicator is gone whatever Abort says.
  api_->Abort(comm_).IgnoreError();
}

// Polls the core every `interval` until stopped.
class Watchdog {
 public:
  // ResourceExhausted where the kernel refuses a thread (base/thread.h).
  static absl::StatusOr<std::unique_ptr<Watchdog>> Start(
      int rank, std::shared_ptr<Core> core, absl::Duration interval) {
    auto watchdog = std::unique_ptr<Watchdog>(new Watchdog());
    Watchdog* w = watchdog.get();
    absl::StatusOr<std::thread> thread = StartThread(
        absl::StrCat("the NCCL watchdog of rank ", rank),
        [w, core = std::move(core), interval] {
          while (true) {
            {
              MutexLock lock(&w->mu_);
              if (w->stop_) return;
              w->cv_.WaitWithDeadline(&w->mu_, absl::Now() + interval);
              if (w->stop_) return;
            }
            core->Poll();
          }
        });
    if (!thread.ok()) return thread.status();
    watchdog->thread_ = *std::move(thread);
    return watchdog;
  }
  ~Watchdog() {
    {
      MutexLock lock(&mu_);
      stop_ = true;
      cv_.SignalAll();
    }
    if (thread_.joinable()) thread_.join();  // Not when Start failed.
  }

 private:
  Watchdog() = default;

  Mutex mu_;
  CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace nccl_internal

namespace {

using nccl_internal::Core;

absl::Status Invalid(absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("NcclProcessGroup::Create: ", what));
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclProcessGroup>> NcclProcessGroup::Create(
    int rank, int size, int device_index, gloo::rendezvous::Store& store,
    const NcclOptions& options) {
  if (device_index < 0) {
    return Invalid(absl::StrCat("device index ", device_index, " is negative"));
  }
  return CreateWithApi(rank, size, MakeCudaNcclApi(device_index), store,
                       options);
}

absl::StatusOr<std::unique_ptr<NcclProcessGroup>>
NcclProcessGroup::CreateWithFileStore(int rank, int size, int device_index,
                                      const std::string& directory,
                                      const NcclOptions& options) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) {
    return Invalid(
        absl::StrCat("cannot create ", directory, ": ", error.message()));
  }
  std::unique_ptr<gloo::rendezvous::FileStore> store;
  try {
    store = std::make_unique<gloo::rendezvous::FileStore>(directory);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "NcclProcessGroup::CreateWithFileStore: ", directory, ": ", e.what()));
  }
  absl::StatusOr<std::unique_ptr<NcclProcessGroup>> group =
      Create(rank, size, device_index, *store, options);
  if (!group.ok()) {
    return absl::Status(
        group.status().code(),
        absl::StrCat(group.status().message(), " [rendezvous directory ",
                     directory, "]"));
  }
  return group;
}

absl::StatusOr<std::unique_ptr<NcclProcessGroup>>
NcclProcessGroup::CreateWithApi(int rank, int size,
                                std::unique_ptr<NcclApi> api,
                                gloo::rendezvous::Store& store,
                                const NcclOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return Invalid(
        absl::StrCat("rank ", rank, " is not in [0, size) for size ", size));
  }
  if (options.timeout <= absl::ZeroDuration() ||
      options.watchdog_interval <= absl::ZeroDuration()) {
    return Invalid(absl::StrCat(
        "timeout ", absl::FormatDuration(options.timeout),
        " and watchdog interval ",
        absl::FormatDuration(options.watchdog_interval), " must be positive"));
  }
  const absl::Time deadline = absl::Now() + options.timeout;
  const std::string where =
      absl::StrCat("NcclProcessGroup::Create: rank ", rank, " of ", size);
  // Join, and see every rank join, before NCCL's bootstrap: a rank that
  // never comes is named, and with a job config, a rank started otherwise.
  std::string unique_id;
  if (options.job_config.empty()) {
    if (absl::Status s =
            comm_internal::AnnounceJoin(store, nccl_internal::kJoinKeyPrefix,
                                        rank, absl::StrCat(size), where);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = comm_internal::AwaitJoins(
            store, nccl_internal::kJoinKeyPrefix, rank, size, deadline,
            options.timeout, where);
        !s.ok()) {
      return s;
    }
  } else if (absl::Status s = comm_internal::AgreeOnJobConfig(
                 store, nccl_internal::kJoinKeyPrefix, rank, size,
                 options.job_config, deadline, options.timeout,
                 "NcclProcessGroup::Create", where);
             !s.ok()) {
    return s;
  }
  try {
    if (rank == 0) {
      absl::StatusOr<std::string> id = api->GetUniqueId();
      if (!id.ok()) {
        return absl::Status(id.status().code(),
                            absl::StrCat(where, ": ", id.status().message()));
      }
      unique_id = *id;
      store.set(nccl_internal::kUniqueIdKey,
                std::vector<char>(unique_id.begin(), unique_id.end()));
    } else {
      store.wait({nccl_internal::kUniqueIdKey},
                 comm_internal::MillisecondsLeft(deadline));
      const std::vector<char> id = store.get(nccl_internal::kUniqueIdKey);
      unique_id.assign(id.begin(), id.end());
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat(where, ": rendezvous store: ", e.what()));
  }
  absl::StatusOr<NcclApi::Comm> comm = api->InitRank(size, unique_id, rank);
  if (!comm.ok()) {
    return absl::Status(comm.status().code(),
                        absl::StrCat(where, ": ", comm.status().message()));
  }
  // Every rank joined the rendezvous, but one may die (or fail to reach the
  // others) before NCCL's own bootstrap completes: the deadline holds here
  // too, which a blocking ncclCommInitRank could not promise.
  if (absl::Status ready = nccl_internal::AwaitReady(*api, *comm, deadline);
      !ready.ok()) {
    api->Abort(*comm).IgnoreError();
    if (absl::IsDeadlineExceeded(ready)) {
      return absl::DeadlineExceededError(absl::StrCat(
          where, ": the NCCL communicator was not ready within the timeout of ",
          absl::FormatDuration(options.timeout),
          " (every rank had joined the rendezvous: one has died since, or "
          "the ranks cannot reach each other); it was aborted"));
    }
    return absl::Status(ready.code(),
                        absl::StrCat(where, ": NCCL communicator init failed: ",
                                     ready.message()));
  }
  absl::StatusOr<CudaStream> stream = api->CreateStream();
  absl::StatusOr<void*> word = stream.ok()
                                   ? api->Malloc(sizeof(int32_t))
                                   : absl::StatusOr<void*>(stream.status());
  if (!word.ok()) {
    if (stream.ok()) api->DestroyStream(*stream);
    api->Abort(*comm).IgnoreError();
    return absl::Status(word.status().code(),
                        absl::StrCat(where, ": ", word.status().message()));
  }
  auto core =
      std::make_shared<Core>(rank, std::move(api), *comm, *stream, *word);
  absl::StatusOr<std::unique_ptr<nccl_internal::Watchdog>> watchdog =
      nccl_internal::Watchdog::Start(rank, core, options.watchdog_interval);
  if (!watchdog.ok()) {
    core->Close();
    return absl::Status(watchdog.status().code(),
                        absl::StrCat(where, ": ", watchdog.status().message()));
  }
  return std::unique_ptr<NcclProcessGroup>(
      new NcclProcessGroup(rank, size, std::move(core), *std::move(watchdog)));
}

NcclProcessGroup::NcclProcessGroup(
    int rank, int size, std::shared_ptr<nccl_internal::Core> core,
    std::unique_ptr<nccl_internal::Watchdog> watchdog)
    : rank_(rank),
      size_(size),
      core_(std::move(core)),
      watchdog_(std::move(watchdog)) {}

NcclProcessGroup::~NcclProcessGroup() {
  watchdog_.reset();
  core_->Close();
}

void NcclProcessGroup::DoAbort(const absl::Status& cause) {
  core_->Abort(cause);
}

bool NcclProcessGroup::SupportsDType(DType dtype) const {
  return static_cast<int>(dtype) < kNumDTypes;
}

CudaStream NcclProcessGroup::comm_stream() const {
  return core_->comm_stream();
}

absl::Status NcclProcessGroup::abort_status() const {
  return core_->abort_status();
}

std::unique_ptr<Work> NcclProcessGroup::DoBroadcast(
    MutableBuffer buffer, const BroadcastOptions& options) {
  NcclCall call{CollectiveKind::kBroadcast,
                buffer.data,
                buffer.data,
                buffer.count,
                buffer.dtype,
                ReduceOp::kSum,
                options.root};
  return core_->Issue(DescribeBroadcast(buffer, options), call,
                      options.timeout);
}

std::unique_ptr<Work> NcclProcessGroup::DoReduce(ConstBuffer send,
                                                 MutableBuffer recv,
                                                 const ReduceOptions& options) {
  NcclCall call{CollectiveKind::kReduce,
                send.data,
                rank_ == options.root ? recv.data : nullptr,
                send.count,
                send.dtype,
                options.op,
                options.root};
  return core_->Issue(DescribeReduce(send, options), call, options.timeout);
}

std::unique_ptr<Work> NcclProcessGroup::DoAllReduce(
    MutableBuffer buffer, const AllReduceOptions& options) {
  NcclCall call{CollectiveKind::kAllReduce,
                buffer.data,
                buffer.data,
                buffer.count,
                buffer.dtype,
                options.op,
                0};
  return core_->Issue(DescribeAllReduce(buffer, options), call,
                      options.timeout);
}

std::unique_ptr<Work> NcclProcessGroup::DoAllGather(
    ConstBuffer send, MutableBuffer recv, const AllGatherOptions& options) {
  NcclCall call{CollectiveKind::kAllGather,
                send.data,
                recv.data,
                send.count,
                send.dtype,
                ReduceOp::kSum,
                0};
  return core_->Issue(DescribeAllGather(send, options), call, options.timeout);
}

std::unique_ptr<Work> NcclProcessGroup::DoReduceScatter(
    ConstBuffer send, MutableBuffer recv, const ReduceScatterOptions& options) {
  NcclCall call{CollectiveKind::kReduceScatter,
                send.data,
                recv.data,
                recv.count,
                recv.dtype,
                options.op,
                0};
  return core_->Issue(DescribeReduceScatter(recv, options), call,
                      options.timeout);
}

std::unique_ptr<Work> NcclProcessGroup::DoBarrier(
    const BarrierOptions& options) {
  NcclCall call{CollectiveKind::kBarrier,
                core_->barrier_word(),
                core_->barrier_word(),
                1,
                DType::kI32,
                ReduceOp::kSum,
                0};
  return core_->Issue(DescribeBarrier(options), call, options.timeout);
}

}  // namespace comm
}  // namespace chunkzero
