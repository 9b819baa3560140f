// Opaque handles for CUDA streams and events (cudaStream_t, cudaEvent_t),
// so that code built without CUDA can hold, compare and pass them.
//
//   CudaStream compute = nullptr;   // CUDA's legacy default stream
//
// The CUDA build converts them with reinterpret_cast; nothing else looks
// inside. A null CudaStream is the legacy default stream.
#ifndef CHUNKZERO_TENSOR_CUDA_HANDLES_H_
#define CHUNKZERO_TENSOR_CUDA_HANDLES_H_

namespace chunkzero {

struct CudaStreamOpaque;
struct CudaEventOpaque;
using CudaStream = CudaStreamOpaque*;
using CudaEvent = CudaEventOpaque*;

}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_CUDA_HANDLES_H_
