#include "tools/train/step_metrics.h"

#include <cmath>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace chunkzero {
namespace {

// JSON has no NaN or infinities: a non-finite figure (the grad norm of a
// skipped fp16 step) is null, as Python's json.dumps(allow_nan=False)
// callers and JSON.parse expect.
std::string JsonNumber(double x) {
  if (!std::isfinite(x)) return "null";
  return absl::StrFormat("%.9g", x);
}

std::string JsonMap(const std::map<std::string, int64_t>& m) {
  std::vector<std::string> parts;
  for (const auto& [k, v] : m) parts.push_back(absl::StrCat("\"", k, "\":", v));
  return absl::StrCat("{", absl::StrJoin(parts, ","), "}");
}

}  // namespace

std::string StepMetricsJson(const StepMetrics& m) {
  std::vector<std::string> ranks;
  for (const RankStepMetrics& r : m.ranks) {
    ranks.push_back(absl::StrCat(
        "{\"peak_bytes\":", JsonMap(r.peak_bytes), ",\"comm_bytes\":",
        JsonMap(r.comm_bytes), ",\"device_peak_bytes\":", r.peak_device_bytes,
        ",\"host_peak_bytes\":", r.peak_host_bytes,
        ",\"h2d_bytes\":", r.h2d_bytes, ",\"d2h_bytes\":", r.d2h_bytes,
        r.disk
            ? absl::StrCat(",\"disk_read_bytes\":", r.disk_read_bytes,
                           ",\"disk_written_bytes\":", r.disk_written_bytes,
                           ",\"disk_wait_s\":", JsonNumber(r.disk_wait_s),
                           ",\"disk_busy_s\":", JsonNumber(r.disk_busy_s),
                           ",\"disk_hidden_s\":", JsonNumber(r.disk_hidden_s()))
            : "",
        "}"));
  }
  return absl::StrCat(
      "{\"step\":", m.step, ",\"loss\":", JsonNumber(m.loss),
      ",\"lr\":", JsonNumber(m.lr),
      ",\"loss_scale\":", JsonNumber(m.loss_scale),
      ",\"skipped\":", m.skipped ? "true" : "false",
      ",\"grad_norm\":", JsonNumber(m.grad_norm),
      ",\"step_time_s\":", JsonNumber(m.step_time_s),
      ",\"tokens_per_s\":", JsonNumber(m.tokens_per_s),
      ",\"time_s\":{\"forward\":", JsonNumber(m.forward_s),
      ",\"backward\":", JsonNumber(m.backward_s),
      ",\"optimizer\":", JsonNumber(m.optimizer_s),
      ",\"comm_wait\":", JsonNumber(m.comm_wait_s),
      "},\"activations\":{\"kept_bytes\":", m.activation_kept_bytes,
      ",\"recomputed_bytes\":", m.activation_recomputed_bytes,
      "},\"recompute_accesses\":", m.recompute_accesses, ",\"ranks\":[",
      absl::StrJoin(ranks, ","), "]}");
}

}  // namespace chunkzero
