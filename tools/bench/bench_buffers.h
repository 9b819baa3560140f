// What the benchmarks share: aligned buffers and the memcpy baseline.
#ifndef CHUNKZERO_TOOLS_BENCH_BENCH_BUFFERS_H_
#define CHUNKZERO_TOOLS_BENCH_BENCH_BUFFERS_H_

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "base/parallel_for.h"

namespace chunkzero {
namespace bench {

// A 64-byte aligned, zero-filled (so already faulted in) buffer.
struct Buffer {
  explicit Buffer(size_t bytes)
      : data(static_cast<unsigned char*>(
                 std::aligned_alloc(64, (bytes + 63) / 64 * 64)),
             &std::free) {
    std::memset(data.get(), 0, bytes);
  }
  template <typename T>
  T* as() {
    return reinterpret_cast<T*>(data.get());
  }
  std::unique_ptr<unsigned char, void (*)(void*)> data;
};

// memcpy, split over the ParallelFor threads in contiguous page ranges of at
// least `grain_bytes`, like the kernels it is the baseline of. Written out
// here rather than calling tensor's Copy, so that the baseline does not
// depend on the code under test.
inline void ParallelMemcpy(unsigned char* out, const unsigned char* in,
                           size_t bytes, bool parallel, size_t grain_bytes) {
  if (!parallel) {
    std::memcpy(out, in, bytes);
    return;
  }
  constexpr size_t kPage = 4096;
  const size_t pages = (bytes + kPage - 1) / kPage;
  ParallelFor(pages, std::max<size_t>(1, grain_bytes / kPage),
              [&](size_t begin, size_t end) {
                const size_t first = begin * kPage;
                const size_t last = std::min(end * kPage, bytes);
                std::memcpy(out + first, in + first, last - first);
              });
}

}  // namespace bench
}  // namespace chunkzero

#endif  // CHUNKZERO_TOOLS_BENCH_BENCH_BUFFERS_H_
