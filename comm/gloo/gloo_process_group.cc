#include "comm/gloo/gloo_process_group.h"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/detached_status.h"
#include "base/mutex.h"
#include "base/status_macros.h"
#include "base/thread.h"
#include "comm/argument_checks.h"
#include "comm/gloo/peer_probe.h"
#include "comm/gloo/shared_segments.h"
#include "comm/gloo/timed_file_store.h"
#include "comm/internal/deadline.h"
#include "comm/internal/gloo_timeout.h"
#include "comm/internal/reduce_kernels.h"
#include "comm/internal/rendezvous_join.h"
#include "gloo/allgather.h"
#include "gloo/allgatherv.h"
#include "gloo/alltoall.h"
#include "gloo/alltoallv.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/common/logging.h"
#include "gloo/gather.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"
#include "gloo/types.h"

namespace chunkzero {
namespace comm {
namespace gloo_internal {

absl::Status CheckResolvable(const std::string& hostname) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int error = getaddrinfo(hostname.c_str(), nullptr, &hints, &result);
  if (result != nullptr) freeaddrinfo(result);
  if (error != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", hostname, ": ", gai_strerror(error)));
  }
  return absl::OkStatus();
}
namespace {

// The reference reduction (see reduce_kernels.h): shared with the in-process
// backend so that both produce the same bits.
using ::chunkzero::comm::internal::ReduceInto;

// Gloo's own algorithms use slot prefixes 0x01..0x08; the header exchange
// and the shared-memory path's two barriers get their own so that they never
// match those messages or each other.
constexpr uint8_t kHeaderSlotPrefix = 0x7c;
constexpr uint8_t kWrittenSlotPrefix = 0x7d;
constexpr uint8_t kReducedSlotPrefix = 0x7e;

// Prefix of the rendezvous key a rank sets in the store when it joins
// (comm/internal/rendezvous_join.h).
constexpr char kJoinKeyPrefix[] = "chunkzero_gloo_joined_";

// What a rank sends its peers before collective #k (see the header comment).
// Fixed size and plain bytes, so every rank can post its receives up front.
// Both ends are the same binary on little-endian hosts.
struct CallHeader {
  uint8_t kind;
  uint8_t dtype;
  uint8_t op;
  uint8_t flags;  // kTagTruncated | kSharedMemoryReady.
  int32_t root;
  uint64_t count;
  uint64_t tag_hash;  // FNV-1a of the whole tag.
  char tag_prefix[40];
};
static_assert(sizeof(CallHeader) == 64, "CallHeader must have no padding");

// CallHeader::flags.
constexpr uint8_t kTagTruncated = 1;  // tag_prefix holds only part of it.
// The sender's shared-memory segment holds this collective's data.
constexpr uint8_t kSharedMemoryReady = 2;

uint64_t Fnv1a(absl::string_view s) {
  uint64_t h = 14695981039346656037ull;
  for (const char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  return h;
}

CallHeader MakeHeader(const CollectiveCall& call) {
  CallHeader h;
  std::memset(&h, 0, sizeof(h));
  h.kind = static_cast<uint8_t>(call.kind);
  h.dtype = static_cast<uint8_t>(call.dtype);
  h.op = static_cast<uint8_t>(call.op);
  h.root = call.root;
  h.count = call.count;
  h.tag_hash = Fnv1a(call.tag);
  const size_t n = std::min(call.tag.size(), sizeof(h.tag_prefix));
  std::memcpy(h.tag_prefix, call.tag.data(), n);
  if (call.tag.size() > sizeof(h.tag_prefix)) h.flags |= kTagTruncated;
  return h;
}

// The call a header describes, for comparison and messages (a long tag comes
// back as its prefix followed by "...").
CollectiveCall CallFromHeader(const CallHeader& h) {
  CollectiveCall call;
  call.kind = static_cast<CollectiveKind>(h.kind);
  call.dtype = static_cast<DType>(h.dtype);
  call.op = static_cast<ReduceOp>(h.op);
  call.root = h.root;
  call.count = h.count;
  call.tag.assign(h.tag_prefix, strnlen(h.tag_prefix, sizeof(h.tag_prefix)));
  if (h.flags & kTagTruncated) call.tag += "...";
  return call;
}

bool HeadersMatch(const CallHeader& a, const CallHeader& b) {
  return a.tag_hash == b.tag_hash &&
         Matches(CallFromHeader(a), CallFromHeader(b));
}

std::string Describe(uint64_t seq, const CollectiveCall& call) {
  return absl::StrCat("collective #", seq, " ", call.ToString());
}

// Runs `fn`, turning any exception into a status whose message starts with
// `context`. Gloo signals every failure by throwing; none may escape a
// worker thread (that would terminate the process).
template <typename Fn>
absl::Status CatchGloo(const std::string& context, Fn&& fn) {
  try {
    return fn();
  } catch (const gloo::IoException& e) {
    const absl::StatusCode code = comm_internal::IsGlooTimeoutMessage(e.what())
                                      ? absl::StatusCode::kDeadlineExceeded
                                      : absl::StatusCode::kUnavailable;
    return absl::Status(code, absl::StrCat(context, ": ", e.what()));
  } catch (const gloo::EnforceNotMet& e) {
    return absl::InternalError(
        absl::StrCat(context, ": gloo assertion failed: ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(context, ": ", e.what()));
  } catch (...) {
    return absl::UnknownError(
        absl::StrCat(context, ": unknown exception from gloo"));
  }
}

// One queued collective. `send` and `recv` per kind as in the in-process
// backend: Broadcast and AllReduce use recv (the buffer); Reduce uses send
// and, at the root, recv; AllGather and ReduceScatter both; Barrier neither.
struct Op {
  Op(uint64_t seq, CollectiveCall call, const void* send, void* recv,
     absl::Duration timeout, int rank)
      : seq(seq),
        call(std::move(call)),
        send(send),
        recv(recv),
        timeout(timeout),
        completion(absl::StrCat(Describe(seq, this->call), " on rank ", rank)) {
  }
  const uint64_t seq;
  const CollectiveCall call;
  const void* const send;
  void* const recv;
  const absl::Duration timeout;
  WorkCompletion completion;
};

uint8_t* Bytes(void* p, size_t offset) {
  return static_cast<uint8_t*>(p) + offset;
}

}  // namespace

// The worker thread and the Gloo context of one group.
class Worker {
 public:
  Worker(int rank, int size, std::shared_ptr<gloo::rendezvous::Context> context,
         std::unique_ptr<SharedSegments> shared_memory,
         size_t min_shared_memory_bytes, std::unique_ptr<PeerProbe> probe)
      : rank_(rank),
        size_(size),
        context_(std::move(context)),
        shared_memory_(std::move(shared_memory)),
        min_shared_memory_bytes_(min_shared_memory_bytes),
        probe_(std::move(probe)) {}

  // Starts the worker thread: ResourceExhausted where the kernel refuses
  // one (base/thread.h). REQUIRES: called once, before Enqueue.
  absl::Status Start() {
    absl::StatusOr<std::thread> thread =
        StartThread(absl::StrCat("the Gloo worker thread of rank ", rank_),
                    [this] { Loop(); });
    if (!thread.ok()) return thread.status();
    thread_ = *std::move(thread);
    return absl::OkStatus();
  }

  ~Worker() {
    std::deque<std::unique_ptr<Op>> cancelled;
    bool in_flight;
    {
      MutexLock lock(&mu_);
      stopping_ = true;
      cancelled.swap(queue_);
      in_flight = in_flight_;
      cv_.SignalAll();
    }
    for (auto& op : cancelled) {
      op->completion.Complete(absl::CancelledError(
          absl::StrCat(Describe(op->seq, op->call), " on rank ", rank_,
                       " cancelled: its GlooProcessGroup was destroyed before "
                       "it started")));
    }
    if (in_flight) AbortInFlight();
    if (thread_.joinable()) thread_.join();
  }

  // Unregisters, when it goes out of scope, the buffers it created, so that
  // AbortInFlight never touches a freed one. Declare it after whatever owns
  // the buffers (the Gloo options object), so that it is destroyed first.
  class Tracked {
   public:
    explicit Tracked(Worker* worker) : worker_(worker) {}
    ~Tracked() {
      MutexLock lock(&worker_->mu_);
      for (gloo::transport::UnboundBuffer* b : mine_) {
        worker_->active_.erase(
            std::find(worker_->active_.begin(), worker_->active_.end(), b));
      }
    }
    Tracked(const Tracked&) = delete;
    Tracked& operator=(const Tracked&) = delete;

    // An unbound buffer over [data, data + bytes), registered so that the
    // destructor can abort waits on it.
    std::unique_ptr<gloo::transport::UnboundBuffer> Buffer(const void* data,
                                                           size_t bytes) {
      // Gloo takes non-const pointers even for inputs, which it only reads.
      std::unique_ptr<gloo::transport::UnboundBuffer> b =
          worker_->context_->createUnboundBuffer(const_cast<void*>(data),
                                                 bytes);
      mine_.push_back(b.get());
      MutexLock lock(&worker_->mu_);
      worker_->active_.push_back(b.get());
      return b;
    }

   private:
    Worker* const worker_;
    std::vector<gloo::transport::UnboundBuffer*> mine_;
  };

  std::unique_ptr<Work> Enqueue(CollectiveCall call, const void* send,
                                void* recv, absl::Duration timeout)
      ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    if (stopping_) {
      return MakeCompletedWork(absl::CancelledError(
          absl::StrCat("rank ", rank_, ": ", call.ToString(),
                       " issued while its GlooProcessGroup is being "
                       "destroyed")));
    }
    auto op = std::make_unique<Op>(next_seq_++, std::move(call), send, recv,
                                   timeout, rank_);
    std::unique_ptr<Work> work = op->completion.MakeWork();
    queue_.push_back(std::move(op));
    cv_.SignalAll();
    return work;
  }

  absl::Status abort_status() const ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    return DetachedCopy(abort_status_);
  }

  // See GlooProcessGroup::DoAbort.
  void Abort(const absl::Status& cause) ABSL_LOCKS_EXCLUDED(mu_) {
    std::deque<std::unique_ptr<Op>> cancelled;
    bool in_flight;
    {
      MutexLock lock(&mu_);
      if (abort_status_.ok()) abort_status_ = DetachedCopy(cause);
      cancelled.swap(queue_);
      in_flight = in_flight_;
    }
    for (auto& op : cancelled) {
      op->completion.Complete(absl::CancelledError(
          absl::StrCat(Describe(op->seq, op->call), " on rank ", rank_,
                       " cancelled before it started: the group was aborted: ",
                       cause.message())));
    }
    // Closing the connections tells the peers at once, whether or not a
    // collective is in flight here.
    if (in_flight) {
      AbortInFlight();
    } else {
      CloseConnections();
    }
    // Every Work complete before returning (ProcessGroup::Abort).
    MutexLock lock(&mu_);
    while (completing_) cv_.Wait(&mu_);
  }

  bool uses_shared_memory() const { return shared_memory_ != nullptr; }
  uint64_t shared_memory_collectives() const {
    return shared_memory_collectives_.load(std::memory_order_relaxed);
  }

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_) {
    while (true) {
      std::unique_ptr<Op> op;
      {
        MutexLock lock(&mu_);
        while (queue_.empty() && !stopping_) cv_.Wait(&mu_);
        if (stopping_) return;  // The destructor completes what is queued.
        op = std::move(queue_.front());
        queue_.pop_front();
        in_flight_ = true;
      }
      absl::Status status = Run(*op);
      {
        MutexLock lock(&mu_);
        in_flight_ = false;
        completing_ = true;
        cv_.SignalAll();
      }
      op->completion.Complete(std::move(status));
      MutexLock lock(&mu_);
      completing_ = false;
      cv_.SignalAll();
    }
  }

  // Runs `op` unless the group is aborted; aborts it on failure.
  absl::Status Run(const Op& op) ABSL_LOCKS_EXCLUDED(mu_) {
    const std::string what = Describe(op.seq, op.call);
    {
      MutexLock lock(&mu_);
      if (!abort_status_.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(
            what, " on rank ", rank_,
            " not started: the group was aborted by an earlier failure: ",
            abort_status_.message()));
      }
    }
    const std::string context =
        absl::StrCat(what, " failed on rank ", rank_, " [gloo tag ",
                     static_cast<uint32_t>(op.seq), "]");
    absl::Status status =
        CatchGloo(context, [&] { return Execute(op, context); });
    bool first_failure = false;
    {
      MutexLock lock(&mu_);
      // Aborted waits return as if they had completed: the data is garbage
      // even when Gloo reports nothing.
      if (aborting_) {
        return absl::CancelledError(absl::StrCat(
            what, " on rank ", rank_,
            " cancelled: its GlooProcessGroup was aborted or destroyed while "
            "it ran",
            status.ok() ? "" : absl::StrCat(" (", status.message(), ")")));
      }
      if (status.ok()) return status;
      // A mismatch is found before any data moves and by every rank alike:
      // the connections are intact and the group stays usable. Any other
      // failure may leave messages half sent, so the group is done.
      if (status.code() == absl::StatusCode::kInvalidArgument) return status;
      if (abort_status_.ok()) {
        abort_status_ = DetachedCopy(status);
        first_failure = true;
      }
    }
    if (!first_failure) return status;
    CloseConnections();
    // A timeout, or a connection a peer closed (most often because that
    // peer failed first and closed its own), says little of where the
    // fault is: say which peers' hosts still answer. Probing after the
    // close lets the peers fail at once rather than wait on this rank.
    if (status.code() == absl::StatusCode::kDeadlineExceeded ||
        status.code() == absl::StatusCode::kUnavailable) {
      status = absl::Status(
          status.code(), absl::StrCat(status.message(), "; ", ProbeFinding(op),
                                      "; the group is now aborted"));
      MutexLock lock(&mu_);
      abort_status_ = DetachedCopy(status);
    }
    return status;
  }

  // Resets every connection, so that the peers' pending Gloo calls fail at
  // once (with "connection reset") rather than at their timeouts, and later
  // calls here throw.
  void CloseConnections() { context_->closeConnections(); }

  // Makes the collective in flight return promptly: closing the sockets does
  // not wake this rank's own waits, so abort them (repeatedly: Gloo's
  // algorithms ignore an aborted wait and go on to the next one, which then
  // fails on the closed connection or is aborted in turn).
  void AbortInFlight() ABSL_LOCKS_EXCLUDED(mu_) {
    {
      MutexLock lock(&mu_);
      aborting_ = true;
    }
    CloseConnections();
    MutexLock lock(&mu_);
    while (in_flight_) {
      for (gloo::transport::UnboundBuffer* b : active_) {
        b->abortWaitRecv();
        b->abortWaitSend();
      }
      cv_.WaitWithDeadline(&mu_, absl::Now() + absl::Milliseconds(2));
    }
  }

  // Runs one collective; Gloo failures throw (see CatchGloo).
  absl::Status Execute(const Op& op, const std::string& context) {
    const absl::Time deadline = absl::Now() + op.timeout;
    if (size_ == 1) return ExecuteAlone(op);
    // The data goes through shared memory only if every rank's segment can
    // hold it and every rank has mapped its peers' segments; each rank says
    // so in its header. A Reserve that fails (no room in /dev/shm, no
    // memory to map: ResourceExhausted) sends this collective over TCP on
    // every rank: nothing can fail for want of memory once the data moves.
    const size_t shared_bytes = SharedMemoryBytes(op.call);
    const bool ready = shared_memory_ != nullptr && shared_bytes > 0 &&
                       shared_bytes >= min_shared_memory_bytes_ &&
                       shared_memory_->Reserve(shared_bytes).ok();
    bool all_ready = false;
    if (absl::Status s = ExchangeHeaders(op, deadline, ready, &all_ready);
        !s.ok()) {
      return s;
    }
    if (op.call.count == 0) return absl::OkStatus();
    try {
      if (!all_ready) return MoveData(op, deadline, context);
      absl::Status status = MoveDataThroughSharedMemory(op, deadline);
      if (status.ok()) {
        shared_memory_collectives_.fetch_add(1, std::memory_order_relaxed);
      }
      return status;
    } catch (const gloo::IoException& e) {
      if (!comm_internal::IsGlooTimeoutMessage(e.what())) throw;
      // Every rank sent its header, so every rank joined: one of them
      // stopped (or its host became unreachable) while the data moved.
      // Gloo's waits do not say which peer they waited for: Run()'s probe
      // tells a lost host from a stopped rank.
      std::vector<int> peers;
      for (int r = 0; r < size_; ++r) {
        if (r != rank_) peers.push_back(r);
      }
      return absl::DeadlineExceededError(absl::StrCat(
          Describe(op.seq, op.call), " timed out on rank ", rank_, " after ",
          absl::FormatDuration(op.timeout),
          " moving its data; every rank had joined it, so one of rank",
          peers.size() == 1 ? " " : "s ", absl::StrJoin(peers, ", "),
          " stopped or became unreachable while it ran (", e.what(), ")"));
    }
  }

  // What a probe of the peers' hosts finds after `op` failed, waiting at
  // most op.timeout (and 3 s) for their answers.
  std::string ProbeFinding(const Op& op) {
    if (probe_ == nullptr) return "no probe";
    return absl::StrCat(
        "probe: ", probe_->Describe(std::min(op.timeout, absl::Seconds(3))));
  }

  // The data phase of a collective whose headers matched.
  absl::Status MoveData(const Op& op, absl::Time deadline,
                        const std::string& context) {
    switch (op.call.kind) {
      case CollectiveKind::kBarrier:
        return absl::OkStatus();  // The header exchange was the barrier.
      case CollectiveKind::kBroadcast:
        return RunBroadcast(op, deadline);
      case CollectiveKind::kReduce:
        return RunReduce(op, deadline);
      case CollectiveKind::kAllReduce:
        return RunAllReduce(op, deadline);
      case CollectiveKind::kAllGather:
        return RunAllGather(op, deadline);
      case CollectiveKind::kReduceScatter:
        return RunReduceScatter(op, deadline);
    }
    return absl::InternalError(absl::StrCat(context, ": unknown kind"));
  }

  uint32_t Tag(const Op& op) const { return static_cast<uint32_t>(op.seq); }

  // Sends `bytes` bytes at all + rank_ * bytes to every peer and receives
  // each peer's into all + peer * bytes, under the slot (prefix, the
  // collective's tag). False if a wait was aborted (see Run()); Gloo's
  // failures, timeouts included, throw. `arrived` marks the ranks heard from.
  bool ExchangeWithPeers(uint8_t prefix, const Op& op, void* all, size_t bytes,
                         absl::Time deadline, std::vector<bool>& arrived) {
    arrived.assign(size_, false);
    arrived[rank_] = true;
    std::unique_ptr<gloo::transport::UnboundBuffer> buf;  // Outlives tracked.
    Tracked tracked(this);
    buf = tracked.Buffer(all, size_ * bytes);
    const uint64_t slot = gloo::Slot::build(prefix, Tag(op));
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      buf->recv(peer, slot, peer * bytes, bytes);
      buf->send(peer, slot, rank_ * bytes, bytes);
    }
    for (int i = 0; i < size_ - 1; ++i) {
      int source = -1;
      if (!buf->waitRecv(&source, comm_internal::MillisecondsLeft(deadline)))
        return false;
      if (source >= 0 && source < size_) arrived[source] = true;
    }
    // Every peer has posted its receives (before sending): these complete.
    for (int i = 0; i < size_ - 1; ++i) {
      if (!buf->waitSend(comm_internal::MillisecondsLeft(deadline)))
        return false;
    }
    return true;
  }

  // Sends this rank's CallHeader to every peer and receives theirs; returns
  // DeadlineExceeded naming the ranks whose header did not come in time, or
  // InvalidArgument on a mismatch. `*all_ready` says whether every rank's
  // header said kSharedMemoryReady (this rank's says `ready`).
  absl::Status ExchangeHeaders(const Op& op, absl::Time deadline, bool ready,
                               bool* all_ready) {
    std::vector<CallHeader> headers(size_);
    headers[rank_] = MakeHeader(op.call);
    if (ready) headers[rank_].flags |= kSharedMemoryReady;
    std::vector<bool> arrived;
    try {
      if (!ExchangeWithPeers(kHeaderSlotPrefix, op, headers.data(),
                             sizeof(CallHeader), deadline, arrived)) {
        return absl::CancelledError("aborted");  // See Run().
      }
    } catch (const gloo::IoException& e) {
      if (!comm_internal::IsGlooTimeoutMessage(e.what())) throw;
      return JoinTimeout(op, arrived);
    }
    for (int peer = 1; peer < size_; ++peer) {
      if (HeadersMatch(headers[0], headers[peer])) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          "collective #", op.seq, " mismatch: rank 0 called ",
          CallFromHeader(headers[0]).ToString(), ", rank ", peer, " called ",
          CallFromHeader(headers[peer]).ToString(),
          " (all ranks must issue the same collectives in the same order)"));
    }
    *all_ready = true;
    for (const CallHeader& h : headers) {
      *all_ready &= (h.flags & kSharedMemoryReady) != 0;
    }
    return absl::OkStatus();
  }

  // The bytes each rank's segment must hold for `call` to go through shared
  // memory; 0 for the kinds that always go over TCP (Broadcast and Reduce:
  // rare, and small where chunkzero uses them).
  size_t SharedMemoryBytes(const CollectiveCall& call) const {
    const size_t bytes = call.count * ElementSize(call.dtype);
    switch (call.kind) {
      case CollectiveKind::kAllGather:
      case CollectiveKind::kAllReduce:
        return bytes;
      case CollectiveKind::kReduceScatter:
        return size_ * bytes;
      default:
        return 0;
    }
  }

  // Completes once every rank has passed the same point (`prefix`) of the
  // collective: a one-byte exchange. Failures throw, as in MoveData.
  absl::Status SharedMemoryBarrier(uint8_t prefix, const Op& op,
                                   absl::Time deadline) {
    std::vector<uint8_t> bytes(size_);
    std::vector<bool> arrived;
    if (!ExchangeWithPeers(prefix, op, bytes.data(), 1, deadline, arrived)) {
      return absl::CancelledError("aborted");
    }
    return absl::OkStatus();
  }

  // The data phase through the ranks' segments. Every rank writes only its
  // own segment and reads the others' after a barrier; the next collective's
  // header exchange is the barrier that lets a segment be written again
  // (every rank has finished this one by then).
  absl::Status MoveDataThroughSharedMemory(const Op& op, absl::Time deadline) {
    switch (op.call.kind) {
      case CollectiveKind::kAllGather:
        return AllGatherThroughSharedMemory(op, deadline);
      case CollectiveKind::kReduceScatter:
        return ReduceScatterThroughSharedMemory(op, deadline);
      case CollectiveKind::kAllReduce:
        return AllReduceThroughSharedMemory(op, deadline);
      default:
        return absl::InternalError(
            absl::StrCat("no shared-memory path for ", op.call.ToString()));
    }
  }

  // Each rank's send into its segment; then every rank copies the others'.
  absl::Status AllGatherThroughSharedMemory(const Op& op, absl::Time deadline) {
    const size_t bytes = op.call.count * ElementSize(op.call.dtype);
    std::memcpy(shared_memory_->mine(), op.send, bytes);
    if (absl::Status s = SharedMemoryBarrier(kWrittenSlotPrefix, op, deadline);
        !s.ok()) {
      return s;
    }
    for (int k = 0; k < size_; ++k) {
      uint8_t* slot = Bytes(op.recv, k * bytes);
      if (k == rank_) {
        if (op.send != slot) std::memmove(slot, op.send, bytes);
        continue;
      }
      absl::StatusOr<const uint8_t*> theirs = shared_memory_->Peer(k, bytes);
      if (!theirs.ok()) return theirs.status();
      std::memcpy(slot, *theirs, bytes);
    }
    return absl::OkStatus();
  }

  // Each rank's send slots for the others into its segment; then rank r
  // reduces slot r of every segment (its own from its send) in rank order.
  absl::Status ReduceScatterThroughSharedMemory(const Op& op,
                                                absl::Time deadline) {
    const size_t bytes = op.call.count * ElementSize(op.call.dtype);
    const uint8_t* send = static_cast<const uint8_t*>(op.send);
    for (int k = 0; k < size_; ++k) {
      if (k == rank_) continue;
      std::memcpy(shared_memory_->mine() + k * bytes, send + k * bytes, bytes);
    }
    if (absl::Status s = SharedMemoryBarrier(kWrittenSlotPrefix, op, deadline);
        !s.ok()) {
      return s;
    }
    std::vector<const void*> inputs(size_);
    for (int k = 0; k < size_; ++k) {
      if (k == rank_) {
        inputs[k] = send + rank_ * bytes;  // recv may be exactly this.
        continue;
      }
      absl::StatusOr<const uint8_t*> theirs =
          shared_memory_->Peer(k, size_ * bytes);
      if (!theirs.ok()) return theirs.status();
      inputs[k] = *theirs + rank_ * bytes;
    }
    ReduceInto(op.recv, inputs.data(), size_, op.call.count, op.call.dtype,
               op.call.op);
    return absl::OkStatus();
  }

  // The segments as in RunAllReduce: rank k reduces segment k. Each rank
  // puts the others' segments of its buffer into its shared segment, reduces
  // its own segment in place in its buffer and publishes the result in the
  // same place of its shared segment (which no peer reads in the first
  // phase); after a second barrier each rank copies the others' results.
  absl::Status AllReduceThroughSharedMemory(const Op& op, absl::Time deadline) {
    const size_t es = ElementSize(op.call.dtype);
    const size_t count = op.call.count;
    const size_t per = (count + size_ - 1) / size_;
    auto begin = [&](int k) { return std::min(count, k * per) * es; };
    auto length = [&](int k) { return begin(k + 1) - begin(k); };
    uint8_t* mine = shared_memory_->mine();
    uint8_t* buffer = static_cast<uint8_t*>(op.recv);
    for (int k = 0; k < size_; ++k) {
      if (k != rank_)
        std::memcpy(mine + begin(k), buffer + begin(k), length(k));
    }
    if (absl::Status s = SharedMemoryBarrier(kWrittenSlotPrefix, op, deadline);
        !s.ok()) {
      return s;
    }
    std::vector<const uint8_t*> segments(size_);
    for (int k = 0; k < size_; ++k) {
      if (k == rank_) continue;
      absl::StatusOr<const uint8_t*> theirs =
          shared_memory_->Peer(k, count * es);
      if (!theirs.ok()) return theirs.status();
      segments[k] = *theirs;
    }
    std::vector<const void*> inputs(size_);
    for (int k = 0; k < size_; ++k) {
      inputs[k] =
          k == rank_ ? buffer + begin(rank_) : segments[k] + begin(rank_);
    }
    ReduceInto(buffer + begin(rank_), inputs.data(), size_, length(rank_) / es,
               op.call.dtype, op.call.op);
    std::memcpy(mine + begin(rank_), buffer + begin(rank_), length(rank_));
    if (absl::Status s = SharedMemoryBarrier(kReducedSlotPrefix, op, deadline);
        !s.ok()) {
      return s;
    }
    for (int k = 0; k < size_; ++k) {
      if (k != rank_) {
        std::memcpy(buffer + begin(k), segments[k] + begin(k), length(k));
      }
    }
    return absl::OkStatus();
  }

  absl::Status JoinTimeout(const Op& op, const std::vector<bool>& arrived) {
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r) {
      if (!arrived[r]) missing.push_back(r);
    }
    return absl::DeadlineExceededError(
        absl::StrCat(Describe(op.seq, op.call), " timed out on rank ", rank_,
                     " after ", absl::FormatDuration(op.timeout),
                     " waiting for rank", missing.size() == 1 ? " " : "s ",
                     absl::StrJoin(missing, ", "), " to join"));
  }

  // size() == 1: every collective is a local copy at most.
  absl::Status ExecuteAlone(const Op& op) {
    const CollectiveCall& c = op.call;
    const bool copies = c.kind == CollectiveKind::kAllGather ||
                        c.kind == CollectiveKind::kReduceScatter ||
                        c.kind == CollectiveKind::kReduce;
    if (copies && c.count > 0 && op.send != op.recv) {
      std::memmove(op.recv, op.send, c.count * ElementSize(c.dtype));
    }
    return absl::OkStatus();
  }

  absl::Status RunBroadcast(const Op& op, absl::Time deadline) {
    const size_t bytes = op.call.count * ElementSize(op.call.dtype);
    gloo::BroadcastOptions opts(context_);
    Tracked tracked(this);
    // In place at the root.
    opts.setOutput<uint8_t>(tracked.Buffer(op.recv, bytes));
    opts.setRoot(op.call.root);
    opts.setTag(Tag(op));
    opts.setTimeout(comm_internal::MillisecondsLeft(deadline));
    gloo::broadcast(opts);
    return absl::OkStatus();
  }

  absl::Status RunAllGather(const Op& op, absl::Time deadline) {
    const size_t bytes = op.call.count * ElementSize(op.call.dtype);
    gloo::AllgatherOptions opts(context_);
    Tracked tracked(this);
    // Without an input Gloo works in place (send is recv's slot rank_).
    if (op.send != Bytes(op.recv, rank_ * bytes)) {
      opts.setInput<uint8_t>(tracked.Buffer(op.send, bytes));
    }
    opts.setOutput<uint8_t>(tracked.Buffer(op.recv, size_ * bytes));
    opts.setTag(Tag(op));
    opts.setTimeout(comm_internal::MillisecondsLeft(deadline));
    gloo::allgather(opts);
    return absl::OkStatus();
  }

  // Reduces `n` consecutive blocks of `count` elements at `blocks` into
  // `out`, in rank order (block k came from rank k).
  void ReduceBlocks(void* out, const uint8_t* blocks, size_t count,
                    const CollectiveCall& call) const {
    const size_t block_bytes = count * ElementSize(call.dtype);
    std::vector<const void*> inputs(size_);
    for (int k = 0; k < size_; ++k) inputs[k] = blocks + k * block_bytes;
    ReduceInto(out, inputs.data(), size_, count, call.dtype, call.op);
  }

  absl::Status RunReduceScatter(const Op& op, absl::Time deadline) {
    const size_t bytes = op.call.count * ElementSize(op.call.dtype);
    // Slot rank_ of every rank's send, in rank order. A separate buffer, so
    // the in-place form (recv is send's slot rank_) needs no care.
    uint8_t* slots = Scratch(size_ * bytes);
    gloo::AlltoallOptions opts(context_);
    Tracked tracked(this);
    opts.setInput<uint8_t>(tracked.Buffer(op.send, size_ * bytes));
    opts.setOutput<uint8_t>(tracked.Buffer(slots, size_ * bytes));
    opts.setTag(Tag(op));
    opts.setTimeout(comm_internal::MillisecondsLeft(deadline));
    gloo::alltoall(opts);
    ReduceBlocks(op.recv, slots, op.call.count, op.call);
    return absl::OkStatus();
  }

  absl::Status RunAllReduce(const Op& op, absl::Time deadline) {
    const size_t es = ElementSize(op.call.dtype);
    const size_t count = op.call.count;
    // Rank k owns segment k: [k * per, (k + 1) * per) clipped to count.
    const size_t per = (count + size_ - 1) / size_;
    auto begin = [&](int k) { return std::min(count, k * per); };
    std::vector<int64_t> send_bytes(size_);
    std::vector<size_t> segment_bytes(size_);
    for (int k = 0; k < size_; ++k) {
      segment_bytes[k] = (begin(k + 1) - begin(k)) * es;
      send_bytes[k] = static_cast<int64_t>(segment_bytes[k]);
    }
    const size_t own = segment_bytes[rank_];

    // 1. Reduce-scatter: every rank's segment rank_, then reduce locally.
    uint8_t* segments = Scratch(std::max<size_t>(size_ * own, 1));
    {
      gloo::AlltoallvOptions opts(context_);
      Tracked tracked(this);
      opts.setInput<uint8_t>(tracked.Buffer(op.recv, count * es), send_bytes);
      opts.setOutput<uint8_t>(
          tracked.Buffer(segments, size_ * own),
          std::vector<int64_t>(size_, static_cast<int64_t>(own)));
      opts.setTag(Tag(op));
      opts.setTimeout(comm_internal::MillisecondsLeft(deadline));
      gloo::alltoallv(opts);
    }
    ReduceBlocks(Bytes(op.recv, begin(rank_) * es), segments, own / es,
                 op.call);

    // 2. All-gather the reduced segments, in place.
    gloo::AllgathervOptions opts(context_);
    Tracked tracked(this);
    opts.setOutput<uint8_t>(tracked.Buffer(op.recv, count * es), segment_bytes);
    opts.setTag(Tag(op));
    opts.setTimeout(comm_internal::MillisecondsLeft(deadline));
    gloo::allgatherv(opts);
    return absl::OkStatus();
  }

  absl::Status RunReduce(const Op& op, absl::Time deadline) {
    const size_t bytes = op.call.count * ElementSize(op.call.dtype);
    const bool is_root = rank_ == op.call.root;
    uint8_t* gathered = is_root ? Scratch(size_ * bytes) : nullptr;
    gloo::GatherOptions opts(context_);
    Tracked tracked(this);
    opts.setInput<uint8_t>(tracked.Buffer(op.send, bytes));
    if (is_root) {
      opts.setOutput<uint8_t>(tracked.Buffer(gathered, size_ * bytes));
    }
    opts.setRoot(op.call.root);
    opts.setTag(Tag(op));
    opts.setTimeout(comm_internal::MillisecondsLeft(deadline));
    gloo::gather(opts);
    if (is_root) ReduceBlocks(op.recv, gathered, op.call.count, op.call);
    return absl::OkStatus();
  }

  // The worker's scratch, at least `bytes` long (contents undefined). Kept
  // between collectives: a fresh buffer per call cost page faults and
  // zeroing of a whole chunk's bytes on every reduction.
  uint8_t* Scratch(size_t bytes) {
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    return scratch_.data();
  }

  const int rank_;
  const int size_;
  // Shared with Gloo's option objects, which take a shared_ptr<Context>.
  const std::shared_ptr<gloo::rendezvous::Context> context_;
  mutable Mutex mu_;
  CondVar cv_;  // Signalled when queue_ grows or stopping_ is set.
  std::deque<std::unique_ptr<Op>> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool in_flight_ ABSL_GUARDED_BY(mu_) = false;
  // The worker is completing the Work of the collective it just ran.
  bool completing_ ABSL_GUARDED_BY(mu_) = false;
  // Set by AbortInFlight (the destructor's, or Abort's).
  bool aborting_ ABSL_GUARDED_BY(mu_) = false;
  // The unbound buffers of the collective in flight (see Tracked).
  std::vector<gloo::transport::UnboundBuffer*> active_ ABSL_GUARDED_BY(mu_);
  // Scratch(); the worker thread's alone.
  std::vector<uint8_t> scratch_;
  // Null when the ranks do not share a host (or it is switched off); the
  // worker thread's alone.
  const std::unique_ptr<SharedSegments> shared_memory_;
  const size_t min_shared_memory_bytes_;
  // Null for a group of one. Used only by the worker thread.
  const std::unique_ptr<PeerProbe> probe_;
  std::atomic<uint64_t> shared_memory_collectives_{0};
  absl::Status abort_status_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

namespace {

// A rank's join value: the world size and the job config, one "key=value"
// line each (newlines in values escaped), so that ranks can compare them.
std::string JoinValue(int size, const std::map<std::string, std::string>& c) {
  std::map<std::string, std::string> all = c;
  all["world_size"] = absl::StrCat(size);
  std::string out;
  for (const auto& [key, value] : all) {
    absl::StrAppend(&out, absl::StrReplaceAll(key, {{"\n", "\\n"}}), "=",
                    absl::StrReplaceAll(value, {{"\n", "\\n"}}), "\n");
  }
  return out;
}

std::map<std::string, std::string> ParseJoinValue(absl::string_view text) {
  std::map<std::string, std::string> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) continue;
    out[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
  }
  return out;
}

// OK if `theirs` (rank `peer`'s join value) equals `mine`; else
// FailedPrecondition naming the first key that differs.
absl::Status CompareJoinValues(int rank, const std::string& mine, int peer,
                               const std::string& theirs) {
  if (mine == theirs) return absl::OkStatus();
  const auto a = ParseJoinValue(mine), b = ParseJoinValue(theirs);
  std::string key, here = "(unset)", there = "(unset)";
  // The world size first: other settings (a chunk size aligned to it) may
  // differ only because it does.
  if (a.count("world_size") > 0 && b.count("world_size") > 0 &&
      a.at("world_size") != b.at("world_size")) {
    key = "world_size";
    here = a.at("world_size");
    there = b.at("world_size");
  }
  for (const auto& [k, v] : a) {
    if (!key.empty()) break;
    auto it = b.find(k);
    if (it == b.end() || it->second != v) {
      key = k;
      here = v;
      if (it != b.end()) there = it->second;
      break;
    }
  }
  if (key.empty()) {
    for (const auto& [k, v] : b) {
      if (a.count(k) == 0) {
        key = k;
        there = v;
        break;
      }
    }
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "GlooProcessGroup::Create: rank ", peer,
      " was started with another configuration than rank ", rank, ": ", key,
      " is ", there, " on rank ", peer, " but ", here, " on rank ", rank,
      " (every rank of a job must be started with the same flags)"));
}

// A store whose waits last until `deadline`, whatever timeout the caller
// gives: connectFullMesh waits on the store with the context's timeout,
// which Create shortens for Gloo's connects (see there).
class WaitsUntilTheDeadline final : public gloo::rendezvous::Store {
 public:
  WaitsUntilTheDeadline(gloo::rendezvous::Store& base, absl::Time deadline)
      : base_(base), deadline_(deadline) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    base_.set(key, data);
  }
  std::vector<char> get(const std::string& key) override {
    return base_.get(key);
  }
  void wait(const std::vector<std::string>& keys) override {
    wait(keys, std::chrono::milliseconds(1));
  }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds&) override {
    // A rank that gave up (AnnounceGiveUp) fails the wait at once; the
    // deadline's own timeout is the store's, worded as Gloo's callers
    // expect.
    const absl::Status waited = comm_internal::WaitForKeys(
        base_, keys, kJoinKeyPrefix, deadline_ - absl::Milliseconds(100),
        "the rendezvous");
    if (waited.ok()) return;
    if (!absl::IsDeadlineExceeded(waited)) {
      throw gloo::IoException(std::string(waited.message()));
    }
    // At least 1 ms: Gloo reads 0 as "no timeout".
    base_.wait(keys, std::max(std::chrono::milliseconds(1),
                              comm_internal::MillisecondsLeft(deadline_)));
  }

 private:
  gloo::rendezvous::Store& base_;
  const absl::Time deadline_;
};

}  // namespace
}  // namespace gloo_internal

absl::StatusOr<std::unique_ptr<GlooProcessGroup>> GlooProcessGroup::Create(
    int rank, int size, gloo::rendezvous::Store& store,
    const GlooOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("GlooProcessGroup::Create: rank ", rank,
                     " is not in [0, size) for size ", size));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GlooProcessGroup::Create: timeout ",
        absl::FormatDuration(options.timeout), " is not positive"));
  }
  const absl::Time deadline = absl::Now() + options.timeout;
  const std::string where =
      absl::StrCat("GlooProcessGroup::Create: rank ", rank, " of ", size,
                   " (hostname ", options.hostname, ")");
  std::shared_ptr<gloo::rendezvous::Context> context;
  std::unique_ptr<gloo_internal::SharedSegments> shared_memory;
  std::unique_ptr<gloo_internal::PeerProbe> probe;
  // False when the store holds this rank's key already (an earlier or
  // another job's store): a failure is then not announced in it.
  bool store_is_ours = true;
  absl::Status status = gloo_internal::CatchGloo(where, [&]() -> absl::Status {
    // The device first: it listens, and starts a thread of its own, which
    // can fail (ulimit -u). Failing before joining, this rank makes the
    // others fail in their join wait (AnnounceGiveUp below) rather than
    // later, in the middle of connecting to it.
    std::shared_ptr<gloo::transport::Device> device;
    // Gloo's CreateDevice crashes (not throws) on some names it cannot
    // resolve, so resolve the name here first.
    if (absl::Status s = gloo_internal::CheckResolvable(options.hostname);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = gloo_internal::CatchGloo(
            absl::StrCat("cannot listen on ", options.hostname),
            [&] {
              gloo::transport::tcp::attr attr;
              attr.hostname = options.hostname;
              device = gloo::transport::tcp::CreateDevice(attr);
              return absl::OkStatus();
            });
        !s.ok()) {
      // The device starts a thread of its own: a refusal is the limit on
      // threads, not the network.
      if (absl::StrContains(s.message(), "Resource temporarily unavailable")) {
        return absl::ResourceExhaustedError(
            absl::StrCat(s.message(), ": Gloo's network thread could not start",
                         ThreadLimitNote()));
      }
      return absl::UnavailableError(s.message());
    }
    // Then our own join keys, so that a missing rank gets named; Gloo's
    // connectFullMesh would only report a timeout on some key. The value
    // carries what the ranks must agree on.
    const std::string joined =
        gloo_internal::JoinValue(size, options.job_config);
    if (absl::Status s = comm_internal::AnnounceJoin(
            store, gloo_internal::kJoinKeyPrefix, rank, joined, where);
        !s.ok()) {
      store_is_ours = false;
      return s;
    }
    // Each rank's value is compared with this rank's as it arrives (rank
    // 0's first), so ranks started differently fail at once.
    if (absl::Status s = comm_internal::AwaitJoins(
            store, gloo_internal::kJoinKeyPrefix, rank, size, deadline,
            options.timeout,
            absl::StrCat("GlooProcessGroup::Create: rank ", rank, " of ", size),
            [&](int peer, const std::string& theirs) {
              return gloo_internal::CompareJoinValues(rank, joined, peer,
                                                      theirs);
            });
        !s.ok()) {
      return s;
    }
    context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    // Gloo waits five times the context's timeout for a pair to connect
    // (transport/tcp/pair.h), so a peer that stopped halfway through
    // connecting held this rank for 5 x the deadline. A fifth of what is
    // left keeps the connects within it, while the store's waits keep the
    // whole of it; every later wait passes its own.
    context->setTimeout(
        std::max(std::chrono::milliseconds(1),
                 comm_internal::MillisecondsLeft(deadline) / 5));
    gloo_internal::WaitsUntilTheDeadline mesh_store(store, deadline);
    context->connectFullMesh(mesh_store, device);
    if (size == 1) return absl::OkStatus();
    absl::StatusOr<std::unique_ptr<gloo_internal::SharedSegments>> segments =
        gloo_internal::SharedSegments::Connect(
            rank, size, store, options.max_shared_memory_bytes, deadline);
    if (!segments.ok()) {
      return absl::Status(
          segments.status().code(),
          absl::StrCat(where, ": ", segments.status().message()));
    }
    shared_memory = *std::move(segments);
    absl::StatusOr<std::unique_ptr<gloo_internal::PeerProbe>> probed =
        gloo_internal::PeerProbe::Open(rank, size, options.hostname, store,
                                       deadline);
    if (!probed.ok()) {
      return absl::Status(probed.status().code(),
                          absl::StrCat(where, ": ", probed.status().message()));
    }
    probe = *std::move(probed);
    return absl::OkStatus();
  });
  if (absl::IsDeadlineExceeded(status) &&
      absl::StrContains(status.message(), "Connect timeout")) {
    return absl::DeadlineExceededError(absl::StrCat(
        status.message(),
        " (every rank had joined: a peer stopped before its connections "
        "were made, or the hosts cannot reach the addresses they listen on; "
        "check --interface)"));
  }
  if (status.ok()) {
    auto worker = std::make_unique<gloo_internal::Worker>(
        rank, size, std::move(context), std::move(shared_memory),
        options.min_shared_memory_bytes, std::move(probe));
    status = worker->Start();
    if (status.ok()) {
      return std::unique_ptr<GlooProcessGroup>(
          new GlooProcessGroup(rank, size, std::move(worker)));
    }
  }
  // A timeout is every waiting rank's own to report, and a give-up is
  // already in the store.
  if (store_is_ours && !absl::IsDeadlineExceeded(status) &&
      !absl::StrContains(status.message(),
                         "gave up before the rendezvous completed")) {
    AnnounceGiveUp(store, rank, status);
  }
  return status;
}

void GlooProcessGroup::AnnounceGiveUp(gloo::rendezvous::Store& store, int rank,
                                      const absl::Status& why) {
  comm_internal::AnnounceGiveUp(store, gloo_internal::kJoinKeyPrefix, rank,
                                why);
}

absl::StatusOr<std::unique_ptr<GlooProcessGroup>>
GlooProcessGroup::CreateWithFileStore(int rank, int size,
                                      const std::string& directory,
                                      const GlooOptions& options) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat("GlooProcessGroup::CreateWithFileStore: cannot create ",
                     directory, ": ", error.message()));
  }
  std::unique_ptr<TimedFileStore> store;
  absl::Status status = gloo_internal::CatchGloo(
      absl::StrCat("GlooProcessGroup::CreateWithFileStore: ", directory), [&] {
        store = std::make_unique<TimedFileStore>(directory);
        return absl::OkStatus();
      });
  if (!status.ok()) return status;
  absl::StatusOr<std::unique_ptr<GlooProcessGroup>> group =
      Create(rank, size, *store, options);
  if (!group.ok()) {
    return absl::Status(
        group.status().code(),
        absl::StrCat(group.status().message(), " [rendezvous directory ",
                     directory, "]"));
  }
  return group;
}

GlooProcessGroup::GlooProcessGroup(
    int rank, int size, std::unique_ptr<gloo_internal::Worker> worker)
    : rank_(rank), size_(size), worker_(std::move(worker)) {}

GlooProcessGroup::~GlooProcessGroup() = default;

void GlooProcessGroup::DoAbort(const absl::Status& cause) {
  worker_->Abort(cause);
}

bool GlooProcessGroup::SupportsDType(DType dtype) const {
  // Data moves as bytes; reductions run in our own kernels, which take
  // every dtype.
  return IsValidDType(dtype);
}

std::unique_ptr<Work> GlooProcessGroup::DoBroadcast(
    MutableBuffer buffer, const BroadcastOptions& options) {
  if (absl::Status s = CheckBroadcastArgs(*this, buffer, options); !s.ok()) {
    return MakeCompletedWork(std::move(s));
  }
  return worker_->Enqueue(DescribeBroadcast(buffer, options), nullptr,
                          buffer.data, options.timeout);
}

std::unique_ptr<Work> GlooProcessGroup::DoReduce(ConstBuffer send,
                                                 MutableBuffer recv,
                                                 const ReduceOptions& options) {
  if (absl::Status s = CheckReduceArgs(*this, send, recv, options); !s.ok()) {
    return MakeCompletedWork(std::move(s));
  }
  return worker_->Enqueue(DescribeReduce(send, options), send.data,
                          rank_ == options.root ? recv.data : nullptr,
                          options.timeout);
}

std::unique_ptr<Work> GlooProcessGroup::DoAllReduce(
    MutableBuffer buffer, const AllReduceOptions& options) {
  if (absl::Status s = CheckAllReduceArgs(*this, buffer, options); !s.ok()) {
    return MakeCompletedWork(std::move(s));
  }
  return worker_->Enqueue(DescribeAllReduce(buffer, options), buffer.data,
                          buffer.data, options.timeout);
}

std::unique_ptr<Work> GlooProcessGroup::DoAllGather(
    ConstBuffer send, MutableBuffer recv, const AllGatherOptions& options) {
  if (absl::Status s = CheckAllGatherArgs(*this, send, recv, options);
      !s.ok()) {
    return MakeCompletedWork(std::move(s));
  }
  return worker_->Enqueue(DescribeAllGather(send, options), send.data,
                          recv.data, options.timeout);
}

std::unique_ptr<Work> GlooProcessGroup::DoReduceScatter(
    ConstBuffer send, MutableBuffer recv, const ReduceScatterOptions& options) {
  if (absl::Status s = CheckReduceScatterArgs(*this, send, recv, options);
      !s.ok()) {
    return MakeCompletedWork(std::move(s));
  }
  return worker_->Enqueue(DescribeReduceScatter(recv, options), send.data,
                          recv.data, options.timeout);
}

std::unique_ptr<Work> GlooProcessGroup::DoBarrier(
    const BarrierOptions& options) {
  return worker_->Enqueue(DescribeBarrier(options), nullptr, nullptr,
                          options.timeout);
}

absl::Status GlooProcessGroup::abort_status() const {
  return worker_->abort_status();
}

bool GlooProcessGroup::uses_shared_memory() const {
  return worker_->uses_shared_memory();
}

uint64_t GlooProcessGroup::shared_memory_collectives() const {
  return worker_->shared_memory_collectives();
}

}  // namespace comm
}  // namespace chunkzero
