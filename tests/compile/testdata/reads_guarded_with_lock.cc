// Must compile under clang's -Wthread-safety: the same read, under the lock.
#include "base/mutex.h"

class Counter {
 public:
  int Get() const {
    chunkzero::MutexLock lock(&mu_);
    return count_;
  }

 private:
  mutable chunkzero::Mutex mu_;
  int count_ ABSL_GUARDED_BY(mu_) = 0;
};

int Read(const Counter& c) { return c.Get(); }
