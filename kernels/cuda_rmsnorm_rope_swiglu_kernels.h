// RMSNorm, rotary embedding, SwiGLU and the grouped-query expansion on a
// GPU: the CUDA counterparts of
// kernels/cpu_rmsnorm_rope_swiglu_kernels.h (same arguments and layouts; see
// there for what each computes), on device memory of the current GPU. The
// products, the attention and the loss are (kernels/cuda_layers.h).
//
//   CZ_RETURN_IF_ERROR(cuda_kernels::RmsNormForward(xn, rstd, x, w, N,
//                                                         C, eps));
//
// Every call enqueues its kernels on `stream` (the compute stream,
// kComputeStream, unless given) and returns without waiting; a kernel's own
// failure shows at the next call that synchronises. The results match the
// CPU layers to rounding: the per-element math is the CPU's
// (kernels/internal/rmsnorm_rope_swiglu_math.h) and every sum runs in a fixed
// order, so results repeat bit for bit from run to run; the embedding's grad
// adds the rows in the CPU's order (its bits). The rotary tables are computed
// on the host (cpu_kernels::RopeTables) and copied in.
//
// Differences from the CPU layers: a token outside [0, V) gives a NaN row
// in the embedding (and adds nothing to its grad) instead of being a
// precondition, as the GPU cannot stop to report it.
//
// Errors: Internal naming the layer and CUDA's error when a launch fails;
// Unimplemented without --config=cuda.
#ifndef CHUNKZERO_KERNELS_CUDA_RMSNORM_ROPE_SWIGLU_KERNELS_H_
#define CHUNKZERO_KERNELS_CUDA_RMSNORM_ROPE_SWIGLU_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "tensor/cuda/cuda_handles.h"

namespace chunkzero {
namespace cuda_kernels {

[[nodiscard]] absl::Status TokenEmbeddingForward(
    float* out, const int32_t* tokens, const float* wte, int N, int C, int V,
    CudaStream stream = kComputeStream);
[[nodiscard]] absl::Status TokenEmbeddingBackward(
    float* dwte, const float* dout, const int32_t* tokens, int N, int C, int V,
    CudaStream stream = kComputeStream);
[[nodiscard]] absl::Status RmsNormForward(float* out, float* rstd,
                                          const float* x, const float* w, int N,
                                          int C, float eps,
                                          CudaStream stream = kComputeStream);
[[nodiscard]] absl::Status RmsNormBackward(float* dx, float* dw,
                                           const float* dout, const float* x,
                                           const float* w, const float* rstd,
                                           int N, int C,
                                           CudaStream stream = kComputeStream);
[[nodiscard]] absl::Status RopeForward(float* x, const float* cos,
                                       const float* sin, int N, int T,
                                       int heads, int head_dim,
                                       CudaStream stream = kComputeStream);
[[nodiscard]] absl::Status RopeBackward(float* dx, const float* cos,
                                        const float* sin, int N, int T,
                                        int heads, int head_dim,
                                        CudaStream stream = kComputeStream);
[[nodiscard]] absl::Status SwiGluForward(float* h, const float* gate,
                                         const float* up, size_t n,
                                         CudaStream stream = kComputeStream);
[[nodiscard]] absl::Status SwiGluBackward(float* dgate, float* dup,
                                          const float* dh, const float* gate,
                                          const float* up, size_t n,
                                          CudaStream stream = kComputeStream);
[[nodiscard]] absl::Status ExpandQkv(float* qkv, const float* q, const float* k,
                                     const float* v, int N, int NH, int KV,
                                     int head_dim,
                                     CudaStream stream = kComputeStream);
[[nodiscard]] absl::Status ReduceQkvGrad(float* dq, float* dk, float* dv,
                                         const float* dqkv, int N, int NH,
                                         int KV, int head_dim,
                                         CudaStream stream = kComputeStream);

}  // namespace cuda_kernels
}  // namespace chunkzero

#endif  // CHUNKZERO_KERNELS_CUDA_RMSNORM_ROPE_SWIGLU_KERNELS_H_
