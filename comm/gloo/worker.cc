#include "comm/gloo/worker.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/detached_status.h"
#include "base/thread.h"
#include "comm/gloo/call_header.h"
#include "comm/gloo/catch_gloo.h"
#include "comm/internal/deadline.h"
#include "comm/internal/gloo_timeout.h"
#include "comm/internal/reduce_kernels.h"
#include "gloo/allgather.h"
#include "gloo/allgatherv.h"
#include "gloo/alltoall.h"
#include "gloo/alltoallv.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/gather.h"
#include "gloo/rendezvous/context.h"
#include "gloo/transport/unbound_buffer.h"
#include "gloo/types.h"

namespace chunkzero {
namespace comm {
namespace gloo_internal {
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

std::string Describe(uint64_t seq, const CollectiveCall& call) {
  return absl::StrCat("collective #", seq, " ", call.ToString());
}

uint8_t* Bytes(void* p, size_t offset) {
  return static_cast<uint8_t*>(p) + offset;
}

}  // namespace

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

// Unregisters, when it goes out of scope, the buffers it created, so that
// AbortInFlight never touches a freed one. Declare it after whatever owns
// the buffers (the Gloo options object), so that it is destroyed first.
class Worker::Tracked {
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
        worker_->context_->createUnboundBuffer(const_cast<void*>(data), bytes);
    mine_.push_back(b.get());
    MutexLock lock(&worker_->mu_);
    worker_->active_.push_back(b.get());
    return b;
  }

 private:
  Worker* const worker_;
  std::vector<gloo::transport::UnboundBuffer*> mine_;
};

Worker::Worker(int rank, int size,
               std::shared_ptr<gloo::rendezvous::Context> context,
               std::unique_ptr<SharedSegments> shared_memory,
               size_t min_shared_memory_bytes, std::unique_ptr<PeerProbe> probe)
    : rank_(rank),
      size_(size),
      context_(std::move(context)),
      shared_memory_(std::move(shared_memory)),
      min_shared_memory_bytes_(min_shared_memory_bytes),
      probe_(std::move(probe)) {}

absl::Status Worker::Start() {
  absl::StatusOr<std::thread> thread =
      StartThread(absl::StrCat("the Gloo worker thread of rank ", rank_),
                  [this] { Loop(); });
  if (!thread.ok()) return thread.status();
  thread_ = *std::move(thread);
  return absl::OkStatus();
}

Worker::~Worker() {
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

std::unique_ptr<Work> Worker::Enqueue(CollectiveCall call, const void* send,
                                      void* recv, absl::Duration timeout) {
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

absl::Status Worker::abort_status() const {
  MutexLock lock(&mu_);
  return DetachedCopy(abort_status_);
}

void Worker::Abort(const absl::Status& cause) {
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

void Worker::Loop() {
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

absl::Status Worker::Run(const Op& op) {
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
    status = absl::Status(status.code(),
                          absl::StrCat(status.message(), "; ", ProbeFinding(op),
                                       "; the group is now aborted"));
    MutexLock lock(&mu_);
    abort_status_ = DetachedCopy(status);
  }
  return status;
}

void Worker::CloseConnections() { context_->closeConnections(); }

// Closing the sockets does not wake this rank's own waits, so abort them
// (repeatedly: Gloo's algorithms ignore an aborted wait and go on to the
// next one, which then fails on the closed connection or is aborted in
// turn).
void Worker::AbortInFlight() {
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

absl::Status Worker::Execute(const Op& op, const std::string& context) {
  const absl::Time deadline = absl::Now() + op.timeout;
  if (size_ == 1) return ExecuteAlone(op);
  // The data goes through shared memory only if every rank's segment can
  // hold it and every rank has mapped its peers' segments; each rank says
  // so in its header. A Reserve that fails (no room in /dev/shm, no
  // memory to map: ResourceExhausted) sends this collective over TCP on
  // every rank: nothing can fail for want of memory once the data moves.
  const size_t shared_bytes = SharedMemoryBytes(op.call, size_);
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
    absl::Status status = MoveDataThroughSharedMemory(
        *shared_memory_, rank_, size_, op.call, op.send, op.recv,
        [&](SharedMemoryPoint point) {
          return BarrierAt(point, op, deadline);
        });
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

std::string Worker::ProbeFinding(const Op& op) {
  if (probe_ == nullptr) return "no probe";
  return absl::StrCat("probe: ",
                      probe_->Describe(std::min(op.timeout, absl::Seconds(3))));
}

absl::Status Worker::MoveData(const Op& op, absl::Time deadline,
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

uint32_t Worker::Tag(const Op& op) const {
  return static_cast<uint32_t>(op.seq);
}

bool Worker::ExchangeWithPeers(uint8_t prefix, const Op& op, void* all,
                               size_t bytes, absl::Time deadline,
                               std::vector<bool>& arrived) {
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
  // An aborted wait returns while operations on the buffer may still be
  // completing on Gloo's network thread: the buffer is kept, not freed.
  auto aborted = [&] {
    MutexLock lock(&mu_);
    retired_.push_back(std::move(buf));
    return false;
  };
  for (int i = 0; i < size_ - 1; ++i) {
    int source = -1;
    if (!buf->waitRecv(&source, comm_internal::MillisecondsLeft(deadline))) {
      return aborted();
    }
    if (source >= 0 && source < size_) arrived[source] = true;
  }
  // Every peer has posted its receives (before sending): these complete.
  for (int i = 0; i < size_ - 1; ++i) {
    if (!buf->waitSend(comm_internal::MillisecondsLeft(deadline))) {
      return aborted();
    }
  }
  return true;
}

absl::Status Worker::ExchangeHeaders(const Op& op, absl::Time deadline,
                                     bool ready, bool* all_ready) {
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
  if (absl::Status s = CheckHeadersMatch(op.seq, headers); !s.ok()) return s;
  *all_ready = AllSharedMemoryReady(headers);
  return absl::OkStatus();
}

absl::Status Worker::BarrierAt(SharedMemoryPoint point, const Op& op,
                               absl::Time deadline) {
  const uint8_t prefix = point == SharedMemoryPoint::kWritten
                             ? kWrittenSlotPrefix
                             : kReducedSlotPrefix;
  std::vector<uint8_t> bytes(size_);
  std::vector<bool> arrived;
  if (!ExchangeWithPeers(prefix, op, bytes.data(), 1, deadline, arrived)) {
    return absl::CancelledError("aborted");
  }
  return absl::OkStatus();
}

absl::Status Worker::JoinTimeout(const Op& op,
                                 const std::vector<bool>& arrived) {
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

absl::Status Worker::ExecuteAlone(const Op& op) {
  const CollectiveCall& c = op.call;
  const bool copies = c.kind == CollectiveKind::kAllGather ||
                      c.kind == CollectiveKind::kReduceScatter ||
                      c.kind == CollectiveKind::kReduce;
  if (copies && c.count > 0 && op.send != op.recv) {
    std::memmove(op.recv, op.send, c.count * ElementSize(c.dtype));
  }
  return absl::OkStatus();
}

absl::Status Worker::RunBroadcast(const Op& op, absl::Time deadline) {
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

absl::Status Worker::RunAllGather(const Op& op, absl::Time deadline) {
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

void Worker::ReduceBlocks(void* out, const uint8_t* blocks, size_t count,
                          const CollectiveCall& call) const {
  const size_t block_bytes = count * ElementSize(call.dtype);
  std::vector<const void*> inputs(size_);
  for (int k = 0; k < size_; ++k) inputs[k] = blocks + k * block_bytes;
  ReduceInto(out, inputs.data(), size_, count, call.dtype, call.op);
}

absl::Status Worker::RunReduceScatter(const Op& op, absl::Time deadline) {
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

absl::Status Worker::RunAllReduce(const Op& op, absl::Time deadline) {
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
  ReduceBlocks(Bytes(op.recv, begin(rank_) * es), segments, own / es, op.call);

  // 2. All-gather the reduced segments, in place.
  gloo::AllgathervOptions opts(context_);
  Tracked tracked(this);
  opts.setOutput<uint8_t>(tracked.Buffer(op.recv, count * es), segment_bytes);
  opts.setTag(Tag(op));
  opts.setTimeout(comm_internal::MillisecondsLeft(deadline));
  gloo::allgatherv(opts);
  return absl::OkStatus();
}

absl::Status Worker::RunReduce(const Op& op, absl::Time deadline) {
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

uint8_t* Worker::Scratch(size_t bytes) {
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  return scratch_.data();
}

}  // namespace gloo_internal
}  // namespace comm
}  // namespace chunkzero
