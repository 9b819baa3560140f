// RecordingProcessGroup: a decorator that logs and counts every collective.
//
//   RecordingProcessGroup rec(**world.group(r));  // wraps, does not own
//   CZ_RETURN_IF_ERROR(comm::AllReduce(rec, buf));
//   double bus = rec.Snapshot()[CollectiveKind::kAllReduce].bus_bytes;
//
// Feeds the train tool's per-step comm-bytes report and the DESIGN.md §7
// traffic checks. Definitions, for a group of size N and one call with
// per-rank element count `count` of dtype size `es` (see CollectiveCall):
//
//   payload bytes (nccl-tests "size" S):
//     Broadcast, Reduce, AllReduce:  count * es      (the buffer)
//     AllGather:                     N * count * es  (the FULL gathered recv)
//     ReduceScatter:                 N * count * es  (the FULL scattered send)
//     Barrier:                       0
//   bus bytes = payload bytes * BusBytesFactor(kind, N), the nccl-tests
//   busbw factor (DESIGN.md §7):
//     AllReduce 2(N-1)/N; AllGather, ReduceScatter (N-1)/N;
//     Broadcast, Reduce 1; Barrier 0.
//   Bus bytes approximate what one rank sends (and receives) on a link in
//   ring algorithms; divided by time they give busbw.
//
// Every call issued through the decorator is recorded (before the inner group
// runs it, whether or not it then succeeds), in issue order. The log keeps the
// first `max_logged_calls` calls since the last reset; counters keep counting
// past it.
//
// Ownership: does not own `inner`, which must outlive the decorator.
// Thread-safety: thread-safe; Snapshot/Reset may run concurrently with calls.
// Blocking: forwards to `inner` and returns its Work (wrapped to time Wait);
// adds no waiting.
#ifndef CHUNKZERO_COMM_RECORDING_PROCESS_GROUP_H_
#define CHUNKZERO_COMM_RECORDING_PROCESS_GROUP_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "base/mutex.h"
#include "comm/forwarding_process_group.h"
#include "comm/process_group.h"

namespace chunkzero {
namespace comm {

// Payload bytes of `call` in a group of `world_size` ranks (definition above).
uint64_t PayloadBytes(const CollectiveCall& call, int world_size);

// The nccl-tests busbw factor of `kind` for `world_size` ranks (above).
double BusBytesFactor(CollectiveKind kind, int world_size);

// Counters for one collective kind.
struct CollectiveStats {
  int64_t calls = 0;
  uint64_t payload_bytes = 0;
  double bus_bytes = 0;  // payload_bytes * BusBytesFactor(kind, N)
};

struct RecordingSnapshot {
  std::vector<CollectiveCall> calls;  // In issue order.
  int64_t calls_not_logged = 0;       // Counted, but past max_logged_calls.
  std::array<CollectiveStats, kNumCollectiveKinds> per_kind;
  // Time this rank's callers spent inside the collective calls and blocked
  // in their Works' Wait (the train tool's comm_wait).
  absl::Duration blocked;
  // Waits asked of the Works handed out: on the host (Wait) and by ordering
  // a CUDA stream after the collective (WaitOnStream), whatever the backend
  // then does.
  int64_t host_waits = 0;
  int64_t stream_waits = 0;

  const CollectiveStats& operator[](CollectiveKind kind) const {
    return per_kind[static_cast<int>(kind)];
  }
  // Sum over all kinds.
  CollectiveStats Total() const;
};

class RecordingProcessGroup final : public ForwardingProcessGroup {
 public:
  explicit RecordingProcessGroup(ProcessGroup& inner,
                                 size_t max_logged_calls = size_t{1} << 20);
  RecordingProcessGroup(const RecordingProcessGroup&) = delete;
  RecordingProcessGroup& operator=(const RecordingProcessGroup&) = delete;

  // The log and counters since construction or the last reset.
  RecordingSnapshot Snapshot() const;
  // Clears the log and counters.
  void Reset();
  // Snapshot() and Reset() in one atomic step (for per-step reports).
  RecordingSnapshot SnapshotAndReset();
  // Puts back what `snapshot` (taken with SnapshotAndReset) recorded,
  // dropping what was recorded since: for collectives that belong to no
  // report (an evaluation between steps).
  void Restore(const RecordingSnapshot& snapshot);

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
  // DoAbort forwards; what is recorded stays as it is.

 private:
  void Record(const CollectiveCall& call) ABSL_LOCKS_EXCLUDED(mu_);
  RecordingSnapshot SnapshotLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Adds the time since `issued` to the blocked time and wraps `work` so
  // that its waits are timed and counted too.
  [[nodiscard]] std::unique_ptr<Work> Timed(absl::Time issued,
                                            std::unique_ptr<Work> work);

  // Time blocked and waits counted; shared with the Works handed out, which
  // may outlive the group.
  struct WaitCounters {
    std::atomic<int64_t> blocked_ns{0};
    std::atomic<int64_t> host_waits{0};
    std::atomic<int64_t> stream_waits{0};
    void Reset() {
      blocked_ns = 0;
      host_waits = 0;
      stream_waits = 0;
    }
  };

  const size_t max_logged_calls_;
  const std::shared_ptr<WaitCounters> waits_ = std::make_shared<WaitCounters>();
  mutable Mutex mu_;
  std::vector<CollectiveCall> calls_ ABSL_GUARDED_BY(mu_);
  int64_t calls_not_logged_ ABSL_GUARDED_BY(mu_) = 0;
  std::array<int64_t, kNumCollectiveKinds> counts_ ABSL_GUARDED_BY(mu_) = {};
  std::array<uint64_t, kNumCollectiveKinds> payload_bytes_
      ABSL_GUARDED_BY(mu_) = {};
};

}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_RECORDING_PROCESS_GROUP_H_
