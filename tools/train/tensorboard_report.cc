#include "tools/train/tensorboard_report.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/file.h"

namespace chunkzero {

std::vector<std::pair<std::string, float>> TensorBoardScalars(
    const StepMetrics& m) {
  int64_t device = 0, host = 0, h2d = 0, d2h = 0;
  for (const RankStepMetrics& r : m.ranks) {
    device = std::max(device, r.peak_device_bytes);
    host = std::max(host, r.peak_host_bytes);
    h2d += r.h2d_bytes;
    d2h += r.d2h_bytes;
  }
  auto f = [](double v) { return static_cast<float>(v); };
  return {{"train/loss", f(m.loss)},
          {"train/lr", f(m.lr)},
          {"train/grad_norm", f(m.grad_norm)},
          {"train/loss_scale", f(m.loss_scale)},
          {"train/tokens_per_s", f(m.tokens_per_s)},
          {"train/step_time_s", f(m.step_time_s)},
          {"memory/device_peak_bytes", f(static_cast<double>(device))},
          {"memory/host_peak_bytes", f(static_cast<double>(host))},
          {"copies/h2d_bytes", f(static_cast<double>(h2d))},
          {"copies/d2h_bytes", f(static_cast<double>(d2h))}};
}

absl::Status TensorBoardReport::Check(const std::string& dir) {
  const absl::Status can = CheckCanCreateDirectories(dir);
  if (can.ok()) return can;
  return absl::Status(
      can.code(), absl::StrCat("--tensorboard_dir=", dir, ": ", can.message()));
}

absl::StatusOr<std::unique_ptr<TensorBoardReport>> TensorBoardReport::Create(
    const std::string& dir) {
  struct stat st;
  const bool existed = ::stat(dir.c_str(), &st) == 0;
  absl::StatusOr<std::unique_ptr<EventFileWriter>> writer =
      EventFileWriter::Create(dir);
  if (!writer.ok()) {
    return absl::Status(writer.status().code(),
                        absl::StrCat("--tensorboard_dir=", dir, ": ",
                                     writer.status().message()));
  }
  return std::unique_ptr<TensorBoardReport>(
      new TensorBoardReport(dir, existed, *std::move(writer)));
}

absl::Status TensorBoardReport::Flagged(const absl::Status& status) const {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("--tensorboard_dir=", dir_,
                                                  ": ", status.message()));
}

absl::Status TensorBoardReport::OnStep(const StepMetrics& metrics) {
  wrote_a_step_ = true;
  return Flagged(
      writer_->WriteScalars(metrics.step, TensorBoardScalars(metrics)));
}

absl::Status TensorBoardReport::Close() { return Flagged(writer_->Close()); }

void TensorBoardReport::CloseAfterFailure() {
  (void)writer_->Close();
  if (wrote_a_step_) return;
  ::unlink(writer_->path().c_str());
  if (!dir_existed_) ::rmdir(dir_.c_str());
}

}  // namespace chunkzero
