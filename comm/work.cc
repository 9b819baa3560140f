#include "comm/work.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/detached_status.h"
#include "base/mutex.h"

namespace chunkzero {
namespace comm {

struct WorkCompletion::State {
  explicit State(std::string d) : description(std::move(d)) {}
  const std::string description;
  Mutex mu;
  CondVar cv;
  std::optional<absl::Status> status ABSL_GUARDED_BY(mu);
};

namespace {

class CompletedWork final : public Work {
 public:
  explicit CompletedWork(absl::Status status) : status_(std::move(status)) {}
  bool IsCompleted() override { return true; }
  absl::Status DoWait(absl::Time) override { return DetachedCopy(status_); }

 private:
  const absl::Status status_;
};

class PendingWork final : public Work {
 public:
  explicit PendingWork(std::shared_ptr<WorkCompletion::State> state)
      : state_(std::move(state)) {}

  bool IsCompleted() override {
    MutexLock lock(&state_->mu);
    return state_->status.has_value();
  }

  absl::Status DoWait(absl::Time deadline) override {
    MutexLock lock(&state_->mu);
    while (!state_->status.has_value()) {
      if (state_->cv.WaitWithDeadline(&state_->mu, deadline) &&
          !state_->status.has_value()) {
        return absl::DeadlineExceededError(absl::StrCat(
            "Work::Wait deadline passed before ", state_->description,
            " completed; the operation is still running"));
      }
    }
    // Each waiter gets its own copy (see DetachedCopy).
    return DetachedCopy(*state_->status);
  }

 private:
  const std::shared_ptr<WorkCompletion::State> state_;
};

}  // namespace

std::unique_ptr<Work> MakeCompletedWork(absl::Status status) {
  return std::make_unique<CompletedWork>(std::move(status));
}

WorkCompletion::WorkCompletion(std::string description)
    : state_(std::make_shared<State>(std::move(description))) {}

WorkCompletion::~WorkCompletion() = default;

std::unique_ptr<Work> WorkCompletion::MakeWork() const {
  return std::make_unique<PendingWork>(state_);
}

void WorkCompletion::Complete(absl::Status status) {
  MutexLock lock(&state_->mu);
  state_->status = std::move(status);
  state_->cv.SignalAll();
}

}  // namespace comm
}  // namespace chunkzero
