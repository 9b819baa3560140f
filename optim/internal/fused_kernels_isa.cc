#include "optim/internal/fused_kernels_isa.h"

#include <algorithm>

#include "base/parallel_for.h"
#include "optim/internal/fused_kernel_table.h"

namespace chunkzero {
namespace optim_internal {
namespace {

// Parallel ranges start at multiples of this many elements.
constexpr size_t kTile = 1024;

// Calls fn(begin, end) over [0, n): on this thread alone for short arrays,
// else over ParallelFor in ranges that start at multiples of kTile.
template <typename Fn>
void ForRanges(size_t n, const Fn& fn) {
  if (n < kParallelMinElements) {
    fn(size_t{0}, n);
    return;
  }
  const size_t tiles = (n + kTile - 1) / kTile;
  ParallelFor(tiles, kParallelGrainElements / kTile,
              [&](size_t tile_begin, size_t tile_end) {
                fn(tile_begin * kTile, std::min(tile_end * kTile, n));
              });
}

}  // namespace

void ParallelAdam(KernelIsa isa, const AdamConstants& c, const AdamArrays& a,
                  size_t n) {
  const auto kernel = GetFusedKernelTable(isa).adam;
  ForRanges(n, [&](size_t begin, size_t end) { kernel(c, a, begin, end); });
}

void ParallelSgd(KernelIsa isa, const SgdConstants& c, const SgdArrays& a,
                 size_t n) {
  const auto kernel = GetFusedKernelTable(isa).sgd;
  ForRanges(n, [&](size_t begin, size_t end) { kernel(c, a, begin, end); });
}

void ParallelAccumulate(KernelIsa isa, bool first, const AccumulateArrays& a,
                        size_t n) {
  const auto kernel = GetFusedKernelTable(isa).accumulate;
  ForRanges(n, [&](size_t begin, size_t end) { kernel(first, a, begin, end); });
}

}  // namespace optim_internal
}  // namespace chunkzero
