// Reductions on the GPU in the CPU's order, so that the results are the
// same bits (tensor/elementwise_math.h defines the order).
//
// Each call enqueues its kernels and the copy of its results to pinned host
// memory on the caller's stream, into the caller's scratch, and returns at
// once: no allocation, no host wait (tensor/cuda/cuda_reductions.cc waits
// on an event, once per batch).
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

size_t NumBlocks(size_t n) { return (n + kSumBlock - 1) / kSumBlock; }

template <typename D>
int EnqueueFlag(const void* x, size_t n, int* device_flag,
                cudaStream_t stream) {
  FlagInfOrNan<D><<<GridFor(n), kThreads, 0, stream>>>(
      static_cast<const typename D::T*>(x), n, device_flag);
  return cudaGetLastError();
}

// The block sums of x into block_sums, then their total into *total.
template <typename D>
int EnqueueSum(const void* x, size_t n, double* block_sums, double* total,
               cudaStream_t stream) {
  const size_t num_blocks = NumBlocks(n);
  const size_t threads = num_blocks * kSumLanes;
  BlockSumsOfSquares<D>
      <<<static_cast<unsigned>((threads + kThreads - 1) / kThreads), kThreads,
         0, stream>>>(static_cast<const typename D::T*>(x), n, num_blocks,
                      block_sums);
  cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return error;
  AddInOrder<<<1, kFinalThreads, 0, stream>>>(block_sums, num_blocks, total);
  return cudaGetLastError();
}

}  // namespace

size_t ReductionScratchBytes(size_t largest_n, size_t count) {
  // count totals, then one input's block sums (the inputs run one after
  // another on one stream, so they reuse them); at least one int's room
  // for the overflow flag.
  return (count + NumBlocks(largest_n)) * sizeof(double) + sizeof(double);
}

int EnqueueSumsOfSquares(int dtype, const void* const* xs, const size_t* ns,
                         size_t count, void* device_scratch,
                         double* host_results, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  double* totals = static_cast<double*>(device_scratch);
  double* block_sums = totals + count;
  cudaError_t error = cudaMemsetAsync(totals, 0, count * sizeof(double), s);
  for (size_t i = 0; i < count && error == cudaSuccess; ++i) {
    if (ns[i] == 0) continue;  // Its total stays 0.
    switch (dtype) {
      case kReduceF32:
        error = static_cast<cudaError_t>(EnqueueSum<elementwise_math::F32>(
            xs[i], ns[i], block_sums, totals + i, s));
        break;
      case kReduceF16:
        error = static_cast<cudaError_t>(EnqueueSum<elementwise_math::F16>(
            xs[i], ns[i], block_sums, totals + i, s));
        break;
      default:
        error = static_cast<cudaError_t>(EnqueueSum<elementwise_math::BF16>(
            xs[i], ns[i], block_sums, totals + i, s));
        break;
    }
  }
  if (error == cudaSuccess) {
    error = cudaMemcpyAsync(host_results, totals, count * sizeof(double),
                            cudaMemcpyDeviceToHost, s);
  }
  if (error != cudaSuccess) cudaGetLastError();  // Not sticky: cleared.
  return error;
}

int EnqueueHasInfOrNan(int dtype, const void* x, size_t n, void* device_scratch,
                       int* host_flag, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  int* flag = static_cast<int*>(device_scratch);
  cudaError_t error = cudaMemsetAsync(flag, 0, sizeof(int), s);
  if (error == cudaSuccess && n > 0) {
    switch (dtype) {
      case kReduceF32:
        error = static_cast<cudaError_t>(
            EnqueueFlag<elementwise_math::F32>(x, n, flag, s));
        break;
      case kReduceF16:
        error = static_cast<cudaError_t>(
            EnqueueFlag<elementwise_math::F16>(x, n, flag, s));
        break;
      default:
        error = static_cast<cudaError_t>(
            EnqueueFlag<elementwise_math::BF16>(x, n, flag, s));
        break;
    }
  }
  if (error == cudaSuccess) {
    error = cudaMemcpyAsync(host_flag, flag, sizeof(int),
                            cudaMemcpyDeviceToHost, s);
  }
  if (error != cudaSuccess) cudaGetLastError();  // Not sticky: cleared.
  return error;
}

}  // namespace cuda_kernels
}  // namespace chunkzero
