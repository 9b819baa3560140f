// The fused causal attention as nvcc compiles it
// (kernels/internal/cuda_fused_attention.cu): plain functions over
// device pointers that enqueue on `stream` (a cudaStream_t; null: the
// legacy default stream) and return the
// launch's cudaError_t (0: success), or kNoCuda (cuda_kernels_nvcc.h)
// without --config=cuda. Documented, and wrapped in a Status, by
// kernels/cuda_layers.h.
#ifndef CHUNKZERO_KERNELS_INTERNAL_CUDA_FUSED_ATTENTION_H_
#define CHUNKZERO_KERNELS_INTERNAL_CUDA_FUSED_ATTENTION_H_

namespace chunkzero {
namespace cuda_kernels_internal {

// The largest head size the kernels take (a thread keeps a row of it).
inline constexpr int kMaxFusedHeadDim = 128;

int FusedAttentionForward(float* out, float* lse, const float* qkv, int B,
                          int T, int C, int NH, bool bf16, void* stream);
int FusedAttentionBackward(float* dqkv, float* delta, const float* dout,
                           const float* qkv, const float* out, const float* lse,
                           int B, int T, int C, int NH, bool bf16,
                           void* stream);

}  // namespace cuda_kernels_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_KERNELS_INTERNAL_CUDA_FUSED_ATTENTION_H_
