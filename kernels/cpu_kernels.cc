#include "kernels/cpu_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "base/parallel_for.h"
#include "kernels/gemm.h"
#include "kernels/internal/lane_reductions.h"
#include "kernels/internal/layer_math.h"

// The row loops are compiled three times (AVX-512, AVX2+FMA, baseline
// x86-64) and picked at load time by the CPU (GCC function multiversioning):
// the build itself targets plain x86-64, and these loops are where the
// non-matmul time goes. Not in sanitizer builds: the clones' ifunc
// resolvers run while the dynamic linker relocates, before the sanitizer
// runtime is up, and instrumented resolvers crash there.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(CHUNKZERO_SANITIZER_BUILD)
#define CPU_KERNEL \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CPU_KERNEL
#endif

namespace chunkzero {
namespace cpu_kernels {
namespace {

// Elements per ParallelFor piece: below this, waking a thread costs more
// than it saves.
constexpr size_t kGrainElements = 16384;

size_t RowGrain(int width) {
  return std::max<size_t>(1, kGrainElements / std::max(width, 1));
}

using gemm::Gemm;
using gemm::GemmOnThisThread;
constexpr gemm::Transpose kNo = gemm::Transpose::kNo;
constexpr gemm::Transpose kYes = gemm::Transpose::kYes;

using lane_reductions::Dot;
using lane_reductions::kLanes;
using lane_reductions::Sum;

inline float Max(const float* x, int n) {
  float acc[kLanes];
  for (int j = 0; j < kLanes; ++j) acc[j] = -INFINITY;
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      acc[j] = acc[j] > x[i + j] ? acc[j] : x[i + j];
    }
  }
  float m = -INFINITY;
  for (; i < n; ++i) m = m > x[i] ? m : x[i];
  for (int j = 0; j < kLanes; ++j) m = m > acc[j] ? m : acc[j];
  return m;
}

using layer_math::Exp;

// --- Row kernels (multiversioned). ---

CPU_KERNEL void EmbeddingRows(size_t begin, size_t end, float* out,
                              const int32_t* tokens, const float* wte,
                              const float* wpe, int T, int C) {
  for (size_t n = begin; n < end; ++n) {
    const float* e = wte + static_cast<size_t>(tokens[n]) * C;
    const float* p = wpe + (n % T) * C;
    float* o = out + n * C;
    for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
  }
}

// Columns [c0, c1) of the embedding grads, every row in order.
CPU_KERNEL void EmbeddingBackwardColumns(size_t c0, size_t c1, float* dwte,
                                         float* dwpe, const float* dout,
                                         const int32_t* tokens, int N, int T,
                                         int C) {
  for (int n = 0; n < N; ++n) {
    const float* d = dout + static_cast<size_t>(n) * C;
    float* e = dwte + static_cast<size_t>(tokens[n]) * C;
    float* p = dwpe + static_cast<size_t>(n % T) * C;
    for (size_t c = c0; c < c1; ++c) {
      e[c] += d[c];
      p[c] += d[c];
    }
  }
}

CPU_KERNEL void LayerNormRows(size_t begin, size_t end, float* out, float* mean,
                              float* rstd, const float* x, const float* w,
                              const float* b, int C) {
  for (size_t n = begin; n < end; ++n) {
    const float* xr = x + n * C;
    float* o = out + n * C;
    const float m = Sum(xr, C) / C;
    // Two passes (not E[x^2] - m^2), so large means do not cancel.
    for (int c = 0; c < C; ++c) o[c] = xr[c] - m;
    const float var = Dot(o, o, C) / C;
    const float s = 1.0f / std::sqrt(var + 1e-5f);
    for (int c = 0; c < C; ++c) o[c] = o[c] * s * w[c] + b[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

// dx rows of the LayerNorm backward; `scratch` holds 2 * C floats.
CPU_KERNEL void LayerNormBackwardRows(size_t begin, size_t end, float* dx,
                                      const float* dout, const float* x,
                                      const float* w, const float* mean,
                                      const float* rstd, int C,
                                      float* scratch) {
  float* norm = scratch;
  float* dnorm = scratch + C;
  for (size_t n = begin; n < end; ++n) {
    const float* xr = x + n * C;
    const float* d = dout + n * C;
    float* dxr = dx + n * C;
    const float m = mean[n], s = rstd[n];
    for (int c = 0; c < C; ++c) {
      norm[c] = (xr[c] - m) * s;
      dnorm[c] = d[c] * w[c];
    }
    const float dnorm_mean = Sum(dnorm, C) / C;
    const float dnorm_norm_mean = Dot(dnorm, norm, C) / C;
    for (int c = 0; c < C; ++c) {
      dxr[c] += (dnorm[c] - dnorm_mean - norm[c] * dnorm_norm_mean) * s;
    }
  }
}

// dw[c] = sum_n dout * norm, db[c] = sum_n dout for columns [c0, c1).
CPU_KERNEL void LayerNormParamGradColumns(size_t c0, size_t c1, float* dw,
                                          float* db, const float* dout,
                                          const float* x, const float* mean,
                                          const float* rstd, int N, int C) {
  for (size_t c = c0; c < c1; ++c) dw[c] = db[c] = 0;
  for (int n = 0; n < N; ++n) {
    const float* xr = x + static_cast<size_t>(n) * C;
    const float* d = dout + static_cast<size_t>(n) * C;
    const float m = mean[n], s = rstd[n];
    for (size_t c = c0; c < c1; ++c) {
      dw[c] += d[c] * ((xr[c] - m) * s);
      db[c] += d[c];
    }
  }
}

CPU_KERNEL void ColumnSums(size_t c0, size_t c1, float* out, const float* in,
                           int N, int C) {
  for (size_t c = c0; c < c1; ++c) out[c] = 0;
  for (int n = 0; n < N; ++n) {
    const float* r = in + static_cast<size_t>(n) * C;
    for (size_t c = c0; c < c1; ++c) out[c] += r[c];
  }
}

CPU_KERNEL void BroadcastRows(size_t begin, size_t end, float* out,
                              const float* bias, int C) {
  for (size_t n = begin; n < end; ++n) {
    std::memcpy(out + n * C, bias, sizeof(float) * C);
  }
}

CPU_KERNEL void GeluRange(size_t begin, size_t end, float* out,
                          const float* x) {
  for (size_t i = begin; i < end; ++i) {
    out[i] = layer_math::Gelu(x[i]);
  }
}

CPU_KERNEL void GeluBackwardRange(size_t begin, size_t end, float* dx,
                                  const float* x, const float* dout) {
  for (size_t i = begin; i < end; ++i) {
    dx[i] = layer_math::GeluGrad(x[i], dout[i]);
  }
}

CPU_KERNEL void AddRange(size_t begin, size_t end, float* out, const float* a,
                         const float* b) {
  for (size_t i = begin; i < end; ++i) out[i] = a[i] + b[i];
}

// Rows of att[B * NH * T, T] (scores) become causal softmax probabilities.
CPU_KERNEL void CausalSoftmaxRows(size_t begin, size_t end, float* att, int T) {
  for (size_t r = begin; r < end; ++r) {
    const int t = static_cast<int>(r % T);
    float* p = att + r * T;
    const float m = Max(p, t + 1);
    for (int s = 0; s <= t; ++s) p[s] = Exp(p[s] - m);
    const float inv = 1.0f / Sum(p, t + 1);
    for (int s = 0; s <= t; ++s) p[s] *= inv;
    for (int s = t + 1; s < T; ++s) p[s] = 0;
  }
}

// Rows r0..r1 of one head: p (P on entry) becomes dS = P * (dP - <P, dP>)
// * scale, dP read from dp; T columns each, zero above the diagonal.
CPU_KERNEL void CausalSoftmaxBackwardRows(int r0, int r1, float* p,
                                          const float* dp, int T, float scale) {
  for (int t = r0; t < r1; ++t) {
    float* pr = p + static_cast<size_t>(t) * T;
    const float* d = dp + static_cast<size_t>(t) * T;
    const float dot = Dot(pr, d, t + 1);
    for (int s = 0; s <= t; ++s) pr[s] = pr[s] * (d[s] - dot) * scale;
    for (int s = t + 1; s < T; ++s) pr[s] = 0;
  }
}

CPU_KERNEL void CrossEntropyRows(size_t begin, size_t end, float* logits,
                                 const int32_t* targets, int V,
                                 double* losses) {
  for (size_t n = begin; n < end; ++n) {
    float* l = logits + n * V;
    const float target_logit = l[targets[n]];
    const float m = Max(l, V);
    for (int v = 0; v < V; ++v) l[v] = Exp(l[v] - m);
    const float sum = Sum(l, V);
    const float inv = 1.0f / sum;
    for (int v = 0; v < V; ++v) l[v] *= inv;
    // -log softmax = log(sum) + m - l[target], in double: the row losses
    // are averaged over many rows.
    losses[n] = std::log(static_cast<double>(sum)) + m - target_logit;
  }
}

CPU_KERNEL void CrossEntropyBackwardRows(size_t begin, size_t end, float* probs,
                                         const int32_t* targets, float dloss,
                                         int V) {
  for (size_t n = begin; n < end; ++n) {
    float* p = probs + n * V;
    for (int v = 0; v < V; ++v) p[v] *= dloss;
    p[targets[n]] -= dloss;
  }
}

// Splits columns [0, C) into pieces of at least 64 (so each row's piece is
// a few cache lines) for fn(c0, c1).
template <typename Fn>
void ForColumns(int C, Fn fn) {
  ParallelFor(C, 64, [&](size_t c0, size_t c1) { fn(c0, c1); });
}

}  // namespace

float ExpApprox(float x) { return Exp(x); }

void EmbeddingForward(float* out, const int32_t* tokens, const float* wte,
                      const float* wpe, int B, int T, int C) {
  ParallelFor(static_cast<size_t>(B) * T, RowGrain(C),
              [&](size_t begin, size_t end) {
                EmbeddingRows(begin, end, out, tokens, wte, wpe, T, C);
              });
}

void EmbeddingBackward(float* dwte, float* dwpe, const float* dout,
                       const int32_t* tokens, int B, int T, int C, int V,
                       int P) {
  ParallelFor(static_cast<size_t>(V), RowGrain(C), [&](size_t b, size_t e) {
    std::memset(dwte + b * C, 0, sizeof(float) * (e - b) * C);
  });
  std::memset(dwpe, 0, sizeof(float) * static_cast<size_t>(P) * C);
  ForColumns(C, [&](size_t c0, size_t c1) {
    EmbeddingBackwardColumns(c0, c1, dwte, dwpe, dout, tokens, B * T, T, C);
  });
}

void LayerNormForward(float* out, float* mean, float* rstd, const float* x,
                      const float* w, const float* b, int N, int C) {
  ParallelFor(N, RowGrain(C), [&](size_t begin, size_t end) {
    LayerNormRows(begin, end, out, mean, rstd, x, w, b, C);
  });
}

void LayerNormBackward(float* dx, float* dw, float* db, const float* dout,
                       const float* x, const float* w, const float* mean,
                       const float* rstd, int N, int C) {
  ParallelFor(N, RowGrain(C), [&](size_t begin, size_t end) {
    // Per piece, not per row: one small allocation per thread and call.
    std::unique_ptr<float[]> scratch(new float[2 * C]);
    LayerNormBackwardRows(begin, end, dx, dout, x, w, mean, rstd, C,
                          scratch.get());
  });
  ForColumns(C, [&](size_t c0, size_t c1) {
    LayerNormParamGradColumns(c0, c1, dw, db, dout, x, mean, rstd, N, C);
  });
}

gemm::Operand WeightMatrix::Operand(int ld, gemm::Precision precision) const {
  if (precision == gemm::Precision::kBf16 && bf16 != nullptr) {
    return gemm::Operand::Bf16(bf16, ld);
  }
  return gemm::Operand(f32, ld);
}

void MatmulForward(float* out, const float* x, const WeightMatrix& w,
                   const float* bias, int N, int IC, int OC,
                   gemm::Precision precision) {
  float beta = 0.0f;
  if (bias != nullptr) {
    ParallelFor(N, RowGrain(OC), [&](size_t begin, size_t end) {
      BroadcastRows(begin, end, out, bias, OC);
    });
    beta = 1.0f;
  }
  Gemm(kNo, kNo, N, OC, IC, 1.0f, gemm::Operand(x, IC),
       w.Operand(OC, precision), beta, out, OC, precision);
}

namespace {

// dout as both of its products read it: bf16 bits, rounded once, for bf16
// products (each Gemm would round it again), else the f32 values. The bits
// live in the calling thread's buffer until its next call.
gemm::Operand GradOperand(const float* dout, int N, int OC,
                          gemm::Precision precision) {
  if (precision != gemm::Precision::kBf16) return gemm::Operand(dout, OC);
  thread_local std::vector<uint16_t> bits;
  bits.resize(static_cast<size_t>(N) * OC);
  gemm::PackBf16(dout, N, OC, OC, bits.data());
  return gemm::Operand::Bf16(bits.data(), OC);
}

}  // namespace

void MatmulBackward(float* dx, float* dw, float* dbias, const float* dout,
                    const float* x, const WeightMatrix& w, int N, int IC,
                    int OC, gemm::Precision precision) {
  const gemm::Operand grad = GradOperand(dout, N, OC, precision);
  // dw and dbias first: dx may overwrite x (the model's dfch in place).
  Gemm(kYes, kNo, IC, OC, N, 1.0f, gemm::Operand(x, IC), grad, 0.0f, dw, OC,
       precision);
  if (dbias != nullptr) {
    ForColumns(OC, [&](size_t c0, size_t c1) {
      ColumnSums(c0, c1, dbias, dout, N, OC);
    });
  }
  Gemm(kNo, kYes, N, IC, OC, 1.0f, grad, w.Operand(OC, precision), 0.0f, dx, IC,
       precision);
}

void MatmulTransposedForward(float* out, const float* x, const WeightMatrix& w,
                             int N, int IC, int OC, gemm::Precision precision) {
  Gemm(kNo, kYes, N, OC, IC, 1.0f, gemm::Operand(x, IC),
       w.Operand(IC, precision), 0.0f, out, OC, precision);
}

void MatmulTransposedBackward(float* dx, float* dw, const float* dout,
                              const float* x, const WeightMatrix& w, int N,
                              int IC, int OC, gemm::Precision precision) {
  const gemm::Operand grad = GradOperand(dout, N, OC, precision);
  Gemm(kNo, kNo, N, IC, OC, 1.0f, grad, w.Operand(IC, precision), 0.0f, dx, IC,
       precision);
  Gemm(kYes, kNo, OC, IC, N, 1.0f, grad, gemm::Operand(x, IC), 0.0f, dw, IC,
       precision);
}

void GeluForward(float* out, const float* x, size_t n) {
  ParallelFor(n, kGrainElements,
              [&](size_t begin, size_t end) { GeluRange(begin, end, out, x); });
}

void GeluBackward(float* dx, const float* x, const float* dout, size_t n) {
  ParallelFor(n, kGrainElements, [&](size_t begin, size_t end) {
    GeluBackwardRange(begin, end, dx, x, dout);
  });
}

void Add(float* out, const float* a, const float* b, size_t n) {
  ParallelFor(n, kGrainElements, [&](size_t begin, size_t end) {
    AddRange(begin, end, out, a, b);
  });
}

// Per (b, h), with Q, K, V the head's [T, hd] column blocks of qkv (leading
// dimension 3C): att = softmax(Q K^T / sqrt(hd)), out block = att V. The
// heads run in parallel, each on one thread from its scores to its output,
// so a head's T x T block stays in that thread's cache.
void AttentionForward(float* out, float* att, const float* qkv, int B, int T,
                      int C, int NH, gemm::Precision precision) {
  const int hd = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const size_t tt = static_cast<size_t>(T) * T;
  ParallelFor(static_cast<size_t>(B) * NH, 1, [&](size_t begin, size_t end) {
    for (size_t bh = begin; bh < end; ++bh) {
      const size_t b = bh / NH, h = bh % NH;
      const float* q = qkv + b * T * 3 * C + h * hd;
      const float* v = q + 2 * C;
      float* head_att = att + bh * tt;
      GemmOnThisThread(kNo, kYes, T, T, hd, scale, q, 3 * C, q + C, 3 * C, 0.0f,
                       head_att, T, precision);
      CausalSoftmaxRows(bh * T, (bh + 1) * T, att, T);
      GemmOnThisThread(kNo, kNo, T, hd, T, 1.0f, head_att, T, v, 3 * C, 0.0f,
                       out + b * T * C + h * hd, C, precision);
    }
  });
}

// From S = Q K^T * scale, P = softmax(S), Y = P V:
//   dP = dY V^T, dV = P^T dY, dS = P * (dP - rowsum(P * dP)) (times scale
//   here, folding in the score scale), dQ = dS K, dK = dS^T Q.
// dS overwrites P (dV, the last reader of P, comes first), so the T x T
// scratch is dP alone: one block per head computed at once, with the
// head's dQ, dK, dV next to it, copied into dqkv once the head is done (so
// dqkv may be qkv). The heads are cut into datt_heads contiguous runs, one
// block each, run in parallel; each head writes only its own columns, so
// the split changes no bits.
void AttentionBackward(float* dqkv, float* datt, int datt_heads,
                       const float* dout, const float* qkv, float* att, int B,
                       int T, int C, int NH, gemm::Precision precision) {
  const int hd = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const size_t tt = static_cast<size_t>(T) * T;
  const size_t block = AttentionBackwardScratchPerHead(T, C, NH);
  const size_t heads = static_cast<size_t>(B) * NH;
  const size_t runs =
      std::min(heads, static_cast<size_t>(std::max(1, datt_heads)));
  ParallelFor(runs, 1, [&](size_t begin, size_t end) {
    for (size_t run = begin; run < end; ++run) {
      float* dp = datt + run * block;
      float* dhead = dp + tt;  // [T, 3 hd]: dQ, dK, dV side by side.
      for (size_t bh = run * heads / runs; bh < (run + 1) * heads / runs;
           ++bh) {
        const size_t b = bh / NH, h = bh % NH;
        const size_t row0 = b * T;
        const float* dy = dout + row0 * C + h * hd;
        const float* q = qkv + row0 * 3 * C + h * hd;
        const float* v = q + 2 * C;
        float* p = att + bh * tt;
        GemmOnThisThread(kNo, kYes, T, T, hd, 1.0f, dy, C, v, 3 * C, 0.0f, dp,
                         T, precision);
        GemmOnThisThread(kYes, kNo, T, hd, T, 1.0f, p, T, dy, C, 0.0f,
                         dhead + 2 * hd, 3 * hd, precision);
        CausalSoftmaxBackwardRows(0, T, p, dp, T, scale);
        GemmOnThisThread(kNo, kNo, T, hd, T, 1.0f, p, T, q + C, 3 * C, 0.0f,
                         dhead, 3 * hd, precision);
        GemmOnThisThread(kYes, kNo, T, hd, T, 1.0f, p, T, q, 3 * C, 0.0f,
                         dhead + hd, 3 * hd, precision);
        float* dq = dqkv + row0 * 3 * C + h * hd;
        for (int t = 0; t < T; ++t) {
          for (int part = 0; part < 3; ++part) {
            std::memcpy(dq + static_cast<size_t>(t) * 3 * C + part * C,
                        dhead + static_cast<size_t>(t) * 3 * hd + part * hd,
                        sizeof(float) * hd);
          }
        }
      }
    }
  });
}

double CrossEntropyForward(float* logits, const int32_t* targets, int N, int V,
                           double* row_losses) {
  ParallelFor(N, RowGrain(V), [&](size_t begin, size_t end) {
    CrossEntropyRows(begin, end, logits, targets, V, row_losses);
  });
  double sum = 0;
  for (int n = 0; n < N; ++n) sum += row_losses[n];
  return sum / N;
}

void CrossEntropyBackward(float* probs, const int32_t* targets,
                          float dloss_per_row, int N, int V) {
  ParallelFor(N, RowGrain(V), [&](size_t begin, size_t end) {
    CrossEntropyBackwardRows(begin, end, probs, targets, dloss_per_row, V);
  });
}

}  // namespace cpu_kernels
}  // namespace chunkzero
