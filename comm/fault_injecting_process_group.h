// FaultInjectingProcessGroup: a decorator that makes chosen collectives of
// this rank fail or stall, to test how the other ranks and the caller cope.
//
//   FaultInjectingProcessGroup faulty(**world.group(1),
//       FaultPlan().StallCall(2, absl::Seconds(1))
//                  .FailKind(CollectiveKind::kBarrier,
//                  absl::UnavailableError("x")));
//   // faulty's 3rd collective blocks 1 s before reaching the inner group.
//
// Calls are numbered 0, 1, 2, ... in the order they enter this decorator,
// every kind counted. For each call the first matching rule (in the order the
// rules were added) applies:
//  - Fail: the call returns an already-failed Work with the rule's status
//    code and message (prefixed with "injected fault: rank r: <call>: "); the
//    inner group is NOT called, so the peers never see this rank arrive and
//    fail with DeadlineExceeded after their timeout.
//  - Stall: the ISSUING call blocks for the duration (as if this rank's host
//    were slow to reach the collective), then forwards to the inner group.
// Calls that match no rule are forwarded unchanged.
//
// Ownership: does not own `inner`, which must outlive the decorator.
// Thread-safety: thread-safe. The plan is fixed at construction.
#ifndef CHUNKZERO_COMM_FAULT_INJECTING_PROCESS_GROUP_H_
#define CHUNKZERO_COMM_FAULT_INJECTING_PROCESS_GROUP_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "comm/forwarding_process_group.h"
#include "comm/process_group.h"

namespace chunkzero {
namespace comm {

// Which calls to disturb and how. A value type; build it with the chained
// methods below.
class FaultPlan {
 public:
  // Call number `index` fails with `status`. REQUIRES: !status.ok().
  FaultPlan& FailCall(int64_t index, absl::Status status);
  // Every call of `kind` fails with `status`. REQUIRES: !status.ok().
  FaultPlan& FailKind(CollectiveKind kind, absl::Status status);
  // Call number `index` blocks the caller for `duration`, then runs.
  FaultPlan& StallCall(int64_t index, absl::Duration duration);
  // Every call of `kind` blocks the caller for `duration`, then runs.
  FaultPlan& StallKind(CollectiveKind kind, absl::Duration duration);

  struct Rule {
    std::optional<int64_t> index;        // Matches this call number, or
    std::optional<CollectiveKind> kind;  // every call of this kind.
    absl::Status fail;                   // Non-OK: fail with it.
    absl::Duration stall;                // Otherwise: stall this long.
  };
  // The rule for call `index` of `kind`, or nullptr.
  const Rule* Find(int64_t index, CollectiveKind kind) const;

 private:
  std::vector<Rule> rules_;
};

class FaultInjectingProcessGroup final : public ForwardingProcessGroup {
 public:
  FaultInjectingProcessGroup(ProcessGroup& inner, FaultPlan plan);
  FaultInjectingProcessGroup(const FaultInjectingProcessGroup&) = delete;
  FaultInjectingProcessGroup& operator=(const FaultInjectingProcessGroup&) =
      delete;

  // Number of calls that entered this decorator so far.
  int64_t calls() const { return next_index_.load(); }

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
  // DoAbort forwards (a stall happens on the issuing thread, before the
  // inner group sees the call, so there is nothing of this decorator to
  // stop).

 private:
  // Applies the plan to the next call. Returns a failed Work for a Fail rule
  // (after which the caller must not forward), else nullptr after any stall.
  [[nodiscard]] std::unique_ptr<Work> Inject(const CollectiveCall& call);

  const FaultPlan plan_;
  std::atomic<int64_t> next_index_{0};
};

}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_FAULT_INJECTING_PROCESS_GROUP_H_
