// --tensorboard_dir: each step's figures as TensorBoard scalars
// (io/tensorboard/event_file.h), so that a run can be watched live:
//   train/loss, train/lr, train/grad_norm, train/loss_scale,
//   train/tokens_per_s, train/step_time_s,
//   memory/device_peak_bytes and memory/host_peak_bytes (the largest over
//   the ranks), copies/h2d_bytes and copies/d2h_bytes (over the ranks).
//
//   CZ_ASSIGN_OR_RETURN(auto report, TensorBoardReport::Create(dir));
//   ... on every step: CZ_RETURN_IF_ERROR(report->OnStep(metrics));
#ifndef CHUNKZERO_TOOLS_TRAIN_TENSORBOARD_REPORT_H_
#define CHUNKZERO_TOOLS_TRAIN_TENSORBOARD_REPORT_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/step_stats.h"
#include "io/tensorboard/event_file.h"

namespace chunkzero {

// The scalars of one step, by tag, in the order listed above.
std::vector<std::pair<std::string, float>> TensorBoardScalars(
    const StepMetrics& metrics);

class TensorBoardReport {
 public:
  // Before the job is planned, creating nothing: that `dir` can be made
  // and an event file created in it (CheckCanCreateDirectories).
  [[nodiscard]] static absl::Status Check(const std::string& dir);
  // A new event file in `dir` (made if missing); errors start with
  // "--tensorboard_dir=DIR".
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<TensorBoardReport>>
  Create(const std::string& dir);

  const std::string& path() const { return writer_->path(); }
  [[nodiscard]] absl::Status OnStep(const StepMetrics& metrics);
  [[nodiscard]] absl::Status Close();
  // For a job that failed: closes the file, and if no step reached it
  // removes it (and the directory, if made for it and empty), so that a
  // run refused at the rendezvous leaves no event file.
  void CloseAfterFailure();

 private:
  TensorBoardReport(std::string dir, bool dir_existed,
                    std::unique_ptr<EventFileWriter> writer)
      : dir_(std::move(dir)),
        dir_existed_(dir_existed),
        writer_(std::move(writer)) {}
  absl::Status Flagged(const absl::Status& status) const;

  std::string dir_;
  bool dir_existed_;
  bool wrote_a_step_ = false;
  std::unique_ptr<EventFileWriter> writer_;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_TOOLS_TRAIN_TENSORBOARD_REPORT_H_
