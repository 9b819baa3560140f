// StepSchedule: the hook scopes of one training step in the order they ran
// -- forward, backward, and the forward scopes that activation
// recomputation runs again inside backward -- and the schedule that later
// steps follow.
//
//   StepSchedule schedule;
//   schedule.Begin(StepSchedule::kForward, {0, 1});   // each Pre* hook
//   ...
//   std::vector<StepSchedule::Op> ran = schedule.EndStep();
//   schedule.Adopt(ran);             // once the ranks agree on it
//   // next step, at each scope:
//   schedule.Begin(StepSchedule::kForward, {0, 1});
//   if (schedule.following()) { ... schedule.Ahead() ... }
//
// A step follows the adopted schedule while every scope it has begun is
// the one at the same position of the schedule; from the first that is
// not, it does not (until the next step), and the caller falls back to
// rules that need no schedule. Parameters are the caller's indices.
//
// Thread-safety: one per rank, used by that rank's thread.
#ifndef CHUNKZERO_DDP_STEP_SCHEDULE_H_
#define CHUNKZERO_DDP_STEP_SCHEDULE_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace chunkzero {

class StepSchedule {
 public:
  enum Kind : uint8_t { kForward = 0, kBackward = 1 };
  struct Op {
    Kind kind = kForward;
    std::vector<int> params;
    friend bool operator==(const Op& a, const Op& b) {
      return a.kind == b.kind && a.params == b.params;
    }
  };

  // A scope begins: recorded, and compared with the schedule's scope at
  // this position.
  void Begin(Kind kind, std::vector<int> params);
  // True when a schedule is adopted and every scope of this step so far
  // was the schedule's.
  bool following() const { return following_; }
  // The schedule's scopes after the current one (empty unless following()).
  absl::Span<const Op> Ahead() const;
  // Whether the current scope is a forward scope inside backward (a
  // backward scope came before it this step): activation recomputation.
  bool recomputing() const { return recomputing_; }

  // Ends the step: returns the scopes it ran and starts the next.
  std::vector<Op> EndStep();
  // The scopes every later step is expected to run (empty: none).
  void Adopt(std::vector<Op> ops);
  const std::vector<Op>& adopted() const { return adopted_; }

  // A 64-bit digest of `ops` (FNV-1a over kinds and indices), for ranks to
  // compare their recordings.
  static uint64_t Fingerprint(absl::Span<const Op> ops);
  // True if `ops` has a forward scope after a backward one (activation
  // recomputation): only such a step needs a schedule to prefetch well.
  static bool Recomputes(absl::Span<const Op> ops);
  // How many of `ops` come before the first forward scope that follows a
  // backward one among them (the next recomputation); ops.size() if none.
  // Seen from a recomputed scope: the rest of its recomputation and the
  // backward that uses what it recomputed.
  static size_t UntilNextRecompute(absl::Span<const Op> ops);

 private:
  std::vector<Op> adopted_;
  std::vector<Op> recording_;
  bool following_ = false;
  bool in_backward_ = false;
  bool recomputing_ = false;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_DDP_STEP_SCHEDULE_H_
