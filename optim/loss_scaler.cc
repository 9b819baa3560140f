#include "optim/loss_scaler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace chunkzero {

absl::StatusOr<DynamicLossScaler> DynamicLossScaler::Create(
    const LossScalerOptions& o) {
  if (!(o.growth_factor > 1) || !(o.backoff_factor > 0) ||
      !(o.backoff_factor < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loss scaler needs growth_factor > 1 > backoff_factor > 0, got ",
        o.growth_factor, " and ", o.backoff_factor));
  }
  if (o.growth_interval < 1 || o.hysteresis < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss scaler growth_interval (", o.growth_interval,
                     ") and hysteresis (", o.hysteresis, ") must be positive"));
  }
  if (!(o.min_scale > 0) || !(o.min_scale <= o.initial_scale) ||
      !(o.initial_scale <= o.max_scale)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loss scaler needs 0 < min_scale <= initial_scale <= max_scale, got ",
        o.min_scale, ", ", o.initial_scale, ", ", o.max_scale));
  }
  return DynamicLossScaler(o);
}

bool DynamicLossScaler::Update(bool found_inf) {
  if (found_inf) {
    growth_tracker_ = 0;
    if (--hysteresis_left_ <= 0) {
      scale_ = std::max(options_.min_scale, scale_ * options_.backoff_factor);
      hysteresis_left_ = options_.hysteresis;
    }
    return false;
  }
  if (++growth_tracker_ >= options_.growth_interval) {
    growth_tracker_ = 0;
    hysteresis_left_ = options_.hysteresis;
    scale_ = std::min(options_.max_scale, scale_ * options_.growth_factor);
  }
  return true;
}

absl::Status DynamicLossScaler::Restore(double scale, int64_t growth_tracker,
                                        int hysteresis_left) {
  if (!(scale >= options_.min_scale && scale <= options_.max_scale) ||
      growth_tracker < 0 || growth_tracker >= options_.growth_interval ||
      hysteresis_left < 1 || hysteresis_left > options_.hysteresis) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loss scaler state (scale ", scale, ", growth tracker ", growth_tracker,
        ", hysteresis left ", hysteresis_left,
        ") does not fit its options (scale in [", options_.min_scale, ", ",
        options_.max_scale, "], growth interval ", options_.growth_interval,
        ", hysteresis ", options_.hysteresis, ")"));
  }
  scale_ = scale;
  growth_tracker_ = growth_tracker;
  hysteresis_left_ = hysteresis_left;
  return absl::OkStatus();
}

}  // namespace chunkzero
