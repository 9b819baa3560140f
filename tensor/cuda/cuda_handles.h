// Opaque handles for CUDA streams and events (cudaStream_t, cudaEvent_t),
// so that code built without CUDA can hold, compare and pass them.
//
//   CudaStream compute = nullptr;   // CUDA's legacy default stream
//
// The CUDA build converts them with reinterpret_cast; nothing else looks
// inside. A null CudaStream is the legacy default stream.
#ifndef CHUNKZERO_TENSOR_CUDA_CUDA_HANDLES_H_
#define CHUNKZERO_TENSOR_CUDA_CUDA_HANDLES_H_

namespace chunkzero {

struct CudaStreamOpaque;
struct CudaEventOpaque;
using CudaStream = CudaStreamOpaque*;
using CudaEvent = CudaEventOpaque*;

// The stream chunkzero computes on: the legacy default stream. Its kernels,
// cudaMemcpy and the GPU allocator's default pool are on it; the
// collectives' and the copiers' own streams are ordered against it with
// events (comm/nccl, tensor/memory/async_copier.h).
inline constexpr CudaStream kComputeStream = nullptr;

}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_CUDA_CUDA_HANDLES_H_
