// The transformer kernels on the GPU. Element-wise layers take one element per
// thread in a grid-stride loop; row layers (LayerNorm, the causal softmax)
// one warp per row, the cross-entropy one block per row of the vocabulary.
// Sums over rows for weight and bias grads take a block per 32 columns:
// warp w adds rows w, w + 32, ... in order, then the 32 partial sums are
// added in warp order, the same bits on every run. The embedding grads give
// each column one thread adding the rows in order (tokens repeat, so rows
// cannot be split without atomics): the CPU's order and bits. The
// per-element math is kernels/internal/layer_math.h, the CPU's.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/internal/cuda_grid.h"
#include "kernels/internal/cuda_kernels_nvcc.h"
#include "kernels/internal/layer_math.h"
#include "tensor/half.h"

namespace chunkzero {
namespace cuda_kernels_internal {
namespace {

using cuda_grid::Blocks;
using cuda_grid::kThreads;
using cuda_grid::kWarp;
using cuda_grid::kWarpsPerBlock;
using cuda_grid::Launched;
using cuda_grid::WarpBlocks;
using cuda_grid::WarpMax;
using cuda_grid::WarpSum;

// ---- Embedding ----

__global__ void EmbeddingForwardKernel(float* out, const int32_t* tokens,
                                       const float* wte, const float* wpe,
                                       size_t total, int T, int C, int V) {
  CZ_GRID_STRIDE(i, total) {
    const size_t n = i / C, c = i % C;
    const int32_t token = tokens[n];
    // A token outside the vocabulary reads nothing: NaN makes it visible.
    out[i] = token < 0 || token >= V ? NAN
                                     : wte[static_cast<size_t>(token) * C + c] +
                                           wpe[(n % T) * C + c];
  }
}

// One thread per column, adding every row in order (tokens outside the
// vocabulary are skipped).
__global__ void EmbeddingBackwardKernel(float* dwte, float* dwpe,
                                        const float* dout,
                                        const int32_t* tokens, int N, int T,
                                        int C, int V) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int n = 0; n < N; ++n) {
    const float d = dout[static_cast<size_t>(n) * C + c];
    const int32_t token = tokens[n];
    if (token >= 0 && token < V) dwte[static_cast<size_t>(token) * C + c] += d;
    dwpe[static_cast<size_t>(n % T) * C + c] += d;
  }
}

// ---- LayerNorm ----

__global__ void LayerNormForwardKernel(float* out, float* mean, float* rstd,
                                       const float* x, const float* w,
                                       const float* b, int N, int C) {
  const int lane = threadIdx.x % kWarp;
  CZ_WARP_ROWS(n, N) {
    const float* xr = x + n * C;
    float sum = 0;
    for (int c = lane; c < C; c += kWarp) sum += xr[c];
    const float m = WarpSum(sum) / C;
    // Two passes (not E[x^2] - m^2), so large means do not cancel.
    float sq = 0;
    for (int c = lane; c < C; c += kWarp) {
      const float d = xr[c] - m;
      sq += d * d;
    }
    const float s = 1.0f / sqrtf(WarpSum(sq) / C + 1e-5f);
    float* o = out + n * C;
    for (int c = lane; c < C; c += kWarp) o[c] = (xr[c] - m) * s * w[c] + b[c];
    if (lane == 0) {
      mean[n] = m;
      rstd[n] = s;
    }
  }
}

__global__ void LayerNormBackwardRowsKernel(float* dx, const float* dout,
                                            const float* x, const float* w,
                                            const float* mean,
                                            const float* rstd, int N, int C) {
  const int lane = threadIdx.x % kWarp;
  CZ_WARP_ROWS(n, N) {
    const float* xr = x + n * C;
    const float* d = dout + n * C;
    const float m = mean[n], s = rstd[n];
    float dnorm_sum = 0, dnorm_norm_sum = 0;
    for (int c = lane; c < C; c += kWarp) {
      const float dnorm = d[c] * w[c];
      dnorm_sum += dnorm;
      dnorm_norm_sum += dnorm * ((xr[c] - m) * s);
    }
    const float dnorm_mean = WarpSum(dnorm_sum) / C;
    const float dnorm_norm_mean = WarpSum(dnorm_norm_sum) / C;
    float* dxr = dx + n * C;
    for (int c = lane; c < C; c += kWarp) {
      const float norm = (xr[c] - m) * s;
      dxr[c] += (d[c] * w[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
  }
}

// Column sums: blocks of kWarp columns x kColumnWarps warps (threadIdx.x
// the column's lane, threadIdx.y the warp).
constexpr int kColumnWarps = 32;

// Adds the block's partial sums of one column in warp order; the total for
// warp 0's lanes (others get garbage).
__device__ float SumOfWarps(float partial, float (*shared)[kWarp + 1]) {
  shared[threadIdx.y][threadIdx.x] = partial;
  __syncthreads();
  float total = 0;
  if (threadIdx.y == 0) {
    for (int w = 0; w < kColumnWarps; ++w) total += shared[w][threadIdx.x];
  }
  __syncthreads();
  return total;
}

// dw[c] = sum_n dout * norm, db[c] = sum_n dout.
__global__ void LayerNormParamGradKernel(float* dw, float* db,
                                         const float* dout, const float* x,
                                         const float* mean, const float* rstd,
                                         int N, int C) {
  __shared__ float shared[kColumnWarps][kWarp + 1];
  const int c = blockIdx.x * kWarp + threadIdx.x;
  float w_sum = 0, b_sum = 0;
  if (c < C) {
    for (int n = threadIdx.y; n < N; n += kColumnWarps) {
      const size_t i = static_cast<size_t>(n) * C + c;
      w_sum += dout[i] * ((x[i] - mean[n]) * rstd[n]);
      b_sum += dout[i];
    }
  }
  w_sum = SumOfWarps(w_sum, shared);
  b_sum = SumOfWarps(b_sum, shared);
  if (threadIdx.y == 0 && c < C) {
    dw[c] = w_sum;
    db[c] = b_sum;
  }
}

// ---- Rows and columns ----

__global__ void BroadcastRowsKernel(float* out, const float* bias, size_t total,
                                    int C) {
  CZ_GRID_STRIDE(i, total) { out[i] = bias[i % C]; }
}

__global__ void ColumnSumsKernel(float* out, const float* in, int N, int C) {
  __shared__ float shared[kColumnWarps][kWarp + 1];
  const int c = blockIdx.x * kWarp + threadIdx.x;
  float sum = 0;
  if (c < C) {
    for (int n = threadIdx.y; n < N; n += kColumnWarps) {
      sum += in[static_cast<size_t>(n) * C + c];
    }
  }
  sum = SumOfWarps(sum, shared);
  if (threadIdx.y == 0 && c < C) out[c] = sum;
}

dim3 ColumnBlocks(int C) { return dim3((C + kWarp - 1) / kWarp); }
dim3 ColumnThreads() { return dim3(kWarp, kColumnWarps); }

// ---- Element-wise ----

__global__ void GeluForwardKernel(float* out, const float* x, size_t n) {
  CZ_GRID_STRIDE(i, n) { out[i] = layer_math::Gelu(x[i]); }
}

__global__ void GeluBackwardKernel(float* dx, const float* x, const float* dout,
                                   size_t n) {
  CZ_GRID_STRIDE(i, n) { dx[i] = layer_math::GeluGrad(x[i], dout[i]); }
}

__global__ void AddKernel(float* out, const float* a, const float* b,
                          size_t n) {
  CZ_GRID_STRIDE(i, n) { out[i] = a[i] + b[i]; }
}

__global__ void RoundToBf16Kernel(uint16_t* out, const float* x, size_t n) {
  CZ_GRID_STRIDE(i, n) { out[i] = FloatToBFloat16Bits(x[i]); }
}

__global__ void WidenBf16Kernel(float* out, const uint16_t* x, size_t n) {
  CZ_GRID_STRIDE(i, n) { out[i] = BFloat16BitsToFloat(x[i]); }
}

__global__ void WidenF16Kernel(float* out, const uint16_t* x, size_t n) {
  CZ_GRID_STRIDE(i, n) { out[i] = HalfBitsToFloat(x[i]); }
}

// ---- Causal softmax (attention) ----

// Row r of att[rows, T] holds the scores of query position r % T.
__global__ void CausalSoftmaxKernel(float* att, size_t rows, int T) {
  const int lane = threadIdx.x % kWarp;
  CZ_WARP_ROWS(r, rows) {
    const int t = static_cast<int>(r % T);
    float* p = att + r * T;
    float m = -INFINITY;
    for (int s = lane; s <= t; s += kWarp) m = p[s] > m ? p[s] : m;
    m = WarpMax(m);
    float sum = 0;
    for (int s = lane; s <= t; s += kWarp) {
      p[s] = layer_math::Exp(p[s] - m);
      sum += p[s];
    }
    const float inv = 1.0f / WarpSum(sum);
    for (int s = lane; s < T; s += kWarp) p[s] = s <= t ? p[s] * inv : 0.0f;
  }
}

// datt rows (dP on entry) become dS = P * (dP - <P, dP>) * scale.
__global__ void CausalSoftmaxBackwardKernel(float* datt, const float* att,
                                            size_t rows, int T, float scale) {
  const int lane = threadIdx.x % kWarp;
  CZ_WARP_ROWS(r, rows) {
    const int t = static_cast<int>(r % T);
    const float* p = att + r * T;
    float* d = datt + r * T;
    float dot = 0;
    for (int s = lane; s <= t; s += kWarp) dot += p[s] * d[s];
    dot = WarpSum(dot);
    for (int s = lane; s < T; s += kWarp) {
      d[s] = s <= t ? p[s] * (d[s] - dot) * scale : 0.0f;
    }
  }
}

// ---- Cross-entropy over the vocabulary ----

// The block's threads combine `v` (sum or max); every thread gets the result.
template <bool kMax>
__device__ float BlockReduce(float v, float* shared) {
  v = kMax ? WarpMax(v) : WarpSum(v);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  __syncthreads();  // `shared` may still be read by an earlier reduction.
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float all = kMax ? -INFINITY : 0.0f;
  for (int i = 0; i < kWarpsPerBlock; ++i) {
    all = kMax ? (shared[i] > all ? shared[i] : all) : all + shared[i];
  }
  return all;
}

// One block per row: logits become probabilities in place (no second N x V
// buffer), and the row's loss -log p[target] = log(sum) + max - logit.
__global__ void CrossEntropyForwardKernel(float* logits, const int32_t* targets,
                                          int N, int V, double* losses) {
  __shared__ float shared[kWarpsPerBlock];
  for (int n = blockIdx.x; n < N; n += gridDim.x) {
    float* l = logits + static_cast<size_t>(n) * V;
    const int32_t target = targets[n];
    const bool valid = target >= 0 && target < V;
    const float target_logit = valid ? l[target] : NAN;
    float m = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x) m = l[v] > m ? l[v] : m;
    m = BlockReduce<true>(m, shared);
    float sum = 0;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
      l[v] = layer_math::Exp(l[v] - m);
      sum += l[v];
    }
    sum = BlockReduce<false>(sum, shared);
    const float inv = 1.0f / sum;
    for (int v = threadIdx.x; v < V; v += blockDim.x) l[v] *= inv;
    if (threadIdx.x == 0) {
      losses[n] = log(static_cast<double>(sum)) + m - target_logit;
    }
  }
}

__global__ void CrossEntropyBackwardKernel(float* probs, const int32_t* targets,
                                           float dloss, size_t total, int V) {
  CZ_GRID_STRIDE(i, total) {
    const float p = probs[i] * dloss;
    probs[i] = static_cast<int32_t>(i % V) == targets[i / V] ? p - dloss : p;
  }
}

}  // namespace

int EmbeddingForward(float* out, const int32_t* tokens, const float* wte,
                     const float* wpe, int N, int T, int C, int V,
                     void* stream) {
  const size_t total = static_cast<size_t>(N) * C;
  if (total == 0) return cudaSuccess;
  EmbeddingForwardKernel<<<Blocks(total), kThreads, 0,
                           static_cast<cudaStream_t>(stream)>>>(
      out, tokens, wte, wpe, total, T, C, V);
  return Launched();
}

int EmbeddingBackward(float* dwte, float* dwpe, const float* dout,
                      const int32_t* tokens, int N, int T, int C, int V, int P,
                      void* stream) {
  cudaError_t e =
      cudaMemsetAsync(dwte, 0, sizeof(float) * static_cast<size_t>(V) * C,
                      static_cast<cudaStream_t>(stream));
  if (e == cudaSuccess) {
    e = cudaMemsetAsync(dwpe, 0, sizeof(float) * static_cast<size_t>(P) * C,
                        static_cast<cudaStream_t>(stream));
  }
  if (e != cudaSuccess || C == 0) return e;
  EmbeddingBackwardKernel<<<(C + kThreads - 1) / kThreads, kThreads, 0,
                            static_cast<cudaStream_t>(stream)>>>(
      dwte, dwpe, dout, tokens, N, T, C, V);
  return Launched();
}

int LayerNormForward(float* out, float* mean, float* rstd, const float* x,
                     const float* w, const float* b, int N, int C,
                     void* stream) {
  if (N == 0) return cudaSuccess;
  LayerNormForwardKernel<<<WarpBlocks(N), kThreads, 0,
                           static_cast<cudaStream_t>(stream)>>>(out, mean, rstd,
                                                                x, w, b, N, C);
  return Launched();
}

int LayerNormBackward(float* dx, float* dw, float* db, const float* dout,
                      const float* x, const float* w, const float* mean,
                      const float* rstd, int N, int C, void* stream) {
  if (C == 0) return cudaSuccess;
  if (N > 0) {
    LayerNormBackwardRowsKernel<<<WarpBlocks(N), kThreads, 0,
                                  static_cast<cudaStream_t>(stream)>>>(
        dx, dout, x, w, mean, rstd, N, C);
  }
  LayerNormParamGradKernel<<<ColumnBlocks(C), ColumnThreads(), 0,
                             static_cast<cudaStream_t>(stream)>>>(
      dw, db, dout, x, mean, rstd, N, C);
  return Launched();
}

int BroadcastRows(float* out, const float* bias, int N, int C, void* stream) {
  const size_t total = static_cast<size_t>(N) * C;
  if (total == 0) return cudaSuccess;
  BroadcastRowsKernel<<<Blocks(total), kThreads, 0,
                        static_cast<cudaStream_t>(stream)>>>(out, bias, total,
                                                             C);
  return Launched();
}

int ColumnSums(float* out, const float* in, int N, int C, void* stream) {
  if (C == 0) return cudaSuccess;
  ColumnSumsKernel<<<ColumnBlocks(C), ColumnThreads(), 0,
                     static_cast<cudaStream_t>(stream)>>>(out, in, N, C);
  return Launched();
}

int GeluForward(float* out, const float* x, size_t n, void* stream) {
  if (n == 0) return cudaSuccess;
  GeluForwardKernel<<<Blocks(n), kThreads, 0,
                      static_cast<cudaStream_t>(stream)>>>(out, x, n);
  return Launched();
}

int GeluBackward(float* dx, const float* x, const float* dout, size_t n,
                 void* stream) {
  if (n == 0) return cudaSuccess;
  GeluBackwardKernel<<<Blocks(n), kThreads, 0,
                       static_cast<cudaStream_t>(stream)>>>(dx, x, dout, n);
  return Launched();
}

int Add(float* out, const float* a, const float* b, size_t n, void* stream) {
  if (n == 0) return cudaSuccess;
  AddKernel<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      out, a, b, n);
  return Launched();
}

int RoundToBf16(uint16_t* out, const float* x, size_t n, void* stream) {
  if (n == 0) return cudaSuccess;
  RoundToBf16Kernel<<<Blocks(n), kThreads, 0,
                      static_cast<cudaStream_t>(stream)>>>(out, x, n);
  return Launched();
}

int WidenBf16(float* out, const uint16_t* x, size_t n, void* stream) {
  if (n == 0) return cudaSuccess;
  WidenBf16Kernel<<<Blocks(n), kThreads, 0,
                    static_cast<cudaStream_t>(stream)>>>(out, x, n);
  return Launched();
}

int WidenF16(float* out, const uint16_t* x, size_t n, void* stream) {
  if (n == 0) return cudaSuccess;
  WidenF16Kernel<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      out, x, n);
  return Launched();
}

int Zero(float* x, size_t n, void* stream) {
  return cudaMemsetAsync(x, 0, n * sizeof(float),
                         static_cast<cudaStream_t>(stream));
}

int CausalSoftmax(float* att, size_t rows, int T, void* stream) {
  if (rows == 0) return cudaSuccess;
  CausalSoftmaxKernel<<<WarpBlocks(rows), kThreads, 0,
                        static_cast<cudaStream_t>(stream)>>>(att, rows, T);
  return Launched();
}

int CausalSoftmaxBackward(float* datt, const float* att, size_t rows, int T,
                          float scale, void* stream) {
  if (rows == 0) return cudaSuccess;
  CausalSoftmaxBackwardKernel<<<WarpBlocks(rows), kThreads, 0,
                                static_cast<cudaStream_t>(stream)>>>(
      datt, att, rows, T, scale);
  return Launched();
}

int CrossEntropyForward(float* logits, const int32_t* targets, int N, int V,
                        double* row_losses, void* stream) {
  if (N == 0) return cudaSuccess;
  const int blocks = N < 65535 * 8 ? N : 65535 * 8;
  CrossEntropyForwardKernel<<<blocks, kThreads, 0,
                              static_cast<cudaStream_t>(stream)>>>(
      logits, targets, N, V, row_losses);
  return Launched();
}

int CrossEntropyBackward(float* probs, const int32_t* targets, float dloss,
                         int N, int V, void* stream) {
  const size_t total = static_cast<size_t>(N) * V;
  if (total == 0) return cudaSuccess;
  CrossEntropyBackwardKernel<<<Blocks(total), kThreads, 0,
                               static_cast<cudaStream_t>(stream)>>>(
      probs, targets, dloss, total, V);
  return Launched();
}

const char* ErrorName(int error) {
  return cudaGetErrorString(static_cast<cudaError_t>(error));
}

}  // namespace cuda_kernels_internal
}  // namespace chunkzero
