// The fused causal attention as nvcc compiles it
// (models/gpt2/internal/cuda_fused_attention.cu): plain functions over
// device pointers that enqueue on `stream` (a cudaStream_t; null: the
// legacy default stream) and return the
// launch's cudaError_t (0: success), or kNoCuda (cuda_gpt_kernels_nvcc.h)
// without --config=cuda. Documented, and wrapped in a Status, by
// models/gpt2/cuda_gpt_layers.h.
#ifndef CHUNKZERO_MODELS_GPT2_INTERNAL_CUDA_FUSED_ATTENTION_H_
#define CHUNKZERO_MODELS_GPT2_INTERNAL_CUDA_FUSED_ATTENTION_H_

namespace chunkzero {
namespace cuda_gpt_internal {

// The largest head size the kernels take (a thread keeps a row of it).
inline constexpr int kMaxFusedHeadDim = 128;

int FusedAttentionForward(float* out, float* lse, const float* qkv, int B,
                          int T, int C, int NH, bool bf16, void* stream);
int FusedAttentionBackward(float* dqkv, float* delta, const float* dout,
                           const float* qkv, const float* out, const float* lse,
                           int B, int T, int C, int NH, bool bf16,
                           void* stream);

}  // namespace cuda_gpt_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_MODELS_GPT2_INTERNAL_CUDA_FUSED_ATTENTION_H_
