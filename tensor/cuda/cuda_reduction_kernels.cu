// Reductions on the GPU in the CPU's order, so that the results are the
// same bits (tensor/elementwise_math.h defines the order).
//
// SumOfSquares: 16 consecutive threads own one block of kSumBlock elements,
// thread `lane` summing the squares of elements lane, lane + 16, ... in
// increasing order (the CPU's lane k % 16), so a half-warp reads 16
// consecutive elements at a time. The lanes combine by shuffles in the
// CPU's tree; block sums go to a device array that one thread adds up in
// block order, from shared memory.
#include <cuda_runtime.h>

#include "tensor/cuda/cuda_reduction_kernels.h"
#include "tensor/elementwise_math.h"

namespace chunkzero {
namespace cuda_kernels {
namespace {

using elementwise_math::kSumBlock;
using elementwise_math::kSumLanes;

constexpr int kThreads = 256;
constexpr int kFinalThreads = 1024;

template <typename D>
__global__ void FlagInfOrNan(const typename D::T* x, size_t n, int* flag) {
  const size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    if (D::IsInfOrNan(x[i])) {
      *flag = 1;  // Every writer writes 1: the race is benign.
      return;
    }
  }
}

template <typename D>
__global__ void BlockSumsOfSquares(const typename D::T* x, size_t n,
                                   size_t num_blocks, double* block_sums) {
  const size_t thread =
      static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t block = thread / kSumLanes;
  if (block >= num_blocks) return;  // All 16 threads of a group return.
  const unsigned lane = static_cast<unsigned>(thread % kSumLanes);
  const size_t begin = block * kSumBlock;
  const size_t len = n - begin < kSumBlock ? n - begin : kSumBlock;
  double sum = 0.0;
  for (size_t k = lane; k < len; k += kSumLanes) {
    const double v = D::Load(x[begin + k]);
    sum += v * v;  // v * v is exact in double; -fmad=false keeps it apart.
  }
  // The group's 16 threads, as a mask within the warp.
  const unsigned group_mask = 0xffffu << (threadIdx.x & 16u);
  for (unsigned width = kSumLanes / 2; width >= 1; width /= 2) {
    sum += __shfl_down_sync(group_mask, sum, width, kSumLanes);
  }
  if (lane == 0) block_sums[block] = sum;
}

// One block: total = ((0 + s[0]) + s[1]) + ..., as the CPU adds them.
__global__ void AddInOrder(const double* block_sums, size_t num_blocks,
                           double* total) {
  __shared__ double staged[kFinalThreads];
  double sum = 0.0;
  for (size_t base = 0; base < num_blocks; base += kFinalThreads) {
    const size_t i = base + threadIdx.x;
    staged[threadIdx.x] = i < num_blocks ? block_sums[i] : 0.0;
    __syncthreads();
    if (threadIdx.x == 0) {
      const size_t count =
          num_blocks - base < kFinalThreads ? num_blocks - base : kFinalThreads;
      for (size_t j = 0; j < count; ++j) sum += staged[j];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) *total = sum;
}

unsigned GridFor(size_t threads) {
  const size_t wanted = (threads + kThreads - 1) / kThreads;
  return static_cast<unsigned>(wanted < 65535 * 8 ? wanted : 65535 * 8);
}

template <typename D>
int HasInfOrNan(const typename D::T* x, size_t n, bool* result) {
  *result = false;
  if (n == 0) return cudaSuccess;
  int* flag = nullptr;
  cudaError_t error = cudaMallocAsync(&flag, sizeof(int), 0);
  if (error != cudaSuccess) return error;
  error = cudaMemsetAsync(flag, 0, sizeof(int), 0);
  if (error == cudaSuccess) {
    FlagInfOrNan<D><<<GridFor(n), kThreads>>>(x, n, flag);
    error = cudaGetLastError();
  }
  int host_flag = 0;
  if (error == cudaSuccess) {
    error = cudaMemcpy(&host_flag, flag, sizeof(int), cudaMemcpyDeviceToHost);
  }
  const cudaError_t freed = cudaFreeAsync(flag, 0);
  if (error == cudaSuccess) error = freed;
  *result = host_flag != 0;
  return error;
}

template <typename D>
int SumOfSquares(const typename D::T* x, size_t n, double* result) {
  *result = 0.0;
  if (n == 0) return cudaSuccess;
  const size_t num_blocks = (n + kSumBlock - 1) / kSumBlock;
  double* sums = nullptr;  // num_blocks block sums, then the total.
  cudaError_t error =
      cudaMallocAsync(&sums, (num_blocks + 1) * sizeof(double), 0);
  if (error != cudaSuccess) return error;
  const size_t threads = num_blocks * kSumLanes;
  BlockSumsOfSquares<D>
      <<<static_cast<unsigned>((threads + kThreads - 1) / kThreads),
         kThreads>>>(x, n, num_blocks, sums);
  error = cudaGetLastError();
  if (error == cudaSuccess) {
    AddInOrder<<<1, kFinalThreads>>>(sums, num_blocks, sums + num_blocks);
    error = cudaGetLastError();
  }
  if (error == cudaSuccess) {
    error = cudaMemcpy(result, sums + num_blocks, sizeof(double),
                       cudaMemcpyDeviceToHost);
  }
  const cudaError_t freed = cudaFreeAsync(sums, 0);
  return error == cudaSuccess ? freed : error;
}

}  // namespace

int HasInfOrNanF32(const float* x, size_t n, bool* result) {
  return HasInfOrNan<elementwise_math::F32>(x, n, result);
}
int HasInfOrNanF16(const uint16_t* x, size_t n, bool* result) {
  return HasInfOrNan<elementwise_math::F16>(x, n, result);
}
int HasInfOrNanBF16(const uint16_t* x, size_t n, bool* result) {
  return HasInfOrNan<elementwise_math::BF16>(x, n, result);
}
int SumOfSquaresF32(const float* x, size_t n, double* result) {
  return SumOfSquares<elementwise_math::F32>(x, n, result);
}
int SumOfSquaresF16(const uint16_t* x, size_t n, double* result) {
  return SumOfSquares<elementwise_math::F16>(x, n, result);
}
int SumOfSquaresBF16(const uint16_t* x, size_t n, double* result) {
  return SumOfSquares<elementwise_math::BF16>(x, n, result);
}

}  // namespace cuda_kernels
}  // namespace chunkzero
