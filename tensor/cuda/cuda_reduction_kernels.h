// The CUDA reductions, as nvcc compiles them
// (tensor/cuda/cuda_reduction_kernels.cu): plain functions over device
// pointers, free of Abseil. Each enqueues on the caller's stream and returns
// the cudaError_t (0: success) without waiting. Call them through
// tensor/cuda/cuda_reductions.h.
#ifndef CHUNKZERO_TENSOR_CUDA_CUDA_REDUCTION_KERNELS_H_
#define CHUNKZERO_TENSOR_CUDA_CUDA_REDUCTION_KERNELS_H_

#include <cstddef>
#include <cstdint>

namespace chunkzero {
namespace cuda_kernels {

// Element types, as ints so that this header needs nothing of tensor/.
inline constexpr int kReduceF32 = 0;
inline constexpr int kReduceF16 = 1;
inline constexpr int kReduceBF16 = 2;

// Bytes of device scratch a batch of `count` reductions needs whose largest
// input has `largest_n` elements (at least room for HasInfOrNan's flag).
size_t ReductionScratchBytes(size_t largest_n, size_t count);

// Enqueues on `stream` (a cudaStream_t; null: the legacy default stream)
// the sums of squares of xs[i] (ns[i] elements of `dtype`) in
// tensor/elementwise_math.h's order, the CPU's exactly, one after another
// in `device_scratch` (ReductionScratchBytes(max ns, count) bytes), then
// one copy of the `count` results to `host_results` (pinned host memory).
// Returns the first enqueue error; the results are there once the stream
// reaches this point (record an event after the call and wait on it).
int EnqueueSumsOfSquares(int dtype, const void* const* xs, const size_t* ns,
                         size_t count, void* device_scratch,
                         double* host_results, void* stream);
// The same for one input's Inf-or-NaN flag: *host_flag becomes nonzero iff
// an element of x is Inf or NaN.
int EnqueueHasInfOrNan(int dtype, const void* x, size_t n, void* device_scratch,
                       int* host_flag, void* stream);

}  // namespace cuda_kernels
}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_CUDA_CUDA_REDUCTION_KERNELS_H_
