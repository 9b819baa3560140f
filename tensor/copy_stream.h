// CopyStream: host-device copies on a thread of their own, run in the order
// they were enqueued, so that the copies of the chunks needed next run while
// this one computes. On the host-backed simulated device it is a thread; on
// a GPU the same role is a CUDA stream with events.
//
//   CopyStream stream;
//   stream.Enqueue([&] { CopyBytes(dst, sim, src, cpu, n); done.Notify(); });
//   ... compute ...
//   done.WaitForNotification();
//
// Tasks must not block on one another through the stream (a task waiting
// for a later task never finishes); they may wait for other threads, e.g. a
// collective on the comm worker.
//
// Thread-safety: Enqueue and Drain may be called from any thread.
// Destruction runs every task still queued, then joins the thread.
#ifndef CHUNKZERO_TENSOR_COPY_STREAM_H_
#define CHUNKZERO_TENSOR_COPY_STREAM_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "base/mutex.h"

namespace chunkzero {

class CopyStream {
 public:
  CopyStream();
  ~CopyStream();
  CopyStream(const CopyStream&) = delete;
  CopyStream& operator=(const CopyStream&) = delete;

  // Runs `task` on the stream's thread after every task enqueued before it.
  void Enqueue(std::function<void()> task);
  // Blocks until every task enqueued so far has run.
  void Drain();
  // Tasks run so far.
  int64_t tasks_run() const;

 private:
  void Run();

  mutable Mutex mu_;
  CondVar changed_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  int64_t enqueued_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t run_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_COPY_STREAM_H_
