// RMSNorm, rotary embedding and SwiGLU on the GPU. Element-wise layers (SwiGLU,
// the rotary embedding, the heads' expansion) take one element per thread in a
// grid-stride loop; RMSNorm one warp per row. Sums over rows (RMSNorm's
// weight grad) take a block per 32 columns: warp w adds rows w, w + 8, ...
// in order, then the 8 partial sums are added in warp order, the same bits
// on every run. The embedding's grad gives each column one thread adding
// the rows in order (tokens repeat, so rows cannot be split without
// atomics): the CPU's order and bits. The per-element math is
// kernels/internal/rmsnorm_rope_swiglu_math.h, the CPU's.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/internal/cuda_grid.h"
#include "kernels/internal/cuda_rmsnorm_rope_swiglu_kernels_nvcc.h"
#include "kernels/internal/rmsnorm_rope_swiglu_math.h"

namespace chunkzero {
namespace cuda_kernels_internal {
namespace {

using cuda_grid::Blocks;
using cuda_grid::kThreads;
using cuda_grid::kWarp;
using cuda_grid::Launched;
using cuda_grid::WarpBlocks;
using cuda_grid::WarpSum;
constexpr int kColumnWarps = 8;

cudaStream_t Stream(void* stream) { return static_cast<cudaStream_t>(stream); }

// ---- Embedding ----

__global__ void EmbeddingForwardKernel(float* out, const int32_t* tokens,
                                       const float* wte, size_t total, int C,
                                       int V) {
  CZ_GRID_STRIDE(i, total) {
    const size_t n = i / C, c = i % C;
    const int32_t token = tokens[n];
    // A token outside the vocabulary reads nothing: NaN makes it visible.
    out[i] =
        token < 0 || token >= V ? NAN : wte[static_cast<size_t>(token) * C + c];
  }
}

__global__ void ZeroKernel(float* x, size_t n) {
  CZ_GRID_STRIDE(i, n) { x[i] = 0.0f; }
}

__global__ void EmbeddingBackwardKernel(float* dwte, const float* dout,
                                        const int32_t* tokens, int N, int C,
                                        int V) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int n = 0; n < N; ++n) {
    const int32_t token = tokens[n];
    if (token >= 0 && token < V) {
      dwte[static_cast<size_t>(token) * C + c] +=
          dout[static_cast<size_t>(n) * C + c];
    }
  }
}

// ---- RMSNorm ----

__global__ void RmsNormForwardKernel(float* out, float* rstd, const float* x,
                                     const float* w, int N, int C, float eps) {
  const int lane = threadIdx.x % kWarp;
  CZ_WARP_ROWS(n, N) {
    const float* xr = x + n * C;
    float sum = 0;
    for (int c = lane; c < C; c += kWarp) sum += xr[c] * xr[c];
    const float r = layer_math::RmsScale(WarpSum(sum), C, eps);
    float* o = out + n * C;
    for (int c = lane; c < C; c += kWarp) o[c] = w[c] * (xr[c] * r);
    if (lane == 0) rstd[n] = r;
  }
}

__global__ void RmsNormInputGradKernel(float* dx, const float* dout,
                                       const float* x, const float* w,
                                       const float* rstd, int N, int C) {
  const int lane = threadIdx.x % kWarp;
  CZ_WARP_ROWS(n, N) {
    const float* xr = x + n * C;
    const float* g = dout + n * C;
    float sum = 0;
    for (int c = lane; c < C; c += kWarp) sum += g[c] * w[c] * xr[c];
    const float r = rstd[n];
    const float k = r * r * WarpSum(sum) / C;
    float* d = dx + n * C;
    for (int c = lane; c < C; c += kWarp) {
      d[c] += layer_math::RmsNormInputGrad(r, k, w[c], g[c], xr[c]);
    }
  }
}

// dw[c] = sum over rows of dout * (x * rstd).
__global__ void RmsNormWeightGradKernel(float* dw, const float* dout,
                                        const float* x, const float* rstd,
                                        int N, int C) {
  __shared__ float shared[kColumnWarps][kWarp + 1];
  const int c = blockIdx.x * kWarp + threadIdx.x;
  float sum = 0;
  if (c < C) {
    for (int n = threadIdx.y; n < N; n += kColumnWarps) {
      const size_t i = static_cast<size_t>(n) * C + c;
      sum += dout[i] * (x[i] * rstd[n]);
    }
  }
  shared[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float total = 0;
    for (int w = 0; w < kColumnWarps; ++w) total += shared[w][threadIdx.x];
    dw[c] = total;
  }
}

// ---- Element-wise ----

// One thread per pair (row n, head h, i < hd / 2).
__global__ void RopeKernel(float* x, const float* cos, const float* sin,
                           size_t pairs, int T, int heads, int half,
                           float sign) {
  CZ_GRID_STRIDE(p, pairs) {
    const size_t i = p % half, head = p / half;  // head over N * heads.
    const size_t n = head / heads, t = n % T;
    float* xh = x + head * 2 * half;
    layer_math::Rotate(cos[t * half + i], sign * sin[t * half + i], &xh[i],
                       &xh[i + half]);
  }
}

__global__ void SwiGluForwardKernel(float* h, const float* gate,
                                    const float* up, size_t n) {
  CZ_GRID_STRIDE(i, n) { h[i] = layer_math::SwiGlu(gate[i], up[i]); }
}

__global__ void SwiGluBackwardKernel(float* dgate, float* dup, const float* dh,
                                     const float* gate, const float* up,
                                     size_t n) {
  CZ_GRID_STRIDE(i, n) {
    float dg, du;
    layer_math::SwiGluGrad(dh[i], gate[i], up[i], &dg, &du);
    dgate[i] = dg;
    dup[i] = du;
  }
}

// qkv[n, part, h, i] from q, or k and v's head h / group.
__global__ void ExpandQkvKernel(float* qkv, const float* q, const float* k,
                                const float* v, size_t total, int NH, int KV,
                                int hd) {
  const size_t qc = static_cast<size_t>(NH) * hd,
               kc = static_cast<size_t>(KV) * hd;
  const int group = NH / KV;
  CZ_GRID_STRIDE(j, total) {
    const size_t n = j / (3 * qc), in_row = j % (3 * qc);
    const size_t part = in_row / qc, at = in_row % qc;
    const size_t h = at / hd, i = at % hd;
    const size_t from = n * kc + (h / group) * hd + i;
    qkv[j] = part == 0 ? q[n * qc + at] : part == 1 ? k[from] : v[from];
  }
}

// dq a copy; dk, dv[n, kv, i] the sum over the group's query heads in
// head order (the CPU's).
__global__ void ReduceQkvGradKernel(float* dq, float* dk, float* dv,
                                    const float* dqkv, int N, int NH, int KV,
                                    int hd) {
  const size_t qc = static_cast<size_t>(NH) * hd,
               kc = static_cast<size_t>(KV) * hd;
  const int group = NH / KV;
  CZ_GRID_STRIDE(j, static_cast<size_t>(N) * (qc + kc)) {
    const size_t n = j / (qc + kc), at = j % (qc + kc);
    const float* in = dqkv + n * 3 * qc;
    if (at < qc) {
      dq[n * qc + at] = in[at];
      continue;
    }
    const size_t kv = (at - qc) / hd, i = (at - qc) % hd;
    const size_t first = kv * group * hd + i;
    float k = in[qc + first], v = in[2 * qc + first];
    for (int r = 1; r < group; ++r) {
      k += in[qc + first + r * hd];
      v += in[2 * qc + first + r * hd];
    }
    dk[n * kc + kv * hd + i] = k;
    dv[n * kc + kv * hd + i] = v;
  }
}

}  // namespace

int TokenEmbeddingForward(float* out, const int32_t* tokens, const float* wte,
                          int N, int C, int V, void* stream) {
  const size_t total = static_cast<size_t>(N) * C;
  if (total == 0) return cudaSuccess;
  EmbeddingForwardKernel<<<Blocks(total), kThreads, 0, Stream(stream)>>>(
      out, tokens, wte, total, C, V);
  return Launched();
}

int TokenEmbeddingBackward(float* dwte, const float* dout,
                           const int32_t* tokens, int N, int C, int V,
                           void* stream) {
  const size_t table = static_cast<size_t>(V) * C;
  if (table == 0) return cudaSuccess;
  ZeroKernel<<<Blocks(table), kThreads, 0, Stream(stream)>>>(dwte, table);
  if (const int e = Launched(); e != cudaSuccess) return e;
  EmbeddingBackwardKernel<<<(C + kThreads - 1) / kThreads, kThreads, 0,
                            Stream(stream)>>>(dwte, dout, tokens, N, C, V);
  return Launched();
}

int RmsNormForward(float* out, float* rstd, const float* x, const float* w,
                   int N, int C, float eps, void* stream) {
  if (N == 0) return cudaSuccess;
  RmsNormForwardKernel<<<WarpBlocks(N), kThreads, 0, Stream(stream)>>>(
      out, rstd, x, w, N, C, eps);
  return Launched();
}

int RmsNormBackward(float* dx, float* dw, const float* dout, const float* x,
                    const float* w, const float* rstd, int N, int C,
                    void* stream) {
  if (C == 0) return cudaSuccess;
  if (N > 0) {
    RmsNormInputGradKernel<<<WarpBlocks(N), kThreads, 0, Stream(stream)>>>(
        dx, dout, x, w, rstd, N, C);
    if (const int e = Launched(); e != cudaSuccess) return e;
  }
  RmsNormWeightGradKernel<<<(C + kWarp - 1) / kWarp, dim3(kWarp, kColumnWarps),
                            0, Stream(stream)>>>(dw, dout, x, rstd, N, C);
  return Launched();
}

int Rope(float* x, const float* cos, const float* sin, int N, int T, int heads,
         int head_dim, float sign, void* stream) {
  const int half = head_dim / 2;
  const size_t pairs = static_cast<size_t>(N) * heads * half;
  if (pairs == 0) return cudaSuccess;
  RopeKernel<<<Blocks(pairs), kThreads, 0, Stream(stream)>>>(
      x, cos, sin, pairs, T, heads, half, sign);
  return Launched();
}

int SwiGluForward(float* h, const float* gate, const float* up, size_t n,
                  void* stream) {
  if (n == 0) return cudaSuccess;
  SwiGluForwardKernel<<<Blocks(n), kThreads, 0, Stream(stream)>>>(h, gate, up,
                                                                  n);
  return Launched();
}

int SwiGluBackward(float* dgate, float* dup, const float* dh, const float* gate,
                   const float* up, size_t n, void* stream) {
  if (n == 0) return cudaSuccess;
  SwiGluBackwardKernel<<<Blocks(n), kThreads, 0, Stream(stream)>>>(
      dgate, dup, dh, gate, up, n);
  return Launched();
}

int ExpandQkv(float* qkv, const float* q, const float* k, const float* v, int N,
              int NH, int KV, int head_dim, void* stream) {
  const size_t total = static_cast<size_t>(N) * 3 * NH * head_dim;
  if (total == 0) return cudaSuccess;
  ExpandQkvKernel<<<Blocks(total), kThreads, 0, Stream(stream)>>>(
      qkv, q, k, v, total, NH, KV, head_dim);
  return Launched();
}

int ReduceQkvGrad(float* dq, float* dk, float* dv, const float* dqkv, int N,
                  int NH, int KV, int head_dim, void* stream) {
  const size_t total = static_cast<size_t>(N) * (NH + KV) * head_dim;
  if (total == 0) return cudaSuccess;
  ReduceQkvGradKernel<<<Blocks(total), kThreads, 0, Stream(stream)>>>(
      dq, dk, dv, dqkv, N, NH, KV, head_dim);
  return Launched();
}

}  // namespace cuda_kernels_internal
}  // namespace chunkzero
