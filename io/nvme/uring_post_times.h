// UringPostTimes: when each completion of an io_uring was posted, so that a
// completion reaped later (at the engine's next Submit or Wait) is timed
// when the disk finished it, not when the thread that computes looked.
// The ring signals an eventfd as it posts completions; a thread of its own
// wakes on it and notes the completion ring's tail and the time. The
// completion at ring index k was posted by the first note whose tail is
// past k. Internal to io/nvme (uring_io_engine.cc).
//
//   UringPostTimes times;
//   if (times.Start(&ring).ok()) ...          // else: timed when reaped
//   absl::Time at = times.PostedAt(*ring.cq.khead, absl::Now());
//   times.Stop();                             // before io_uring_queue_exit
//
// Thread-safety: Start, PostedAt and Stop are called by the engine's
// thread; the notes are shared with the watching thread under a mutex.
#ifndef CHUNKZERO_IO_NVME_URING_POST_TIMES_H_
#define CHUNKZERO_IO_NVME_URING_POST_TIMES_H_

#include <liburing.h>

#include <atomic>
#include <deque>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "base/mutex.h"

namespace chunkzero {
namespace io_internal {

class UringPostTimes {
 public:
  UringPostTimes() = default;
  UringPostTimes(const UringPostTimes&) = delete;
  UringPostTimes& operator=(const UringPostTimes&) = delete;
  ~UringPostTimes() { Stop(); }

  // Registers an eventfd with `ring` (which outlives Stop) and starts
  // watching it. An error (a kernel without eventfd registration, no
  // thread) leaves nothing running; PostedAt then answers its fallback.
  [[nodiscard]] absl::Status Start(io_uring* ring);
  // When the completion at ring index `index` (the completion ring's head
  // as it is reaped, in order) was posted; `fallback` when no note covers
  // it yet (the watcher has not woken: it was posted just now).
  absl::Time PostedAt(unsigned index, absl::Time fallback);
  // Stops the watcher and unregisters the eventfd. Idempotent.
  void Stop();

 private:
  struct Note {
    unsigned tail;
    absl::Time at;
  };
  void Watch();

  io_uring* ring_ = nullptr;
  int eventfd_ = -1;
  std::thread watcher_;
  std::atomic<bool> stopping_{false};
  Mutex mu_;
  std::deque<Note> notes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace io_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_IO_NVME_URING_POST_TIMES_H_
