// The f32 CPU kernels of the transformer layers every model here builds on
// (token and position embeddings, LayerNorm, the products, causal
// attention, GELU, the loss), as free functions in the style of llm.c: outputs
// first, then inputs, then sizes.
//
//   LayerNormForward(out, mean, rstd, x, w, b, rows, C);
//   MatmulForward(qkv, out, c_attn_w, c_attn_b, rows, C, 3 * C);
//   AttentionForward(y, att, qkv, B, T, C, NH);
//
// Legend: B batch, T sequence length, C channels (d_model), NH heads,
// hd = C / NH head size, V vocabulary, P max positions, N = B * T rows.
// Every array is dense and row-major, and all pointers are non-null.
//
// Matmuls run through Gemm (kernels/gemm.h, oneDNN), in f32 or, with
// `precision` kBf16, on bf16-rounded inputs with f32 accumulation (every
// product of the layer: forward and both backward products, and the
// attention's scores and weighted sums); the attention
// runs its heads in parallel, each head's products on one thread. Everything
// else is split over rows (or columns) with base/parallel_for.h. Results do
// not depend on the thread count: Gemm cuts its products the same way for
// any count, every reduction over rows (bias and LayerNorm weight grads)
// runs in a fixed order per column, and per-row losses are summed in row
// order.
//
// Thread-safety: the functions may be called from any number of threads at
// once (on distinct outputs).
#ifndef CHUNKZERO_KERNELS_CPU_KERNELS_H_
#define CHUNKZERO_KERNELS_CPU_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "kernels/gemm.h"

namespace chunkzero {
namespace cpu_kernels {

// out[N, C] = wte[tokens[n]] + wpe[n % T]. REQUIRES: tokens in [0, V).
void EmbeddingForward(float* out, const int32_t* tokens, const float* wte,
                      const float* wpe, int B, int T, int C);
// dwte[V, C] = scatter-add of dout rows at tokens; dwpe[P, C] = sum over the
// batch of dout rows at each position (rows T..P-1 zero). Both overwritten.
void EmbeddingBackward(float* dwte, float* dwpe, const float* dout,
                       const int32_t* tokens, int B, int T, int C, int V,
                       int P);

// out[N, C] = (x - mean) * rstd * w + b per row, eps 1e-5; saves mean[N] and
// rstd[N] for the backward.
void LayerNormForward(float* out, float* mean, float* rstd, const float* x,
                      const float* w, const float* b, int N, int C);
// dx[N, C] += d/dx; dw[C] and db[C] are overwritten.
void LayerNormBackward(float* dx, float* dw, float* db, const float* dout,
                       const float* x, const float* w, const float* mean,
                       const float* rstd, int N, int C);

// A weight matrix of a product: its f32 values, and its bf16 bit patterns
// when its parameter is stored in bf16 (else null). kBf16 products read the
// bits, which are what rounding the values would give, and need no f32 copy
// (f32 may then be null); kF32 products read the values. Converts from a
// plain f32 pointer, the common case.
struct WeightMatrix {
  WeightMatrix(const float* values) : f32(values) {}  // NOLINT: implicit.
  WeightMatrix(const float* values, const uint16_t* bits)
      : f32(values), bf16(bits) {}
  // The operand a product of `precision` reads, with leading dimension ld.
  // REQUIRES: f32 non-null unless precision is kBf16 and bf16 is non-null.
  gemm::Operand Operand(int ld, gemm::Precision precision) const;

  const float* f32;
  const uint16_t* bf16 = nullptr;
};

// out[N, OC] = x[N, IC] w[IC, OC] + bias[OC] (Hugging Face Conv1D layout).
// `bias` may be null.
void MatmulForward(float* out, const float* x, const WeightMatrix& w,
                   const float* bias, int N, int IC, int OC,
                   gemm::Precision precision = gemm::Precision::kF32);
// From out = x w + b: dx[N, IC] = dout w^T, dw[IC, OC] = x^T dout,
// dbias[OC] = column sums of dout; all overwritten. `dbias` may be null.
// dx may be x itself: dw and dbias are made before dx is written.
void MatmulBackward(float* dx, float* dw, float* dbias, const float* dout,
                    const float* x, const WeightMatrix& w, int N, int IC,
                    int OC, gemm::Precision precision = gemm::Precision::kF32);

// out[N, OC] = x[N, IC] w[OC, IC]^T (PyTorch Linear layout, no bias): the
// tied output projection, logits = h wte^T.
void MatmulTransposedForward(float* out, const float* x, const WeightMatrix& w,
                             int N, int IC, int OC,
                             gemm::Precision precision = gemm::Precision::kF32);
// dx[N, IC] = dout w, dw[OC, IC] = dout^T x; both overwritten.
void MatmulTransposedBackward(
    float* dx, float* dw, const float* dout, const float* x,
    const WeightMatrix& w, int N, int IC, int OC,
    gemm::Precision precision = gemm::Precision::kF32);

// out[n] = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void GeluForward(float* out, const float* x, size_t n);
// dx[n] = dout[n] * gelu'(x[n]); dx may alias dout.
void GeluBackward(float* dx, const float* x, const float* dout, size_t n);

// out[N, C] = a + b; out may alias a or b.
void Add(float* out, const float* a, const float* b, size_t n);

// Causal multi-head self-attention. qkv[N, 3C] holds q, k, v side by side
// (head h at columns h*hd of each); out[N, C] = softmax(q k^T / sqrt(hd)
// + causal mask) v per (b, h). att[B, NH, T, T] receives the probabilities
// (zero above the diagonal), kept for the backward.
void AttentionForward(float* out, float* att, const float* qkv, int B, int T,
                      int C, int NH,
                      gemm::Precision precision = gemm::Precision::kF32);
// dqkv[N, 3C] overwritten; it may be qkv itself (each head's grads are
// written once the head is done), and dout is not read after the last
// head. `att` (the forward's probabilities) is used up: it receives the
// scores' grads. datt is scratch of datt_heads blocks of
// AttentionBackwardScratchPerHead floats (at least 1; more than B NH are
// not used), one per head computed at once: datt_heads = the threads that
// may run it is the fastest, and the result is the same bits for any
// datt_heads.
void AttentionBackward(float* dqkv, float* datt, int datt_heads,
                       const float* dout, const float* qkv, float* att, int B,
                       int T, int C, int NH,
                       gemm::Precision precision = gemm::Precision::kF32);
// The scratch of one head computed at once: dP (T x T) and the head's
// dQ, dK, dV (T x 3 C / NH).
inline size_t AttentionBackwardScratchPerHead(int T, int C, int NH) {
  return static_cast<size_t>(T) * T + static_cast<size_t>(T) * 3 * (C / NH);
}

// Softmax cross-entropy over logits[N, V], in place: logits become the
// probabilities, and row_losses[N] the rows' -log p[target]. Returns their
// mean (summed in row order). REQUIRES: targets in [0, V).
double CrossEntropyForward(float* logits, const int32_t* targets, int N, int V,
                           double* row_losses);
// probs[N, V] become dlogits = (probs - onehot(target)) * dloss_per_row, in
// place (dloss_per_row: d(loss)/d(row loss), e.g. scale / N for a mean).
void CrossEntropyBackward(float* probs, const int32_t* targets,
                          float dloss_per_row, int N, int V);

// exp(x) to about 2 ulp for x in [-87, 88], written so the compiler
// vectorises loops over it (std::exp is a scalar libm call); below -87 it
// returns a tiny positive value instead of 0, above 88 a value near
// FLT_MAX. Exposed for its test.
float ExpApprox(float x);

}  // namespace cpu_kernels
}  // namespace chunkzero

#endif  // CHUNKZERO_KERNELS_CPU_KERNELS_H_
