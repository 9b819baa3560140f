// What the train job prints: a progress line per step and the final
// summary that puts each rank's memory beside what replicated data
// parallelism would hold, and the traffic beside DESIGN.md §7.
#ifndef CHUNKZERO_TOOLS_TRAIN_REPORT_H_
#define CHUNKZERO_TOOLS_TRAIN_REPORT_H_

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/time/time.h"
#include "tools/train/trainer.h"

namespace chunkzero {

// The engine's cost model (engine/cost_model.h) for the job's flags: model
// bytes per parameter kept (14 for f16 AdamW), replicated DDP's (16), and
// §7's bus bytes per rank and step.
int64_t ModelBytesPerParameter(const TrainOptions& options);
int64_t ReplicatedBytesPerParameter(const TrainOptions& options);
double ExpectedCommBytesPerStep(const TrainOptions& options, int64_t psi);

// The memory target: per-rank peak <= 1.05 x (K Ψ / N + chunks in flight),
// K = ModelBytesPerParameter. What a rank materialises on top of its share
// at rest is in flight (peak - at rest); the check then bounds what the
// share at rest costs beyond K Ψ / N (chunk padding, anything replicated).
struct MemoryCheck {
  int rank = 0;                // The rank with the largest peak.
  int64_t peak = 0;            // Its peak model-data bytes.
  int64_t at_rest = 0;         // Its bytes between steps.
  double sharded_bytes = 0;    // K Ψ / N (K Ψ for the replicated layout).
  double in_flight_bytes = 0;  // peak - at_rest.
  double ratio = 0;            // peak / (sharded + in flight).
};
MemoryCheck CheckMemory(const TrainOptions& options, const TrainResult& r);

// The summary table (several lines, ends with a newline).
std::string FormatSummary(const TrainOptions& options, const TrainResult& r);

// Prints one line per step: rewritten in place on a terminal, one per line
// otherwise.
class ProgressPrinter {
 public:
  ProgressPrinter(std::FILE* out, bool terminal)
      : out_(out), terminal_(terminal) {}
  void OnStep(const StepMetrics& m);
  // Ends the in-place line.
  void Finish();

 private:
  std::FILE* out_;
  bool terminal_;
  bool started_ = false;
  absl::Time start_;
  int64_t first_step_ = 0;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_TOOLS_TRAIN_REPORT_H_
