#include "kernels/cpu_rmsnorm_rope_swiglu_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/parallel_for.h"
#include "kernels/internal/lane_reductions.h"
#include "kernels/internal/rmsnorm_rope_swiglu_math.h"

namespace chunkzero {
namespace cpu_kernels {
namespace {

using lane_reductions::Dot;

// Elements per ParallelFor piece: below this, waking a thread costs more
// than it saves.
constexpr size_t kGrainElements = 16384;

size_t RowGrain(size_t width) {
  return std::max<size_t>(1, kGrainElements / std::max<size_t>(width, 1));
}

// Rotates the pairs (x_i, x_{i+h}) of one head by the angle whose cosine
// and sine are c[i], s[i]; `sign` -1 rotates back.
inline void RotateHead(float* x, const float* c, const float* s, int half,
                       float sign) {
  for (int i = 0; i < half; ++i) {
    layer_math::Rotate(c[i], sign * s[i], &x[i], &x[i + half]);
  }
}

void Rope(float* x, const float* cos, const float* sin, int N, int T, int heads,
          int head_dim, float sign) {
  const int half = head_dim / 2;
  const size_t width = static_cast<size_t>(heads) * head_dim;
  ParallelFor(N, RowGrain(width), [&](size_t begin, size_t end) {
    for (size_t n = begin; n < end; ++n) {
      const size_t t = n % T;
      for (int h = 0; h < heads; ++h) {
        RotateHead(x + n * width + static_cast<size_t>(h) * head_dim,
                   cos + t * half, sin + t * half, half, sign);
      }
    }
  });
}

}  // namespace

void TokenEmbeddingForward(float* out, const int32_t* tokens, const float* wte,
                           int N, int C) {
  ParallelFor(N, RowGrain(C), [&](size_t begin, size_t end) {
    for (size_t n = begin; n < end; ++n) {
      std::memcpy(out + n * C, wte + static_cast<size_t>(tokens[n]) * C,
                  C * sizeof(float));
    }
  });
}

void TokenEmbeddingBackward(float* dwte, const float* dout,
                            const int32_t* tokens, int N, int C, int V) {
  ParallelFor(V, RowGrain(C), [&](size_t begin, size_t end) {
    std::memset(dwte + begin * C, 0, (end - begin) * C * sizeof(float));
  });
  // Per column piece, every row in order.
  ParallelFor(C, 64, [&](size_t c0, size_t c1) {
    for (int n = 0; n < N; ++n) {
      const float* d = dout + static_cast<size_t>(n) * C;
      float* e = dwte + static_cast<size_t>(tokens[n]) * C;
      for (size_t c = c0; c < c1; ++c) e[c] += d[c];
    }
  });
}

void RmsNormForward(float* out, float* rstd, const float* x, const float* w,
                    int N, int C, float eps) {
  ParallelFor(N, RowGrain(C), [&](size_t begin, size_t end) {
    for (size_t n = begin; n < end; ++n) {
      const float* xr = x + n * C;
      float* o = out + n * C;
      const float r = layer_math::RmsScale(Dot(xr, xr, C), C, eps);
      for (int c = 0; c < C; ++c) o[c] = w[c] * (xr[c] * r);
      rstd[n] = r;
    }
  });
}

void RmsNormBackward(float* dx, float* dw, const float* dout, const float* x,
                     const float* w, const float* rstd, int N, int C) {
  ParallelFor(N, RowGrain(C), [&](size_t begin, size_t end) {
    for (size_t n = begin; n < end; ++n) {
      const float* xr = x + n * C;
      const float* g = dout + n * C;
      float* d = dx + n * C;
      const float r = rstd[n];
      // sum_j g_j w_j x_j, lane by lane as Dot does.
      float acc[lane_reductions::kLanes] = {};
      int c = 0;
      for (; c + lane_reductions::kLanes <= C; c += lane_reductions::kLanes) {
        for (int j = 0; j < lane_reductions::kLanes; ++j) {
          acc[j] += g[c + j] * w[c + j] * xr[c + j];
        }
      }
      float gwx = 0;
      for (; c < C; ++c) gwx += g[c] * w[c] * xr[c];
      for (int j = 0; j < lane_reductions::kLanes; ++j) gwx += acc[j];
      const float k = r * r * gwx / C;
      for (int i = 0; i < C; ++i) {
        d[i] += layer_math::RmsNormInputGrad(r, k, w[i], g[i], xr[i]);
      }
    }
  });
  // Per column, every row in order.
  ParallelFor(C, 64, [&](size_t c0, size_t c1) {
    for (size_t c = c0; c < c1; ++c) dw[c] = 0;
    for (int n = 0; n < N; ++n) {
      const float* xr = x + static_cast<size_t>(n) * C;
      const float* g = dout + static_cast<size_t>(n) * C;
      const float r = rstd[n];
      for (size_t c = c0; c < c1; ++c) dw[c] += g[c] * (xr[c] * r);
    }
  });
}

void RopeTables(float* cos, float* sin, int T, int head_dim, double theta) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    // As torch: arange(0, hd, 2).float() / hd, theta ** that, 1 / that,
    // each in f32.
    const float exponent =
        static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float inv_freq = 1.0f / std::pow(static_cast<float>(theta), exponent);
    for (int t = 0; t < T; ++t) {
      const float angle = static_cast<float>(t) * inv_freq;
      cos[static_cast<size_t>(t) * half + i] =
          static_cast<float>(std::cos(static_cast<double>(angle)));
      sin[static_cast<size_t>(t) * half + i] =
          static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
}

void RopeForward(float* x, const float* cos, const float* sin, int N, int T,
                 int heads, int head_dim) {
  Rope(x, cos, sin, N, T, heads, head_dim, 1.0f);
}

void RopeBackward(float* dx, const float* cos, const float* sin, int N, int T,
                  int heads, int head_dim) {
  Rope(dx, cos, sin, N, T, heads, head_dim, -1.0f);
}

void SwiGluForward(float* h, const float* gate, const float* up, size_t n) {
  ParallelFor(n, kGrainElements, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      h[i] = layer_math::SwiGlu(gate[i], up[i]);
    }
  });
}

void SwiGluBackward(float* dgate, float* dup, const float* dh,
                    const float* gate, const float* up, size_t n) {
  ParallelFor(n, kGrainElements, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      float dg, du;
      layer_math::SwiGluGrad(dh[i], gate[i], up[i], &dg, &du);
      dgate[i] = dg;
      dup[i] = du;
    }
  });
}

void ExpandQkv(float* qkv, const float* q, const float* k, const float* v,
               int N, int NH, int KV, int head_dim) {
  const size_t hd = head_dim, qc = NH * hd, kc = KV * hd;
  const int group = NH / KV;
  ParallelFor(N, RowGrain(3 * qc), [&](size_t begin, size_t end) {
    for (size_t n = begin; n < end; ++n) {
      float* out = qkv + n * 3 * qc;
      std::memcpy(out, q + n * qc, qc * sizeof(float));
      for (int h = 0; h < NH; ++h) {
        const size_t from = n * kc + static_cast<size_t>(h / group) * hd;
        std::memcpy(out + qc + h * hd, k + from, hd * sizeof(float));
        std::memcpy(out + 2 * qc + h * hd, v + from, hd * sizeof(float));
      }
    }
  });
}

void ReduceQkvGrad(float* dq, float* dk, float* dv, const float* dqkv, int N,
                   int NH, int KV, int head_dim) {
  const size_t hd = head_dim, qc = NH * hd, kc = KV * hd;
  const int group = NH / KV;
  ParallelFor(N, RowGrain(3 * qc), [&](size_t begin, size_t end) {
    for (size_t n = begin; n < end; ++n) {
      const float* in = dqkv + n * 3 * qc;
      std::memcpy(dq + n * qc, in, qc * sizeof(float));
      for (int kv = 0; kv < KV; ++kv) {
        float* k = dk + n * kc + kv * hd;
        float* v = dv + n * kc + kv * hd;
        const size_t first = static_cast<size_t>(kv) * group * hd;
        std::memcpy(k, in + qc + first, hd * sizeof(float));
        std::memcpy(v, in + 2 * qc + first, hd * sizeof(float));
        for (int r = 1; r < group; ++r) {
          const size_t at = first + r * hd;
          for (size_t i = 0; i < hd; ++i) {
            k[i] += in[qc + at + i];
            v[i] += in[2 * qc + at + i];
          }
        }
      }
    }
  });
}

}  // namespace cpu_kernels
}  // namespace chunkzero
