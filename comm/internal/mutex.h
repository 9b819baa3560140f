// A mutex, condition variable and notification that ThreadSanitizer can see.
//
//   comm_internal::Mutex mu;
//   int value ABSL_GUARDED_BY(mu);
//   { comm_internal::MutexLock lock(&mu); ++value; }
//
// Why not absl::Mutex: this workspace links Debian's prebuilt libabsl, which is
// not built with -fsanitize=thread, so TSAN cannot see absl::Mutex (or
// absl::Notification) hand-offs and reports false races on every field they
// guard. These wrappers sit on std::mutex / std::condition_variable (pthread,
// which TSAN intercepts) and keep Abseil's spelling and its thread-safety
// annotations, so the fields they guard are still checked by clang's
// -Wthread-safety.
//
// DetachedCopy(status) works around the same problem for absl::Status.
//
// Thread-safety: all methods are thread-safe. Nothing here is copyable or
// movable.
#ifndef CHUNKZERO_COMM_INTERNAL_MUTEX_H_
#define CHUNKZERO_COMM_INTERNAL_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace chunkzero {
namespace comm_internal {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `*mu` for the lifetime of the object.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
  }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  // Atomically releases `*mu`, blocks until signalled (or spuriously), and
  // reacquires `*mu`. Callers loop on their predicate.
  void Wait(Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }

  // Like Wait(), but also returns once `deadline` has passed. Returns true if
  // the deadline has passed on return. absl::InfiniteFuture() never expires.
  bool WaitWithDeadline(Mutex* mu, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (deadline == absl::InfiniteFuture()) {
      Wait(mu);
      return false;
    }
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const std::cv_status result =
        cv_.wait_until(lock, absl::ToChronoTime(deadline));
    lock.release();
    return result == std::cv_status::timeout || absl::Now() >= deadline;
  }

  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

// A one-shot event: Notify() once, any number of waiters.
class Notification {
 public:
  Notification() = default;
  Notification(const Notification&) = delete;
  Notification& operator=(const Notification&) = delete;

  // REQUIRES: called at most once.
  void Notify() {
    MutexLock lock(&mu_);
    notified_ = true;
    cv_.SignalAll();
  }
  bool HasBeenNotified() const {
    MutexLock lock(&mu_);
    return notified_;
  }
  void WaitForNotification() const {
    MutexLock lock(&mu_);
    while (!notified_) cv_.Wait(&mu_);
  }
  // Returns true if notified before `deadline`.
  bool WaitForNotificationWithDeadline(absl::Time deadline) const {
    MutexLock lock(&mu_);
    while (!notified_) {
      if (cv_.WaitWithDeadline(&mu_, deadline)) return notified_;
    }
    return true;
  }

 private:
  mutable Mutex mu_;
  mutable CondVar cv_;
  bool notified_ ABSL_GUARDED_BY(mu_) = false;
};

// Returns a copy of `status` that shares no heap state with it. An
// absl::Status with a message is reference counted, and the final Unref and
// free happen inside the prebuilt libabsl, invisible to TSAN; a Status handed
// from one thread to another must therefore be passed as a detached copy, or
// TSAN reports a false race between the reader and the freeing thread.
inline absl::Status DetachedCopy(const absl::Status& status) {
  if (status.ok()) return absl::OkStatus();
  absl::Status copy(status.code(), std::string(status.message()));
  status.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) {
    copy.SetPayload(url, absl::Cord(std::string(payload)));
  });
  return copy;
}

}  // namespace comm_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_INTERNAL_MUTEX_H_
