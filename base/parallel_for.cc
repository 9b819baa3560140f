#include "base/parallel_for.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <deque>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "base/mutex.h"
#include "base/thread.h"

namespace chunkzero {
namespace {

// The thread count from CHUNKZERO_NUM_THREADS, else the hardware's.
int DefaultThreads() {
  if (const char* env = std::getenv("CHUNKZERO_NUM_THREADS")) {
    int value = 0;
    if (absl::SimpleAtoi(env, &value) && value > 0) return value;
  }
  const unsigned hardware = std::thread::hardware_concurrency();
  return hardware == 0 ? 1 : static_cast<int>(hardware);
}

// 0 = no override.
std::atomic<int> g_threads_override{0};

// This thread's ScopedParallelThreads cap; 0 = none.
thread_local int t_thread_cap = 0;

// Pieces per thread: more than one lets idle threads take over pieces from
// a thread that is slow or busy elsewhere.
constexpr size_t kPiecesPerThread = 4;

// Worker threads that pick jobs from a FIFO queue. Never destroyed.
//
// A job lives on its caller's stack. It is queued with a number of helper
// slots; each worker that takes a slot counts itself into `helpers_inside`
// and claims pieces with an atomic counter until none are left. The caller
// claims pieces too; when none are left it unqueues the job (so no new helper
// can join) and waits until `helpers_inside` is 0, at which point every
// piece has run and nobody refers to the job any more.
class ThreadPool {
 public:
  class Job {
   public:
    Job(size_t n, size_t num_pieces, absl::FunctionRef<void(size_t, size_t)> fn)
        : n_(n), num_pieces_(num_pieces), fn_(fn) {}

    // Runs unclaimed pieces until there are none left.
    void RunPieces() {
      const size_t base = n_ / num_pieces_;
      const size_t extra = n_ % num_pieces_;
      for (;;) {
        const size_t piece =
            next_piece_.fetch_add(1, std::memory_order_relaxed);
        if (piece >= num_pieces_) return;
        const size_t begin = piece * base + std::min(piece, extra);
        const size_t end = begin + base + (piece < extra ? 1 : 0);
        fn_(begin, end);
      }
    }

   private:
    friend class ThreadPool;
    const size_t n_;
    const size_t num_pieces_;
    const absl::FunctionRef<void(size_t, size_t)> fn_;
    std::atomic<size_t> next_piece_{0};
    // Guarded by ThreadPool::mu_ (the annotation cannot name another
    // object's member). The job is in the queue while helper_slots_ > 0.
    int helper_slots_ = 0;
    int helpers_inside_ = 0;
    // Notified (under mu_) when helpers_inside_ drops to 0.
    CondVar helpers_left_;
  };

  static ThreadPool& Get() {
    static ThreadPool* const pool = new ThreadPool();
    return *pool;
  }

  // Runs `job` with up to `helpers` worker threads besides the caller.
  // Returns when every piece has run.
  void Run(Job& job, int helpers) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      MutexLock lock(&mu_);
      // Fewer helpers where the kernel refuses more threads (ulimit -u):
      // the caller runs whatever pieces nobody else takes.
      helpers = std::min(helpers, EnsureWorkersLocked(helpers));
      job.helper_slots_ = helpers;
      queue_.push_back(&job);
    }
    for (int i = 0; i < helpers; ++i) work_cv_.Signal();
    job.RunPieces();

    MutexLock lock(&mu_);
    if (job.helper_slots_ > 0) {
      queue_.erase(std::find(queue_.begin(), queue_.end(), &job));
      job.helper_slots_ = 0;
    }
    while (job.helpers_inside_ > 0) job.helpers_left_.Wait(&mu_);
  }

 private:
  ThreadPool() = default;

  // Starts workers until there are `count`; returns how many there are.
  int EnsureWorkersLocked(int count) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (num_workers_ < count) {
      absl::StatusOr<std::thread> worker =
          StartThread("a ParallelFor worker", [this] { WorkerLoop(); });
      if (!worker.ok()) break;
      worker->detach();
      ++num_workers_;
    }
    return num_workers_;
  }

  void WorkerLoop() ABSL_LOCKS_EXCLUDED(mu_) {
    for (;;) {
      Job* job;
      {
        MutexLock lock(&mu_);
        while (queue_.empty()) work_cv_.Wait(&mu_);
        job = queue_.front();
        ++job->helpers_inside_;
        if (--job->helper_slots_ == 0) queue_.pop_front();
      }
      job->RunPieces();
      MutexLock lock(&mu_);
      // Once mu_ is released the caller may destroy `job`; notifying under
      // the lock keeps helpers_left_ alive until then.
      if (--job->helpers_inside_ == 0) job->helpers_left_.Signal();
    }
  }

  Mutex mu_;
  CondVar work_cv_;  // Notified when a job is queued.
  std::deque<Job*> queue_ ABSL_GUARDED_BY(mu_);
  int num_workers_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

int GetParallelThreads() {
  const int override_threads =
      g_threads_override.load(std::memory_order_relaxed);
  static const int default_threads = DefaultThreads();
  const int threads = override_threads > 0 ? override_threads : default_threads;
  return t_thread_cap > 0 ? std::min(threads, t_thread_cap) : threads;
}

int ParallelThreadsShare(int callers) {
  return std::max(1, GetParallelThreads() / std::max(callers, 1));
}

ScopedParallelThreads::ScopedParallelThreads(int max_threads)
    : previous_(t_thread_cap) {
  t_thread_cap = std::max(max_threads, 1);
}

ScopedParallelThreads::~ScopedParallelThreads() { t_thread_cap = previous_; }

void SetParallelThreadsForTesting(int num_threads) {
  g_threads_override.store(std::max(num_threads, 0), std::memory_order_relaxed);
}

void ParallelFor(size_t n, size_t grain,
                 absl::FunctionRef<void(size_t begin, size_t end)> fn) {
  if (n == 0) return;
  const size_t max_pieces = n / std::max<size_t>(grain, 1);
  const int threads = GetParallelThreads();
  if (threads <= 1 || max_pieces <= 1) {
    fn(0, n);
    return;
  }
  const size_t num_pieces =
      std::min(max_pieces, static_cast<size_t>(threads) * kPiecesPerThread);
  const int helpers = static_cast<int>(
      std::min(num_pieces - 1, static_cast<size_t>(threads - 1)));
  ThreadPool::Job job(n, num_pieces, fn);
  ThreadPool::Get().Run(job, helpers);
}

}  // namespace chunkzero
