// The CUDA RMSNorm, rotary and SwiGLU kernels as nvcc compiles them
// (kernels/internal/cuda_rmsnorm_rope_swiglu_kernels_nvcc.cu): plain functions
// over device pointers, free of Abseil, each enqueuing its kernels on `stream`
// (a cudaStream_t) without waiting and returning the launch's cudaError_t
// (0: success), or kNoCuda without --config=cuda. Call them through
// kernels/cuda_rmsnorm_rope_swiglu_kernels.h, which documents them and turns
// the result into a Status.
#ifndef CHUNKZERO_KERNELS_INTERNAL_CUDA_RMSNORM_ROPE_SWIGLU_KERNELS_NVCC_H_
#define CHUNKZERO_KERNELS_INTERNAL_CUDA_RMSNORM_ROPE_SWIGLU_KERNELS_NVCC_H_

#include <cstddef>
#include <cstdint>

namespace chunkzero {
namespace cuda_kernels_internal {

// What every function returns in a build without --config=cuda (where
// cuda_rmsnorm_rope_swiglu_kernels_nvcc_stub.cc stands in): not a cudaError_t,
// and the same as cuda_kernels_nvcc.h's (cuda_kernels::LaunchStatus reads
// both).
inline constexpr int kNoCuda = -1;

int TokenEmbeddingForward(float* out, const int32_t* tokens, const float* wte,
                          int N, int C, int V, void* stream);
int TokenEmbeddingBackward(float* dwte, const float* dout,
                           const int32_t* tokens, int N, int C, int V,
                           void* stream);
int RmsNormForward(float* out, float* rstd, const float* x, const float* w,
                   int N, int C, float eps, void* stream);
int RmsNormBackward(float* dx, float* dw, const float* dout, const float* x,
                    const float* w, const float* rstd, int N, int C,
                    void* stream);
int Rope(float* x, const float* cos, const float* sin, int N, int T, int heads,
         int head_dim, float sign, void* stream);
int SwiGluForward(float* h, const float* gate, const float* up, size_t n,
                  void* stream);
int SwiGluBackward(float* dgate, float* dup, const float* dh, const float* gate,
                   const float* up, size_t n, void* stream);
int ExpandQkv(float* qkv, const float* q, const float* k, const float* v, int N,
              int NH, int KV, int head_dim, void* stream);
int ReduceQkvGrad(float* dq, float* dk, float* dv, const float* dqkv, int N,
                  int NH, int KV, int head_dim, void* stream);

}  // namespace cuda_kernels_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_KERNELS_INTERNAL_CUDA_RMSNORM_ROPE_SWIGLU_KERNELS_NVCC_H_
