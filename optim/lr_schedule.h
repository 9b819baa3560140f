// Learning-rate schedules: constant, linear warm-up, and cosine decay after
// a linear warm-up (the train tool's --lr, --min_lr, --warmup).
//
//   LrSchedule s = LrSchedule::WarmupCosine(/*lr=*/6e-4, /*min_lr=*/6e-5,
//                                           /*warmup_steps=*/100,
//                                           /*total_steps=*/1000);
//   double lr = s.At(step);   // step counts from 0
//
// Warm-up (step < warmup_steps): lr * (step + 1) / warmup_steps, so the
// first step already moves. Then cosine from lr down to min_lr at
// total_steps - 1: min_lr + (lr - min_lr) * (1 + cos(pi * p)) / 2 with
// p = (step - warmup_steps) / max(1, total_steps - 1 - warmup_steps),
// clamped to [0, 1]. min_lr == lr and warmup_steps == 0 give a constant
// rate. Pure values; thread-compatible.
#ifndef CHUNKZERO_OPTIM_LR_SCHEDULE_H_
#define CHUNKZERO_OPTIM_LR_SCHEDULE_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace chunkzero {

class LrSchedule {
 public:
  static LrSchedule Constant(double lr) { return LrSchedule(lr, lr, 0, 1); }
  // Linear warm-up to lr, then constant.
  static LrSchedule LinearWarmup(double lr, int64_t warmup_steps) {
    return LrSchedule(lr, lr, warmup_steps, warmup_steps + 1);
  }
  // InvalidArgument for a negative rate, min_lr > lr, negative warm-up or
  // total_steps < 1.
  [[nodiscard]] static absl::StatusOr<LrSchedule> WarmupCosine(
      double lr, double min_lr, int64_t warmup_steps, int64_t total_steps);

  // The rate of 0-based `step`.
  double At(int64_t step) const;

  double lr() const { return lr_; }
  double min_lr() const { return min_lr_; }
  int64_t warmup_steps() const { return warmup_steps_; }
  int64_t total_steps() const { return total_steps_; }

 private:
  LrSchedule(double lr, double min_lr, int64_t warmup_steps,
             int64_t total_steps)
      : lr_(lr),
        min_lr_(min_lr),
        warmup_steps_(warmup_steps),
        total_steps_(total_steps) {}

  double lr_;
  double min_lr_;
  int64_t warmup_steps_;
  int64_t total_steps_;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_OPTIM_LR_SCHEDULE_H_
