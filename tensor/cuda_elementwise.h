// Element-wise kernels on the GPU, with the CPU kernels' results.
//
//   CZ_RETURN_IF_ERROR(CudaCast(dst16, DType::kBF16, src32, DType::kF32, n));
//
// Pointers are device memory (CudaMalloc); each call waits for its kernel.
// Casts between f32 and f16 / bf16 run tensor/half.h's conversions, so they
// equal tensor/cast_kernels.h's Cast bit for bit. Built without
// --config=cuda every call is Unimplemented.
#ifndef CHUNKZERO_TENSOR_CUDA_ELEMENTWISE_H_
#define CHUNKZERO_TENSOR_CUDA_ELEMENTWISE_H_

#include <cstddef>

#include "absl/status/status.h"
#include "tensor/dtype.h"

namespace chunkzero {

// InvalidArgument for a pair other than f32 <-> f16 / bf16 (or the same
// dtype, which copies); Internal naming the CUDA error if the kernel fails.
[[nodiscard]] absl::Status CudaCast(void* dst, DType dst_dtype, const void* src,
                                    DType src_dtype, size_t n);

}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_CUDA_ELEMENTWISE_H_
