#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace chunkzero {

absl::StatusOr<LrSchedule> LrSchedule::WarmupCosine(double lr, double min_lr,
                                                    int64_t warmup_steps,
                                                    int64_t total_steps) {
  if (!(lr >= 0) || !(min_lr >= 0) || min_lr > lr) {
    return absl::InvalidArgumentError(
        absl::StrCat("learning rates must satisfy 0 <= min_lr <= lr, got lr ",
                     lr, " and min_lr ", min_lr));
  }
  if (warmup_steps < 0 || total_steps < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "warm-up steps (", warmup_steps, ") must be >= 0 and total steps (",
        total_steps, ") >= 1"));
  }
  return LrSchedule(lr, min_lr, warmup_steps, total_steps);
}

double LrSchedule::At(int64_t step) const {
  if (step < warmup_steps_) {
    return lr_ * static_cast<double>(step + 1) / warmup_steps_;
  }
  if (min_lr_ == lr_) return lr_;
  const double span = static_cast<double>(
      std::max<int64_t>(1, total_steps_ - 1 - warmup_steps_));
  const double p =
      std::clamp(static_cast<double>(step - warmup_steps_) / span, 0.0, 1.0);
  return min_lr_ + (lr_ - min_lr_) * 0.5 * (1.0 + std::cos(M_PI * p));
}

}  // namespace chunkzero
