// The f32 CPU kernels of RMSNorm-and-rotary decoders (Llama, Qwen2)
// beyond kernels/cpu_kernels.h: RMSNorm, rotary position embedding, the SwiGLU
// gate, and the grouped-query heads' expansion into the attention's q, k, v
// layout. The products, the causal attention and the loss are
// (kernels/cpu_kernels.h). Outputs first, then inputs, then sizes.
//
//   RmsNormForward(xn, rstd, x, w, N, C, eps);
//   RopeTables(cos, sin, T, head_dim, theta);
//   RopeForward(q, cos, sin, N, T, heads, head_dim);
//
// Legend: N rows (B T), C channels, T sequence length (a row's position is
// n % T), hd head size, NH query heads, KV key/value heads (NH % KV == 0).
// Rows are split over base/parallel_for.h's threads; every reduction runs
// in a fixed order, so results do not depend on the thread count.
#ifndef CHUNKZERO_KERNELS_CPU_RMSNORM_ROPE_SWIGLU_KERNELS_H_
#define CHUNKZERO_KERNELS_CPU_RMSNORM_ROPE_SWIGLU_KERNELS_H_

#include <cstddef>
#include <cstdint>

namespace chunkzero {
namespace cpu_kernels {

// out[N, C] = wte[tokens[n]]. REQUIRES: tokens in [0, V).
void TokenEmbeddingForward(float* out, const int32_t* tokens, const float* wte,
                           int N, int C);
// dwte[V, C] = the dout rows added up at their tokens, in row order
// (overwritten).
void TokenEmbeddingBackward(float* dwte, const float* dout,
                            const int32_t* tokens, int N, int C, int V);

// out[N, C] = x * rstd * w per row, rstd[n] = 1 / sqrt(mean(x^2) + eps)
// (saved for the backward). out may not alias x.
void RmsNormForward(float* out, float* rstd, const float* x, const float* w,
                    int N, int C, float eps);
// dx[N, C] += d/dx; dw[C] = sum over rows of dout * x * rstd (overwritten).
void RmsNormBackward(float* dx, float* dw, const float* dout, const float* x,
                     const float* w, const float* rstd, int N, int C);

// cos[T, hd / 2] and sin[T, hd / 2] of position t times inv_freq[i] =
// 1 / theta^(2 i / hd), as Hugging Face's rotary embedding computes them:
// inv_freq and the angle in f32, its cosine and sine rounded to f32.
// REQUIRES: hd even.
void RopeTables(float* cos, float* sin, int T, int head_dim, double theta);
// Rotates x[N, heads * hd] in place, each head in the rotate-half layout:
// for i < hd/2, (x_i, x_{i+hd/2}) -> (x_i c - x_{i+hd/2} s,
// x_{i+hd/2} c + x_i s) with c, s of the row's position n % T.
void RopeForward(float* x, const float* cos, const float* sin, int N, int T,
                 int heads, int head_dim);
// The backward, in place: the rotation by minus the angle.
void RopeBackward(float* dx, const float* cos, const float* sin, int N, int T,
                  int heads, int head_dim);

// h[n] = silu(gate[n]) up[n], silu(g) = g / (1 + exp(-g)).
void SwiGluForward(float* h, const float* gate, const float* up, size_t n);
// dgate[n] and dup[n] from dh[n]; dgate may be gate and dup may be up.
void SwiGluBackward(float* dgate, float* dup, const float* dh,
                    const float* gate, const float* up, size_t n);

// qkv[N, 3 NH hd] (the attention's layout: q, then k, then v, head h at
// columns h hd of each) from q[N, NH hd], k[N, KV hd] and v[N, KV hd]:
// query head h reads key/value head h / (NH / KV), as Hugging Face's
// repeat_kv.
void ExpandQkv(float* qkv, const float* q, const float* k, const float* v,
               int N, int NH, int KV, int head_dim);
// The backward: dq[N, NH hd], and dk, dv[N, KV hd] summed over the query
// heads that read them, in head order (all overwritten).
void ReduceQkvGrad(float* dq, float* dk, float* dv, const float* dqkv, int N,
                   int NH, int KV, int head_dim);

}  // namespace cpu_kernels
}  // namespace chunkzero

#endif  // CHUNKZERO_KERNELS_CPU_RMSNORM_ROPE_SWIGLU_KERNELS_H_
