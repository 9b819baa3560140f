// ParallelFor: run a loop over [0, n) on a process-wide thread pool.
//
//   ParallelFor(n, /*grain=*/65536, [&](size_t begin, size_t end) {
//     for (size_t i = begin; i < end; ++i) out[i] = 2 * in[i];
//   });
//
// The range is split into contiguous pieces of at least `grain` indices (the
// whole range when n <= grain); the calling thread runs pieces itself and
// idle pool threads help. ParallelFor returns when every piece has run.
//
// Thread-safety: any number of threads may call ParallelFor at once, and `fn`
// may itself call ParallelFor. Neither blocks on pool capacity: a caller that
// finds the pool busy runs the remaining pieces itself, and it only ever
// waits for pieces that other threads have already started. The pool is
// created on first use and lives until the process exits.
//
// Size: `std::thread::hardware_concurrency()` threads in all (the caller
// counts as one), overridden by the environment variable
// CHUNKZERO_NUM_THREADS (a positive integer) or by
// SetParallelThreadsForTesting().
#ifndef CHUNKZERO_BASE_PARALLEL_FOR_H_
#define CHUNKZERO_BASE_PARALLEL_FOR_H_

#include <cstddef>

#include "absl/functional/function_ref.h"

namespace chunkzero {

// Calls fn(begin, end) for disjoint contiguous ranges that together cover
// [0, n) exactly once, each range at least `grain` long unless n < grain
// (grain 0 counts as 1). Does nothing when n == 0. The order and the number
// of calls are unspecified: `fn` must be safe to run concurrently on disjoint
// ranges. Exceptions must not escape `fn`.
void ParallelFor(size_t n, size_t grain,
                 absl::FunctionRef<void(size_t begin, size_t end)> fn);

// The number of threads ParallelFor splits this thread's work over (>= 1),
// the caller included: the process-wide count, capped by this thread's
// ScopedParallelThreads.
int GetParallelThreads();

// Each of `callers` threads' share of GetParallelThreads() when they run at
// once (in-process ranks, or rank processes on one machine):
// GetParallelThreads() / callers, at least 1.
int ParallelThreadsShare(int callers);

// Caps the threads ParallelFor uses for calls made by the constructing
// thread while the scope lives (the caller included), so that several
// threads sharing the pool each get their share of the cores: in-process
// ranks each hold ScopedParallelThreads(ParallelThreadsShare(ranks)). A cap of
// 1 runs every piece on the calling thread. Scopes nest; the innermost cap
// applies, and the destructor restores the one before it. Other threads are
// unaffected, including pool threads running this thread's pieces.
class ScopedParallelThreads {
 public:
  // REQUIRES: max_threads >= 1.
  explicit ScopedParallelThreads(int max_threads);
  ~ScopedParallelThreads();
  ScopedParallelThreads(const ScopedParallelThreads&) = delete;
  ScopedParallelThreads& operator=(const ScopedParallelThreads&) = delete;

 private:
  const int previous_;
};

// Overrides the thread count for the rest of the process (tests and
// benchmarks); `num_threads <= 0` restores the default. Safe to call at any
// time; calls already running keep the count they started with.
void SetParallelThreadsForTesting(int num_threads);

}  // namespace chunkzero

#endif  // CHUNKZERO_BASE_PARALLEL_FOR_H_
