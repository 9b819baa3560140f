// Causal multi-head attention in one pass over the keys, keeping no T x T
// matrix: the forward keeps each query row's log-sum-exp, the backward
// recomputes the probabilities from it (as FlashAttention does).
//
// Simple tiling, for correctness and memory first: a thread owns one query
// row (forward, dQ) or one key row (dK, dV) and keeps that row's vectors in
// registers; a block of 64 threads loads tiles of 32 keys (or queries) of
// its sequence and head into shared memory. Softmax is online: per key
// tile, the running max moves, the sums and the output rescale once.
// Every sum runs in a fixed order, so results repeat bit for bit; no
// atomics. The dot products and sums are f32 CUDA-core arithmetic; with
// bf16 the loaded q, k, v and dout are rounded to bf16 first (their
// products are then exact), the probabilities stay f32.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/internal/cuda_fused_attention.h"
#include "kernels/internal/layer_math.h"
#include "tensor/half.h"

namespace chunkzero {
namespace cuda_kernels_internal {
namespace {

constexpr int kRows = 64;  // Threads per block: query (or key) rows.
constexpr int kTile = 32;  // Keys (or queries) per shared-memory tile.
constexpr int kMaxHd = kMaxFusedHeadDim;

__device__ float Value(const float* p, bool bf16) {
  const float x = *p;
  return bf16 ? BFloat16BitsToFloat(FloatToBFloat16Bits(x)) : x;
}

// Where a head's vectors are: row `t` of sequence `b` in qkv (leading
// dimension 3C: q at h*hd, k at C + h*hd, v at 2C + h*hd) or in a [N, C]
// array (the output and its grad, at h*hd).
struct Head {
  int T, C, hd, b, h;
  __device__ size_t Qkv(int t, int part) const {
    return (static_cast<size_t>(b) * T + t) * 3 * C + part * C + h * hd;
  }
  __device__ size_t Out(int t) const {
    return (static_cast<size_t>(b) * T + t) * C + h * hd;
  }
};

__device__ Head HeadOf(int T, int C, int NH) {
  const int bh = blockIdx.y;
  return Head{T, C, C / NH, bh / NH, bh % NH};
}

// The block loads keys and values [k0, k0 + kTile) of its head (zeros past
// T) into shared memory.
__device__ void LoadKeyTile(float (*k_tile)[kMaxHd], float (*v_tile)[kMaxHd],
                            const float* qkv, const Head& head, int k0,
                            bool bf16) {
  for (int i = threadIdx.x; i < kTile * head.hd; i += blockDim.x) {
    const int j = i / head.hd, d = i % head.hd, s = k0 + j;
    const bool in = s < head.T;
    k_tile[j][d] = in ? Value(qkv + head.Qkv(s, 1) + d, bf16) : 0.0f;
    v_tile[j][d] = in ? Value(qkv + head.Qkv(s, 2) + d, bf16) : 0.0f;
  }
}

__global__ void ForwardKernel(float* out, float* lse, const float* qkv, int T,
                              int C, int NH, float scale, bool bf16) {
  __shared__ float k_tile[kTile][kMaxHd];
  __shared__ float v_tile[kTile][kMaxHd];
  const Head head = HeadOf(T, C, NH);
  const int hd = head.hd;
  const int t = blockIdx.x * kRows + threadIdx.x;
  const bool active = t < T;
  float q[kMaxHd], acc[kMaxHd];
  for (int d = 0; d < hd; ++d) {
    q[d] = active ? Value(qkv + head.Qkv(t, 0) + d, bf16) : 0.0f;
    acc[d] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int last = min(T, (blockIdx.x + 1) * kRows) - 1;  // Block's last row.
  for (int k0 = 0; k0 <= last; k0 += kTile) {
    LoadKeyTile(k_tile, v_tile, qkv, head, k0, bf16);
    __syncthreads();
    const int keys = active ? min(kTile, t - k0 + 1) : 0;  // Keys s <= t.
    if (keys > 0) {
      float score[kTile];
      float tile_max = -INFINITY;
      for (int j = 0; j < keys; ++j) {
        float dot = 0.0f;
        for (int d = 0; d < hd; ++d) dot += q[d] * k_tile[j][d];
        score[j] = dot * scale;
        tile_max = score[j] > tile_max ? score[j] : tile_max;
      }
      const float m_new = tile_max > m ? tile_max : m;
      const float correction =
          m == -INFINITY ? 0.0f : layer_math::Exp(m - m_new);
      l *= correction;
      for (int d = 0; d < hd; ++d) acc[d] *= correction;
      for (int j = 0; j < keys; ++j) {
        const float p = layer_math::Exp(score[j] - m_new);
        l += p;
        for (int d = 0; d < hd; ++d) acc[d] += p * v_tile[j][d];
      }
      m = m_new;
    }
    __syncthreads();
  }
  if (!active) return;
  const float inv = 1.0f / l;
  for (int d = 0; d < hd; ++d) out[head.Out(t) + d] = acc[d] * inv;
  lse[static_cast<size_t>(blockIdx.y) * T + t] = m + logf(l);
}

// delta[bh, t] = <dout row, out row> of the head: the softmax backward's
// row sums, dP . P = dO . O.
__global__ void DeltaKernel(float* delta, const float* dout, const float* out,
                            int T, int C, int NH) {
  const Head head = HeadOf(T, C, NH);
  const int t = blockIdx.x * kRows + threadIdx.x;
  if (t >= T) return;
  float sum = 0.0f;
  for (int d = 0; d < head.hd; ++d) {
    sum += dout[head.Out(t) + d] * out[head.Out(t) + d];
  }
  delta[static_cast<size_t>(blockIdx.y) * T + t] = sum;
}

// dQ: a thread per query row, over the key tiles up to it:
// dS = P (dP - delta), dQ = scale * dS K.
__global__ void QueryGradKernel(float* dqkv, const float* dout,
                                const float* qkv, const float* lse,
                                const float* delta, int T, int C, int NH,
                                float scale, bool bf16) {
  __shared__ float k_tile[kTile][kMaxHd];
  __shared__ float v_tile[kTile][kMaxHd];
  const Head head = HeadOf(T, C, NH);
  const int hd = head.hd;
  const int t = blockIdx.x * kRows + threadIdx.x;
  const bool active = t < T;
  const size_t row = static_cast<size_t>(blockIdx.y) * T + t;
  float q[kMaxHd], dy[kMaxHd], dq[kMaxHd];
  for (int d = 0; d < hd; ++d) {
    q[d] = active ? Value(qkv + head.Qkv(t, 0) + d, bf16) : 0.0f;
    dy[d] = active ? Value(dout + head.Out(t) + d, bf16) : 0.0f;
    dq[d] = 0.0f;
  }
  const float row_lse = active ? lse[row] : 0.0f;
  const float row_delta = active ? delta[row] : 0.0f;
  const int last = min(T, (blockIdx.x + 1) * kRows) - 1;
  for (int k0 = 0; k0 <= last; k0 += kTile) {
    LoadKeyTile(k_tile, v_tile, qkv, head, k0, bf16);
    __syncthreads();
    const int keys = active ? min(kTile, t - k0 + 1) : 0;
    for (int j = 0; j < keys; ++j) {
      float qk = 0.0f, dp = 0.0f;
      for (int d = 0; d < hd; ++d) {
        qk += q[d] * k_tile[j][d];
        dp += dy[d] * v_tile[j][d];
      }
      const float p = layer_math::Exp(qk * scale - row_lse);
      const float ds = p * (dp - row_delta) * scale;
      for (int d = 0; d < hd; ++d) dq[d] += ds * k_tile[j][d];
    }
    __syncthreads();
  }
  if (!active) return;
  for (int d = 0; d < hd; ++d) dqkv[head.Qkv(t, 0) + d] = dq[d];
}

// dK and dV: a thread per key row, over the query tiles from it on:
// dV = P^T dY, dK = scale * dS^T Q.
__global__ void KeyValueGradKernel(float* dqkv, const float* dout,
                                   const float* qkv, const float* lse,
                                   const float* delta, int T, int C, int NH,
                                   float scale, bool bf16) {
  __shared__ float q_tile[kTile][kMaxHd];
  __shared__ float dy_tile[kTile][kMaxHd];
  __shared__ float lse_tile[kTile];
  __shared__ float delta_tile[kTile];
  const Head head = HeadOf(T, C, NH);
  const int hd = head.hd;
  const int s = blockIdx.x * kRows + threadIdx.x;
  const bool active = s < T;
  float k[kMaxHd], v[kMaxHd], dk[kMaxHd], dv[kMaxHd];
  for (int d = 0; d < hd; ++d) {
    k[d] = active ? Value(qkv + head.Qkv(s, 1) + d, bf16) : 0.0f;
    v[d] = active ? Value(qkv + head.Qkv(s, 2) + d, bf16) : 0.0f;
    dk[d] = dv[d] = 0.0f;
  }
  const size_t rows = static_cast<size_t>(blockIdx.y) * T;
  // The queries that see this block's keys: from its first key on.
  for (int q0 = blockIdx.x * kRows; q0 < T; q0 += kTile) {
    for (int i = threadIdx.x; i < kTile * hd; i += blockDim.x) {
      const int j = i / hd, d = i % hd, t = q0 + j;
      q_tile[j][d] = t < T ? Value(qkv + head.Qkv(t, 0) + d, bf16) : 0.0f;
      dy_tile[j][d] = t < T ? Value(dout + head.Out(t) + d, bf16) : 0.0f;
    }
    for (int j = threadIdx.x; j < kTile; j += blockDim.x) {
      const int t = q0 + j;
      lse_tile[j] = t < T ? lse[rows + t] : 0.0f;
      delta_tile[j] = t < T ? delta[rows + t] : 0.0f;
    }
    __syncthreads();
    if (active) {
      for (int j = 0; j < kTile; ++j) {
        const int t = q0 + j;
        if (t < s || t >= T) continue;
        float qk = 0.0f, dp = 0.0f;
        for (int d = 0; d < hd; ++d) {
          qk += q_tile[j][d] * k[d];
          dp += dy_tile[j][d] * v[d];
        }
        const float p = layer_math::Exp(qk * scale - lse_tile[j]);
        const float ds = p * (dp - delta_tile[j]) * scale;
        for (int d = 0; d < hd; ++d) {
          dv[d] += p * dy_tile[j][d];
          dk[d] += ds * q_tile[j][d];
        }
      }
    }
    __syncthreads();
  }
  if (!active) return;
  for (int d = 0; d < hd; ++d) {
    dqkv[head.Qkv(s, 1) + d] = dk[d];
    dqkv[head.Qkv(s, 2) + d] = dv[d];
  }
}

dim3 Grid(int T, int B, int NH) {
  return dim3(static_cast<unsigned>((T + kRows - 1) / kRows),
              static_cast<unsigned>(B * NH));
}

}  // namespace

int FusedAttentionForward(float* out, float* lse, const float* qkv, int B,
                          int T, int C, int NH, bool bf16, void* stream) {
  if (B == 0 || T == 0) return cudaSuccess;
  const float scale = 1.0f / sqrtf(static_cast<float>(C / NH));
  ForwardKernel<<<Grid(T, B, NH), kRows, 0,
                  static_cast<cudaStream_t>(stream)>>>(out, lse, qkv, T, C, NH,
                                                       scale, bf16);
  return static_cast<int>(cudaGetLastError());
}

int FusedAttentionBackward(float* dqkv, float* delta, const float* dout,
                           const float* qkv, const float* out, const float* lse,
                           int B, int T, int C, int NH, bool bf16,
                           void* stream) {
  if (B == 0 || T == 0) return cudaSuccess;
  const float scale = 1.0f / sqrtf(static_cast<float>(C / NH));
  DeltaKernel<<<Grid(T, B, NH), kRows, 0, static_cast<cudaStream_t>(stream)>>>(
      delta, dout, out, T, C, NH);
  QueryGradKernel<<<Grid(T, B, NH), kRows, 0,
                    static_cast<cudaStream_t>(stream)>>>(
      dqkv, dout, qkv, lse, delta, T, C, NH, scale, bf16);
  KeyValueGradKernel<<<Grid(T, B, NH), kRows, 0,
                       static_cast<cudaStream_t>(stream)>>>(
      dqkv, dout, qkv, lse, delta, T, C, NH, scale, bf16);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace cuda_kernels_internal
}  // namespace chunkzero
