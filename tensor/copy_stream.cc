#include "tensor/copy_stream.h"

#include <utility>

#include "base/thread.h"

namespace chunkzero {

CopyStream::CopyStream() {
  // Without a thread (the kernel refused one: ulimit -u) each task runs on
  // the caller's thread, in order all the same (see Enqueue).
  absl::StatusOr<std::thread> thread =
      StartThread("a host-device copy stream", [this] { Run(); });
  if (thread.ok()) thread_ = *std::move(thread);
}

CopyStream::~CopyStream() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    changed_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

void CopyStream::Enqueue(std::function<void()> task) {
  if (!thread_.joinable()) {
    task();
    MutexLock lock(&mu_);
    ++enqueued_;
    ++run_;
    return;
  }
  MutexLock lock(&mu_);
  queue_.push_back(std::move(task));
  ++enqueued_;
  changed_.SignalAll();
}

void CopyStream::Drain() {
  MutexLock lock(&mu_);
  const int64_t target = enqueued_;
  while (run_ < target) changed_.Wait(&mu_);
}

int64_t CopyStream::tasks_run() const {
  MutexLock lock(&mu_);
  return run_;
}

void CopyStream::Run() {
  for (;;) {
    std::function<void()> task;
    {
      MutexLock lock(&mu_);
      while (queue_.empty() && !stopping_) changed_.Wait(&mu_);
      if (queue_.empty()) return;  // Stopping, with nothing left to run.
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
    MutexLock lock(&mu_);
    ++run_;
    changed_.SignalAll();
  }
}

}  // namespace chunkzero
