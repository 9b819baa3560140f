// The JSON line --metrics_out writes for one step (the engine's
// StepMetrics, engine/step_stats.h).
//
//   std::string line = StepMetricsJson(metrics);       // {"step":3,...}
#ifndef CHUNKZERO_TOOLS_TRAIN_STEP_METRICS_H_
#define CHUNKZERO_TOOLS_TRAIN_STEP_METRICS_H_

#include <string>

#include "engine/step_stats.h"

namespace chunkzero {

// The metrics as one line of JSON with the keys scripts read: step, loss,
// lr, loss_scale, skipped, grad_norm, step_time_s, tokens_per_s, time_s
// {forward, backward, optimizer, comm_wait}, activations {kept_bytes,
// recomputed_bytes}, recompute_accesses, ranks [{peak_bytes,
// comm_bytes, device_peak_bytes, host_peak_bytes, h2d_bytes, d2h_bytes}].
// A non-finite number (a skipped step's grad norm) is null.
std::string StepMetricsJson(const StepMetrics& m);

}  // namespace chunkzero

#endif  // CHUNKZERO_TOOLS_TRAIN_STEP_METRICS_H_
