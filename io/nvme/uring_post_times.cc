#include "io/nvme/uring_post_times.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/thread.h"

namespace chunkzero {
namespace io_internal {

absl::Status UringPostTimes::Start(io_uring* ring) {
  const int fd = ::eventfd(0, EFD_CLOEXEC);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  const int registered = io_uring_register_eventfd(ring, fd);
  if (registered < 0) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat(
        "io_uring eventfd registration: ", std::strerror(-registered)));
  }
  ring_ = ring;
  eventfd_ = fd;
  absl::StatusOr<std::thread> watcher = StartThread(
      "the completion clock of the NVMe tier's io_uring", [this] { Watch(); });
  if (!watcher.ok()) {
    Stop();
    return watcher.status();
  }
  watcher_ = *std::move(watcher);
  return absl::OkStatus();
}

void UringPostTimes::Watch() {
  for (;;) {
    uint64_t signals = 0;
    const ssize_t n = ::read(eventfd_, &signals, sizeof(signals));
    if (stopping_.load(std::memory_order_acquire)) return;
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof(signals))) return;  // Unusable.
    const unsigned tail = io_uring_smp_load_acquire(ring_->cq.ktail);
    const absl::Time now = absl::Now();
    MutexLock lock(&mu_);
    if (notes_.empty() || notes_.back().tail != tail) {
      notes_.push_back({tail, now});
    }
  }
}

absl::Time UringPostTimes::PostedAt(unsigned index, absl::Time fallback) {
  MutexLock lock(&mu_);
  // Completions are reaped in ring order: notes whose tail is not past
  // `index` were about earlier ones (the difference wraps with the
  // indices).
  while (!notes_.empty() &&
         static_cast<int>(notes_.front().tail - index) <= 0) {
    notes_.pop_front();
  }
  return notes_.empty() ? fallback : notes_.front().at;
}

void UringPostTimes::Stop() {
  if (eventfd_ < 0) return;
  if (watcher_.joinable()) {
    stopping_.store(true, std::memory_order_release);
    const uint64_t one = 1;
    // Wakes the watcher; an eventfd write of 1 cannot block here.
    while (::write(eventfd_, &one, sizeof(one)) < 0 && errno == EINTR) {
    }
    watcher_.join();
  }
  io_uring_unregister_eventfd(ring_);
  ::close(eventfd_);
  eventfd_ = -1;
}

}  // namespace io_internal
}  // namespace chunkzero
