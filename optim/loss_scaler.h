// DynamicLossScaler: the loss scale of fp16 mixed precision.
//
//   DynamicLossScaler scaler;                 // PyTorch GradScaler defaults
//   loss *= scaler.scale();  ... backward ...
//   const bool step = scaler.Update(/*found_inf=*/overflow_on_any_rank);
//
// Defaults follow torch.cuda.amp.GradScaler: initial scale 2^16, growth
// factor 2, backoff factor 0.5, growth interval 2000; plus hysteresis (as
// in DeepSpeed and ColossalAI), the number of overflows tolerated before
// the scale backs off (1 = back off on every overflow, PyTorch's
// behaviour). Update semantics:
//  - overflow: the step is skipped; the growth counter resets; hysteresis
//    left drops by one and, at zero, the scale is multiplied by the backoff
//    factor (not below min_scale) and hysteresis left refills.
//  - no overflow: the step is taken; after growth_interval such steps in a
//    row the scale is multiplied by the growth factor (not above max_scale)
//    and hysteresis left refills.
// bf16 needs no scaler. Thread-compatible value type; the caller agrees on
// found_inf across ranks first (one collective) so that every rank updates
// identically.
#ifndef CHUNKZERO_OPTIM_LOSS_SCALER_H_
#define CHUNKZERO_OPTIM_LOSS_SCALER_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace chunkzero {

struct LossScalerOptions {
  double initial_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  int hysteresis = 1;
  double min_scale = 1.0;
  double max_scale = 16777216.0;  // 2^24
};

class DynamicLossScaler {
 public:
  DynamicLossScaler() : DynamicLossScaler(LossScalerOptions()) {}
  // InvalidArgument for factors outside growth > 1 > backoff > 0, a
  // non-positive interval or hysteresis, or an initial scale outside
  // [min_scale, max_scale].
  [[nodiscard]] static absl::StatusOr<DynamicLossScaler> Create(
      const LossScalerOptions& options);

  double scale() const { return scale_; }
  // Records the step's result; returns true if the optimizer should step
  // (no overflow), false if the step is skipped.
  bool Update(bool found_inf);

  int64_t growth_tracker() const { return growth_tracker_; }
  int hysteresis_left() const { return hysteresis_left_; }
  const LossScalerOptions& options() const { return options_; }

  // Puts back a state read from scale(), growth_tracker() and
  // hysteresis_left() (a checkpoint). InvalidArgument, changing nothing, for
  // a scale outside [min_scale, max_scale], a tracker outside
  // [0, growth_interval) or hysteresis left outside [1, hysteresis].
  [[nodiscard]] absl::Status Restore(double scale, int64_t growth_tracker,
                                     int hysteresis_left);

 private:
  explicit DynamicLossScaler(const LossScalerOptions& options)
      : options_(options),
        scale_(options.initial_scale),
        hysteresis_left_(options.hysteresis) {}

  LossScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int hysteresis_left_;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_OPTIM_LOSS_SCALER_H_
