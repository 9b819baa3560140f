// Must not compile under clang's -Wthread-safety: `count_` is read without
// holding `mu_`.
#include "base/mutex.h"

class Counter {
 public:
  int Get() const { return count_; }

 private:
  mutable chunkzero::Mutex mu_;
  int count_ ABSL_GUARDED_BY(mu_) = 0;
};

int Read(const Counter& c) { return c.Get(); }
