#include "comm/inprocess/in_process_group.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/detached_status.h"
#include "base/mutex.h"
#include "base/thread.h"
#include "comm/argument_checks.h"
#include "comm/internal/reduce_kernels.h"

namespace chunkzero {
namespace comm {
namespace inprocess_internal {

// The local arithmetic every backend shares (comm/internal).
using ::chunkzero::comm::internal::ReduceInto;
using ::chunkzero::comm::internal::ReduceIntoEach;
namespace {

// One rank's side of a collective: what it asked for and its buffers. The
// meaning of send/recv per kind: Broadcast and AllReduce use recv (the
// buffer); Reduce uses send and, at the root, recv; AllGather and
// ReduceScatter use both; Barrier neither.
struct Entry {
  CollectiveCall call;
  const void* send = nullptr;
  void* recv = nullptr;
};

// Segment boundaries are multiples of this many elements (64 bytes of f16),
// so ranks writing neighbouring segments rarely share a cache line.
constexpr size_t kSegmentAlign = 32;

// First element of segment `r` when `count` elements are split over `n`
// ranks; segment r is [SegmentBegin(r), SegmentBegin(r + 1)).
size_t SegmentBegin(size_t count, int n, int r) {
  const size_t per = (count + n - 1) / n;
  const size_t aligned =
      (per + kSegmentAlign - 1) / kSegmentAlign * kSegmentAlign;
  return std::min(count, aligned * static_cast<size_t>(r));
}

char* Bytes(void* p, size_t offset) { return static_cast<char*>(p) + offset; }
const char* Bytes(const void* p, size_t offset) {
  return static_cast<const char*>(p) + offset;
}

std::string Describe(uint64_t seq, const CollectiveCall& call) {
  return absl::StrCat("collective #", seq, " ", call.ToString());
}

}  // namespace

// The rendezvous shared by all ranks of a world.
class WorldState {
 public:
  explicit WorldState(int world_size)
      : world_size_(world_size), last_joined_(world_size, -1) {}

  // Runs collective #seq for `rank` (called on that rank's worker) and
  // returns its status. Blocks until the collective is done on every rank or
  // has failed.
  absl::Status Run(int rank, uint64_t seq, const Entry& entry,
                   absl::Duration timeout);

  void Abort(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    AbortLocked(std::move(status));
  }

  absl::Status abort_status() const ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    return DetachedCopy(abort_status_);
  }

 private:
  // Rendezvous state of one collective. Fields are guarded by mu_, except
  // `entries`, which are written under mu_ before `all_arrived` is set and
  // only read (without the lock) after a rank has seen `all_arrived`.
  struct Slot {
    explicit Slot(int n) : entries(n), joined(n, false) {}
    std::vector<Entry> entries;
    std::vector<bool> joined;
    int arrived = 0;
    bool all_arrived = false;
    int finished = 0;  // Ranks that reached the final barrier.
    int departed = 0;
  };

  void AbortLocked(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // Stored detached: the caller may hand `status` to another thread.
    if (abort_status_.ok()) abort_status_ = DetachedCopy(status);
    cv_.SignalAll();
  }

  // Waits until all ranks have finished their share of `slot`'s data.
  void FinalBarrier(Slot* slot) ABSL_LOCKS_EXCLUDED(mu_);

  // Leaves `slot`; the last rank to leave frees it.
  void Depart(uint64_t seq, Slot* slot) ABSL_LOCKS_EXCLUDED(mu_);

  absl::Status TimeoutStatus(int rank, uint64_t seq, const Slot& slot,
                             absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Moves this rank's share of the data. Returns once this rank's share is
  // done and every rank has passed the final barrier.
  void Execute(int rank, Slot* slot);

  const int world_size_;
  mutable Mutex mu_;
  // Signalled on every arrival, barrier completion and abort.
  CondVar cv_;
  std::map<uint64_t, Slot> slots_ ABSL_GUARDED_BY(mu_);
  absl::Status abort_status_ ABSL_GUARDED_BY(mu_);
  // The last collective each rank joined (-1: none), for timeout messages.
  std::vector<int64_t> last_joined_ ABSL_GUARDED_BY(mu_);
};

absl::Status WorldState::TimeoutStatus(int rank, uint64_t seq, const Slot& slot,
                                       absl::Duration timeout) {
  std::vector<int> missing;
  for (int r = 0; r < world_size_; ++r) {
    if (!slot.joined[r]) missing.push_back(r);
  }
  std::string where;
  for (int r : missing) {
    absl::StrAppend(
        &where, where.empty() ? "" : ", ", "rank ", r,
        last_joined_[r] < 0
            ? " has joined no collective yet"
            : absl::StrCat(" last joined collective #", last_joined_[r]));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      Describe(seq, slot.entries[rank].call), " timed out on rank ", rank,
      " after ", absl::FormatDuration(timeout), " waiting for rank",
      missing.size() == 1 ? " " : "s ", absl::StrJoin(missing, ", "),
      " to join (", where, "); the world is now aborted"));
}

void WorldState::FinalBarrier(Slot* slot) {
  MutexLock lock(&mu_);
  if (++slot->finished == world_size_) cv_.SignalAll();
  while (slot->finished < world_size_) cv_.Wait(&mu_);
}

void WorldState::Depart(uint64_t seq, Slot* slot) {
  MutexLock lock(&mu_);
  if (++slot->departed == world_size_) slots_.erase(seq);
}

absl::Status WorldState::Run(int rank, uint64_t seq, const Entry& entry,
                             absl::Duration timeout) {
  Slot* slot;
  {
    MutexLock lock(&mu_);
    if (!abort_status_.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          Describe(seq, entry.call), " on rank ", rank,
          " not started: the world was aborted by an earlier failure: ",
          abort_status_.message()));
    }
    slot = &slots_.try_emplace(seq, world_size_).first->second;
    slot->entries[rank] = entry;
    slot->joined[rank] = true;
    last_joined_[rank] = static_cast<int64_t>(seq);
    if (++slot->arrived == world_size_) {
      slot->all_arrived = true;
      cv_.SignalAll();
    }
    const absl::Time deadline = absl::Now() + timeout;
    while (!slot->all_arrived) {
      if (!abort_status_.ok()) {
        // Another rank timed out (or the world is being destroyed): fail
        // with its code, quoting it.
        return absl::Status(
            abort_status_.code(),
            absl::StrCat(Describe(seq, entry.call), " on rank ", rank,
                         " failed: ", abort_status_.message()));
      }
      if (cv_.WaitWithDeadline(&mu_, deadline) && !slot->all_arrived &&
          abort_status_.ok()) {
        absl::Status status = TimeoutStatus(rank, seq, *slot, timeout);
        AbortLocked(status);
        return status;
      }
    }
  }

  // Every rank has arrived: every rank sees the same entries, so every rank
  // reaches the same verdict.
  const Entry& first = slot->entries[0];
  for (int r = 1; r < world_size_; ++r) {
    const Entry& other = slot->entries[r];
    if (!Matches(first.call, other.call)) {
      absl::Status status = absl::InvalidArgumentError(absl::StrCat(
          "collective #", seq, " mismatch: rank 0 called ",
          first.call.ToString(), ", rank ", r, " called ",
          other.call.ToString(),
          " (all ranks must issue the same collectives in the same order)"));
      Depart(seq, slot);
      return status;
    }
  }
  Execute(rank, slot);
  Depart(seq, slot);
  return absl::OkStatus();
}

void WorldState::Execute(int rank, Slot* slot) {
  const int n = world_size_;
  const std::vector<Entry>& e = slot->entries;
  const CollectiveCall& call = e[rank].call;
  const size_t es = ElementSize(call.dtype);
  const size_t count = call.count;
  const size_t begin = SegmentBegin(count, n, rank);
  const size_t len = SegmentBegin(count, n, rank + 1) - begin;
  std::vector<const void*> inputs(n);

  switch (call.kind) {
    case CollectiveKind::kBarrier:
      return;  // The rendezvous was the barrier.

    case CollectiveKind::kBroadcast: {
      // Rank r copies segment r of the root's buffer to every other rank.
      const void* src = Bytes(e[call.root].recv, begin * es);
      for (int k = 0; k < n; ++k) {
        if (k == call.root || len == 0) continue;
        std::memcpy(Bytes(e[k].recv, begin * es), src, len * es);
      }
      break;
    }

    case CollectiveKind::kReduce: {
      // Rank r reduces segment r of every send buffer into the root's recv.
      for (int k = 0; k < n; ++k) inputs[k] = Bytes(e[k].send, begin * es);
      ReduceInto(Bytes(e[call.root].recv, begin * es), inputs.data(), n, len,
                 call.dtype, call.op);
      break;
    }

    case CollectiveKind::kAllReduce: {
      // Rank r alone owns segment r of every buffer: it reduces that segment
      // of all buffers in rank order and writes the result into all of them,
      // tile by tile (one read and one write of each byte; no second pass).
      std::vector<void*> outputs(n);
      for (int k = 0; k < n; ++k) {
        inputs[k] = Bytes(e[k].recv, begin * es);
        outputs[k] = Bytes(e[k].recv, begin * es);
      }
      ReduceIntoEach(outputs.data(), n, inputs.data(), n, len, call.dtype,
                     call.op);
      break;
    }

    case CollectiveKind::kAllGather: {
      // Rank r pulls every rank's send into its own recv. Only this rank
      // writes its recv; in place, slot r already holds the data.
      for (int k = 0; k < n; ++k) {
        void* dst = Bytes(e[rank].recv, k * count * es);
        if (dst == e[k].send || count == 0) continue;
        std::memcpy(dst, e[k].send, count * es);
      }
      break;
    }

    case CollectiveKind::kReduceScatter: {
      // Rank r reduces slot r of every send into its recv. Only rank r reads
      // slot r, so the in-place form (recv == own slot r) is safe.
      for (int k = 0; k < n; ++k) {
        inputs[k] = Bytes(e[k].send, rank * count * es);
      }
      ReduceInto(e[rank].recv, inputs.data(), n, count, call.dtype, call.op);
      break;
    }
  }
  FinalBarrier(slot);
}

namespace {

// One queued collective.
struct Op {
  Op(uint64_t seq, Entry entry, absl::Duration timeout, int rank)
      : seq(seq),
        entry(entry),
        timeout(timeout),
        completion(absl::StrCat(Describe(seq, entry.call), " on rank ", rank)) {
  }
  const uint64_t seq;
  const Entry entry;
  const absl::Duration timeout;
  WorkCompletion completion;
};

}  // namespace

// Rank `rank`'s ProcessGroup: checks arguments, queues the collective for its
// worker thread, which runs the queue in order through WorldState::Run.
class InProcessGroup final : public ProcessGroup {
 public:
  InProcessGroup(WorldState* world, int rank, int size)
      : world_(world), rank_(rank), size_(size) {}

  // Starts the worker thread: ResourceExhausted where the kernel refuses
  // one (base/thread.h). REQUIRES: called once, before any collective.
  absl::Status Start() {
    absl::StatusOr<std::thread> worker =
        StartThread(absl::StrCat("the in-process comm worker of rank ", rank_),
                    [this] { WorkerLoop(); });
    if (!worker.ok()) return worker.status();
    worker_ = *std::move(worker);
    return absl::OkStatus();
  }

  // Joins the worker. REQUIRES: the world is aborted (so that a collective
  // waiting in the rendezvous returns).
  ~InProcessGroup() override {
    StopAndCancelQueued("its InProcessWorld was destroyed");
    JoinWorker();
  }

  // Fails every queued (not yet started) collective with Cancelled, saying
  // `why` ("its InProcessWorld was destroyed"), makes later calls fail the
  // same way, and lets the worker exit once its current collective (if any)
  // returns. Idempotent: the first `why` stays.
  void StopAndCancelQueued(absl::string_view why) ABSL_LOCKS_EXCLUDED(mu_) {
    std::deque<std::unique_ptr<Op>> cancelled;
    std::string reason;
    {
      MutexLock lock(&mu_);
      if (!stopping_) stop_reason_ = std::string(why);
      stopping_ = true;
      reason = stop_reason_;
      cancelled.swap(queue_);
      cv_.SignalAll();
    }
    for (auto& op : cancelled) {
      op->completion.Complete(absl::CancelledError(
          absl::StrCat(Describe(op->seq, op->entry.call), " on rank ", rank_,
                       " cancelled before it started: ", reason)));
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::string_view backend_name() const override { return "inprocess"; }
  bool SupportsDType(DType dtype) const override {
    return IsValidDType(dtype);  // The reduce kernels take every dtype.
  }

 protected:
  std::unique_ptr<Work> DoBroadcast(MutableBuffer buffer,
                                    const BroadcastOptions& options) override {
    return Enqueue({DescribeBroadcast(buffer, options), nullptr, buffer.data},
                   options.timeout);
  }

  std::unique_ptr<Work> DoReduce(ConstBuffer send, MutableBuffer recv,
                                 const ReduceOptions& options) override {
    return Enqueue({DescribeReduce(send, options), send.data,
                    rank_ == options.root ? recv.data : nullptr},
                   options.timeout);
  }

  std::unique_ptr<Work> DoAllReduce(MutableBuffer buffer,
                                    const AllReduceOptions& options) override {
    return Enqueue(
        {DescribeAllReduce(buffer, options), buffer.data, buffer.data},
        options.timeout);
  }

  std::unique_ptr<Work> DoAllGather(ConstBuffer send, MutableBuffer recv,
                                    const AllGatherOptions& options) override {
    return Enqueue({DescribeAllGather(send, options), send.data, recv.data},
                   options.timeout);
  }

  std::unique_ptr<Work> DoReduceScatter(
      ConstBuffer send, MutableBuffer recv,
      const ReduceScatterOptions& options) override {
    return Enqueue({DescribeReduceScatter(recv, options), send.data, recv.data},
                   options.timeout);
  }

  std::unique_ptr<Work> DoBarrier(const BarrierOptions& options) override {
    return Enqueue({DescribeBarrier(options), nullptr, nullptr},
                   options.timeout);
  }

  // Cancels what is queued here, aborts the world (so that every rank's
  // collective waiting in the rendezvous returns, and every later one
  // fails) and joins the worker: once it has returned, this rank's collective
  // in flight, if any, is done with every buffer (a collective past its
  // rendezvous ends with a barrier of all its ranks).
  void DoAbort(const absl::Status& cause) override {
    // The queue first, so that what was queued is cancelled, never picked
    // up by the worker between the two steps.
    StopAndCancelQueued(
        absl::StrCat("the group was aborted: ", cause.message()));
    world_->Abort(cause);
    JoinWorker();
  }

 private:
  void JoinWorker() ABSL_LOCKS_EXCLUDED(join_mu_) {
    MutexLock lock(&join_mu_);
    if (worker_.joinable()) worker_.join();
  }

  std::unique_ptr<Work> Enqueue(const Entry& entry, absl::Duration timeout)
      ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    if (stopping_) {
      return MakeCompletedWork(absl::CancelledError(
          absl::StrCat("rank ", rank_, ": ", entry.call.ToString(),
                       " issued after the group stopped: ", stop_reason_)));
    }
    auto op = std::make_unique<Op>(next_seq_++, entry, timeout, rank_);
    std::unique_ptr<Work> work = op->completion.MakeWork();
    queue_.push_back(std::move(op));
    cv_.SignalAll();
    return work;
  }

  void WorkerLoop() ABSL_LOCKS_EXCLUDED(mu_) {
    while (true) {
      std::unique_ptr<Op> op;
      {
        MutexLock lock(&mu_);
        while (queue_.empty() && !stopping_) cv_.Wait(&mu_);
        if (queue_.empty()) return;
        op = std::move(queue_.front());
        queue_.pop_front();
      }
      absl::Status status = world_->Run(rank_, op->seq, op->entry, op->timeout);
      op->completion.Complete(std::move(status));
    }
  }

  WorldState* const world_;
  const int rank_;
  const int size_;
  Mutex mu_;
  CondVar cv_;  // Signalled when queue_ grows or stopping_ is set.
  std::deque<std::unique_ptr<Op>> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::string stop_reason_ ABSL_GUARDED_BY(mu_);
  // Held while joining worker_ (Abort and the destructor may both).
  Mutex join_mu_;
  std::thread worker_;
};

}  // namespace inprocess_internal

InProcessWorld::InProcessWorld(int world_size)
    : world_size_(std::max(world_size, 0)),
      requested_size_(world_size),
      state_(std::make_unique<inprocess_internal::WorldState>(world_size_)) {
  groups_.reserve(world_size_);
  for (int r = 0; r < world_size_; ++r) {
    groups_.push_back(std::make_unique<inprocess_internal::InProcessGroup>(
        state_.get(), r, world_size_));
    if (start_status_.ok()) start_status_ = groups_.back()->Start();
  }
}

InProcessWorld::~InProcessWorld() {
  // First stop every queue (so no worker starts another collective), then
  // abort (so collectives waiting in the rendezvous return Cancelled), then
  // join the workers.
  for (auto& group : groups_) {
    group->StopAndCancelQueued("its InProcessWorld was destroyed");
  }
  state_->Abort(absl::CancelledError("the InProcessWorld was destroyed"));
  groups_.clear();
}

absl::StatusOr<ProcessGroup*> InProcessWorld::group(int rank) {
  if (!start_status_.ok()) {
    return absl::Status(start_status_.code(),
                        absl::StrCat("InProcessWorld of ", world_size_,
                                     " ranks: ", start_status_.message()));
  }
  if (rank < 0 || rank >= world_size_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "InProcessWorld::group: rank ", rank, " is not in a world of size ",
        requested_size_,
        world_size_ == 0 ? " (a world needs at least one rank)" : ""));
  }
  return groups_[rank].get();
}

void InProcessWorld::Abort(absl::Status status) {
  state_->Abort(std::move(status));
}

absl::Status InProcessWorld::abort_status() const {
  return state_->abort_status();
}

}  // namespace comm
}  // namespace chunkzero
