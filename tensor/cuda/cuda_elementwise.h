// Element-wise kernels on the GPU, with the CPU kernels' results.
//
//   CZ_RETURN_IF_ERROR(CudaCast(dst16, DType::kBF16, src32, DType::kF32, n));
//
// Pointers are device memory (CudaMalloc). Each call enqueues its kernel on
// `stream` (the compute stream unless given) after the work already there
// and returns without waiting (docs/DESIGN.md, "Streams"): a launch error is
// returned, an error while the kernel runs shows at the stream's next
// synchronisation. Read the results on the host through an event or a copy
// on the same stream. Every kernel runs tensor/elementwise_math.h's per-element
// functions, the CPU kernels' definition, so the results equal
// tensor/cpu/cast_kernels.h's Cast and tensor/cpu/elementwise_kernels.h's Scale
// and Axpy bit for bit (NaN payloads aside where several operands are NaN).
// Built without
// --config=cuda every call is Unimplemented.
#ifndef CHUNKZERO_TENSOR_CUDA_CUDA_ELEMENTWISE_H_
#define CHUNKZERO_TENSOR_CUDA_CUDA_ELEMENTWISE_H_

#include <cstddef>

#include "absl/status/status.h"
#include "tensor/cuda/cuda_handles.h"
#include "tensor/dtype.h"

namespace chunkzero {

// InvalidArgument for a pair other than f32 <-> f16 / bf16 (or the same
// dtype, which copies); Internal naming the CUDA error if the kernel fails.
[[nodiscard]] absl::Status CudaCast(void* dst, DType dst_dtype, const void* src,
                                    DType src_dtype, size_t n,
                                    CudaStream stream = kComputeStream);

// dst[n] (f32, f16 or bf16) = src[n] * scale, multiplied in f32 and rounded
// once: tensor/cpu/cast_kernels.h's CastScaled. InvalidArgument for another
// dtype.
[[nodiscard]] absl::Status CudaCastScaled(void* dst, DType dst_dtype,
                                          const float* src, float scale,
                                          size_t n,
                                          CudaStream stream = kComputeStream);

// x[n] *= a, and y[n] += a * x[n] (one fused f32 rounding), for f32, f16
// and bf16. InvalidArgument for another dtype.
[[nodiscard]] absl::Status CudaScale(void* x, DType dtype, float a, size_t n,
                                     CudaStream stream = kComputeStream);
[[nodiscard]] absl::Status CudaAxpy(void* y, DType dtype, float a,
                                    const void* x, size_t n,
                                    CudaStream stream = kComputeStream);

}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_CUDA_CUDA_ELEMENTWISE_H_
