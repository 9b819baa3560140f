#include "kernels/cuda_rmsnorm_rope_swiglu_kernels.h"

#include "kernels/cuda_kernels.h"
#include "kernels/internal/cuda_rmsnorm_rope_swiglu_kernels_nvcc.h"

namespace chunkzero {
namespace cuda_kernels {
namespace {

namespace internal = cuda_kernels_internal;
// The launches return what cuda_kernels' do: a cudaError_t, or -1 (kNoCuda in
// both) without CUDA.
using cuda_kernels::LaunchStatus;

}  // namespace

absl::Status TokenEmbeddingForward(float* out, const int32_t* tokens,
                                   const float* wte, int N, int C, int V,
                                   CudaStream stream) {
  return LaunchStatus(
      internal::TokenEmbeddingForward(out, tokens, wte, N, C, V, stream),
      "token embedding forward");
}

absl::Status TokenEmbeddingBackward(float* dwte, const float* dout,
                                    const int32_t* tokens, int N, int C, int V,
                                    CudaStream stream) {
  return LaunchStatus(
      internal::TokenEmbeddingBackward(dwte, dout, tokens, N, C, V, stream),
      "token embedding backward");
}

absl::Status RmsNormForward(float* out, float* rstd, const float* x,
                            const float* w, int N, int C, float eps,
                            CudaStream stream) {
  return LaunchStatus(
      internal::RmsNormForward(out, rstd, x, w, N, C, eps, stream),
      "RMSNorm forward");
}

absl::Status RmsNormBackward(float* dx, float* dw, const float* dout,
                             const float* x, const float* w, const float* rstd,
                             int N, int C, CudaStream stream) {
  return LaunchStatus(
      internal::RmsNormBackward(dx, dw, dout, x, w, rstd, N, C, stream),
      "RMSNorm backward");
}

absl::Status RopeForward(float* x, const float* cos, const float* sin, int N,
                         int T, int heads, int head_dim, CudaStream stream) {
  return LaunchStatus(
      internal::Rope(x, cos, sin, N, T, heads, head_dim, 1.0f, stream),
      "rotary embedding forward");
}

absl::Status RopeBackward(float* dx, const float* cos, const float* sin, int N,
                          int T, int heads, int head_dim, CudaStream stream) {
  return LaunchStatus(
      internal::Rope(dx, cos, sin, N, T, heads, head_dim, -1.0f, stream),
      "rotary embedding backward");
}

absl::Status SwiGluForward(float* h, const float* gate, const float* up,
                           size_t n, CudaStream stream) {
  return LaunchStatus(internal::SwiGluForward(h, gate, up, n, stream),
                      "SwiGLU forward");
}

absl::Status SwiGluBackward(float* dgate, float* dup, const float* dh,
                            const float* gate, const float* up, size_t n,
                            CudaStream stream) {
  return LaunchStatus(
      internal::SwiGluBackward(dgate, dup, dh, gate, up, n, stream),
      "SwiGLU backward");
}

absl::Status ExpandQkv(float* qkv, const float* q, const float* k,
                       const float* v, int N, int NH, int KV, int head_dim,
                       CudaStream stream) {
  return LaunchStatus(
      internal::ExpandQkv(qkv, q, k, v, N, NH, KV, head_dim, stream),
      "grouped-query expansion");
}

absl::Status ReduceQkvGrad(float* dq, float* dk, float* dv, const float* dqkv,
                           int N, int NH, int KV, int head_dim,
                           CudaStream stream) {
  return LaunchStatus(
      internal::ReduceQkvGrad(dq, dk, dv, dqkv, N, NH, KV, head_dim, stream),
      "grouped-query grad reduction");
}

}  // namespace cuda_kernels
}  // namespace chunkzero
