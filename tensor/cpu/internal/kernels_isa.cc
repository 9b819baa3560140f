#include "tensor/cpu/internal/kernels_isa.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/parallel_for.h"
#include "base/status_macros.h"
#include "tensor/cpu/internal/kernel_table.h"

namespace chunkzero {
namespace kernels_internal {
namespace {

// Parallel ranges start at multiples of this many elements, so that a range
// of an aligned array starts on a cache line.
constexpr size_t kTile = 1024;
// HasInfOrNan looks at the shared "found" flag this often.
constexpr size_t kInfNanCheckElements = 16384;
// SumOfSquares keeps this many block sums on the stack at a time.
constexpr size_t kSumBatchBlocks = 1024;

std::atomic<size_t> g_streaming_threshold{kDefaultStreamingThresholdBytes};

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

template <typename Out, typename In>
void RunCast(void (*kernel)(Out*, const In*, size_t, bool), Out* out,
             const In* in, size_t n) {
  const bool stream = n * sizeof(Out) >= StreamingThresholdBytes();
  ForRanges(n, [&](size_t begin, size_t end) {
    kernel(out + begin, in + begin, end - begin, stream);
  });
}

// 16-bit to 16-bit through an exact f32 intermediate, in stack-sized pieces.
void RunCastVia32(void (*widen)(float*, const uint16_t*, size_t, bool),
                  void (*narrow)(uint16_t*, const float*, size_t, bool),
                  uint16_t* out, const uint16_t* in, size_t n) {
  ForRanges(n, [&](size_t begin, size_t end) {
    float buffer[kTile];
    for (size_t i = begin; i < end; i += kTile) {
      const size_t len = std::min(kTile, end - i);
      widen(buffer, in + i, len, false);
      narrow(out + i, buffer, len, false);
    }
  });
}

template <typename T>
void RunScale(void (*kernel)(T*, float, size_t), T* x, float a, size_t n) {
  ForRanges(
      n, [&](size_t begin, size_t end) { kernel(x + begin, a, end - begin); });
}

template <typename T>
void RunAxpy(void (*kernel)(T*, float, const T*, size_t), T* y, float a,
             const T* x, size_t n) {
  ForRanges(n, [&](size_t begin, size_t end) {
    kernel(y + begin, a, x + begin, end - begin);
  });
}

template <typename T>
bool RunHasInfOrNan(bool (*kernel)(const T*, size_t), const T* x, size_t n) {
  if (n < kParallelMinElements) return kernel(x, n);
  std::atomic<bool> found{false};
  ForRanges(n, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; i += kInfNanCheckElements) {
      if (found.load(std::memory_order_relaxed)) return;
      if (kernel(x + i, std::min(kInfNanCheckElements, end - i))) {
        found.store(true, std::memory_order_relaxed);
        return;
      }
    }
  });
  return found.load(std::memory_order_relaxed);
}

// Block sums (see kSumBlock in kernel_table.h) are added in block order to a
// total that starts at 0.0. Threads compute disjoint sets of whole blocks,
// so neither the blocks nor the order depend on the thread count.
template <typename T>
double RunSumOfSquares(double (*block_sum)(const T*, size_t), const T* x,
                       size_t n) {
  // block_sums[b] for blocks [first_block, first_block + count).
  auto sum_blocks = [&](double* block_sums, size_t first_block, size_t count) {
    for (size_t b = 0; b < count; ++b) {
      const size_t begin = (first_block + b) * kSumBlock;
      block_sums[b] = block_sum(x + begin, std::min(kSumBlock, n - begin));
    }
  };
  double block_sums[kSumBatchBlocks];
  double total = 0.0;
  const size_t num_blocks = (n + kSumBlock - 1) / kSumBlock;
  for (size_t first = 0; first < num_blocks; first += kSumBatchBlocks) {
    const size_t count = std::min(kSumBatchBlocks, num_blocks - first);
    if (count * kSumBlock < kParallelMinElements) {
      sum_blocks(block_sums, first, count);
    } else {
      ParallelFor(count, kParallelGrainElements / kSumBlock,
                  [&](size_t begin, size_t end) {
                    sum_blocks(block_sums + begin, first + begin, end - begin);
                  });
    }
    for (size_t b = 0; b < count; ++b) total += block_sums[b];
  }
  return total;
}

}  // namespace

absl::Status CheckKernelArgs(absl::string_view op,
                             std::initializer_list<DType> dtypes, size_t n,
                             std::initializer_list<const void*> buffers) {
  for (DType dtype : dtypes) {
    CZ_RETURN_IF_ERROR(CheckComputeDType(dtype, op));
  }
  for (const void* buffer : buffers) {
    if (n > 0 && buffer == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": null buffer for ", n, " elements"));
    }
  }
  return absl::OkStatus();
}

void Copy(void* out, const void* in, size_t bytes) {
  if (bytes < kParallelMinCopyBytes) {
    if (bytes > 0) std::memcpy(out, in, bytes);
    return;
  }
  constexpr size_t kPage = 4096;
  const size_t pages = (bytes + kPage - 1) / kPage;
  ParallelFor(pages, kParallelGrainCopyBytes / kPage,
              [&](size_t page_begin, size_t page_end) {
                const size_t begin = page_begin * kPage;
                const size_t end = std::min(page_end * kPage, bytes);
                std::memcpy(static_cast<char*>(out) + begin,
                            static_cast<const char*>(in) + begin, end - begin);
              });
}

void SetStreamingThresholdForTesting(size_t bytes) {
  g_streaming_threshold.store(bytes, std::memory_order_relaxed);
}

size_t StreamingThresholdBytes() {
  return g_streaming_threshold.load(std::memory_order_relaxed);
}

void CastF32ToF16(KernelIsa isa, uint16_t* out, const float* in, size_t n) {
  RunCast(GetKernelTable(isa).cast_f32_to_f16, out, in, n);
}
void CastF16ToF32(KernelIsa isa, float* out, const uint16_t* in, size_t n) {
  RunCast(GetKernelTable(isa).cast_f16_to_f32, out, in, n);
}
void CastF32ToBF16(KernelIsa isa, uint16_t* out, const float* in, size_t n) {
  RunCast(GetKernelTable(isa).cast_f32_to_bf16, out, in, n);
}
void CastBF16ToF32(KernelIsa isa, float* out, const uint16_t* in, size_t n) {
  RunCast(GetKernelTable(isa).cast_bf16_to_f32, out, in, n);
}
void CastF16ToBF16(KernelIsa isa, uint16_t* out, const uint16_t* in, size_t n) {
  const KernelTable& table = GetKernelTable(isa);
  RunCastVia32(table.cast_f16_to_f32, table.cast_f32_to_bf16, out, in, n);
}
void CastBF16ToF16(KernelIsa isa, uint16_t* out, const uint16_t* in, size_t n) {
  const KernelTable& table = GetKernelTable(isa);
  RunCastVia32(table.cast_bf16_to_f32, table.cast_f32_to_f16, out, in, n);
}

void ScaleF32(KernelIsa isa, float* x, float a, size_t n) {
  RunScale(GetKernelTable(isa).scale_f32, x, a, n);
}
void ScaleF16(KernelIsa isa, uint16_t* x, float a, size_t n) {
  RunScale(GetKernelTable(isa).scale_f16, x, a, n);
}
void ScaleBF16(KernelIsa isa, uint16_t* x, float a, size_t n) {
  RunScale(GetKernelTable(isa).scale_bf16, x, a, n);
}
void AxpyF32(KernelIsa isa, float* y, float a, const float* x, size_t n) {
  RunAxpy(GetKernelTable(isa).axpy_f32, y, a, x, n);
}
void AxpyF16(KernelIsa isa, uint16_t* y, float a, const uint16_t* x, size_t n) {
  RunAxpy(GetKernelTable(isa).axpy_f16, y, a, x, n);
}
void AxpyBF16(KernelIsa isa, uint16_t* y, float a, const uint16_t* x,
              size_t n) {
  RunAxpy(GetKernelTable(isa).axpy_bf16, y, a, x, n);
}

bool HasInfOrNanF32(KernelIsa isa, const float* x, size_t n) {
  return RunHasInfOrNan(GetKernelTable(isa).has_inf_or_nan_f32, x, n);
}
bool HasInfOrNanF16(KernelIsa isa, const uint16_t* x, size_t n) {
  return RunHasInfOrNan(GetKernelTable(isa).has_inf_or_nan_f16, x, n);
}
bool HasInfOrNanBF16(KernelIsa isa, const uint16_t* x, size_t n) {
  return RunHasInfOrNan(GetKernelTable(isa).has_inf_or_nan_bf16, x, n);
}

double SumOfSquaresF32(KernelIsa isa, const float* x, size_t n) {
  return RunSumOfSquares(GetKernelTable(isa).block_sum_squares_f32, x, n);
}
double SumOfSquaresF16(KernelIsa isa, const uint16_t* x, size_t n) {
  return RunSumOfSquares(GetKernelTable(isa).block_sum_squares_f16, x, n);
}
double SumOfSquaresBF16(KernelIsa isa, const uint16_t* x, size_t n) {
  return RunSumOfSquares(GetKernelTable(isa).block_sum_squares_bf16, x, n);
}

}  // namespace kernels_internal
}  // namespace chunkzero
