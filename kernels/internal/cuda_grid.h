// The launch shapes the models' CUDA layers share, for .cu files only (it
// is CUDA C++): element-wise kernels take one element per thread in a
// grid-stride loop, row kernels one warp per row, and warps reduce by
// butterfly shuffles (every lane ends with the same value, in the same
// order on every run).
//
//   CZ_GRID_STRIDE(i, n) { out[i] = 2 * x[i]; }
//   Kernel<<<cuda_grid::Blocks(n), cuda_grid::kThreads, 0, stream>>>(...);
//   return cuda_grid::Launched();
#ifndef CHUNKZERO_KERNELS_INTERNAL_CUDA_GRID_H_
#define CHUNKZERO_KERNELS_INTERNAL_CUDA_GRID_H_

#include <cuda_runtime.h>

#include <cstddef>

namespace chunkzero {
namespace cuda_grid {

inline constexpr int kThreads = 256;
inline constexpr int kWarp = 32;
inline constexpr int kWarpsPerBlock = kThreads / kWarp;

// Enough blocks to fill the GPU; grid-stride loops cover the rest.
inline unsigned Blocks(size_t n) {
  const size_t wanted = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(wanted < 65535 * 8 ? wanted : 65535 * 8);
}

// Blocks for one warp per row.
inline unsigned WarpBlocks(size_t rows) {
  const size_t wanted = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return static_cast<unsigned>(wanted < 65535 * 8 ? wanted : 65535 * 8);
}

// The launch's cudaError_t (0: success).
inline int Launched() { return static_cast<int>(cudaGetLastError()); }

__device__ inline float WarpSum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

__device__ inline float WarpMax(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const float o = __shfl_xor_sync(0xffffffffu, v, offset);
    v = o > v ? o : v;
  }
  return v;
}

}  // namespace cuda_grid
}  // namespace chunkzero

// `i` runs over this thread's elements of [0, n).
#define CZ_GRID_STRIDE(i, n)                                                  \
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; \
       i < (n); i += static_cast<size_t>(blockDim.x) * gridDim.x)

// One warp per row: `row` runs over this warp's rows of [0, rows).
#define CZ_WARP_ROWS(row, rows)                                  \
  for (size_t row = static_cast<size_t>(blockIdx.x) *            \
                        ::chunkzero::cuda_grid::kWarpsPerBlock + \
                    threadIdx.x / ::chunkzero::cuda_grid::kWarp; \
       row < static_cast<size_t>(rows);                          \
       row += static_cast<size_t>(gridDim.x) *                   \
              ::chunkzero::cuda_grid::kWarpsPerBlock)

#endif  // CHUNKZERO_KERNELS_INTERNAL_CUDA_GRID_H_
