// AVX-512 (F, BW, VL) kernels, with F16C for 16 halves at a time. Like
// kernels_avx2.cc: only functions marked CZ_AVX512 use the extensions, they
// run only when the CPU reports them, and everything has internal linkage.
#include "tensor/internal/kernel_table.h"

#if CHUNKZERO_KERNELS_X86

// GCC 12 warns that the _mm512_undefined_*() pass-through operands inside
// its own intrinsics (_mm512_cvtps_pd, _mm512_slli_epi32, ...) are (or may
// be) used uninitialized; they are never read. Silence that, only here.
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // Clang has no such warning (and no false alarm).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>

#define CZ_AVX512 \
  __attribute__((target("avx2,f16c,fma,avx512f,avx512bw,avx512vl")))

namespace chunkzero {
namespace kernels_internal {
namespace {

constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

// ---- Building blocks ----

template <bool kStream>
CZ_AVX512 inline void Store512(void* p, __m512i v) {
  if constexpr (kStream) {
    _mm512_stream_si512(static_cast<__m512i*>(p), v);
  } else {
    _mm512_storeu_si512(p, v);
  }
}

CZ_AVX512 inline __m512i Load512(const void* p) {
  return _mm512_loadu_si512(p);
}
CZ_AVX512 inline __m256i Load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}
CZ_AVX512 inline __m128i Load128(const void* p) {
  return _mm_loadu_si128(static_cast<const __m128i*>(p));
}

// 16 f32 bit patterns -> 16 bf16, rounded like FloatToBFloat16Bits.
CZ_AVX512 inline __m256i NarrowBF16Bits(__m512i x) {
  const __m512i abs = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 is_nan =
      _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000));
  const __m512i high = _mm512_srli_epi32(x, 16);
  const __m512i bias = _mm512_add_epi32(
      _mm512_and_si512(high, _mm512_set1_epi32(1)), _mm512_set1_epi32(0x7fff));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(x, bias), 16);
  const __m512i quiet = _mm512_or_si512(high, _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(is_nan, rounded, quiet));
}
CZ_AVX512 inline __m256i NarrowBF16(__m512 v) {
  return NarrowBF16Bits(_mm512_castps_si512(v));
}

// 16 bf16 -> 16 f32.
CZ_AVX512 inline __m512 WidenBF16(__m256i b) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
}

CZ_AVX512 inline __m256i NarrowF16(__m512 v) {
  return _mm512_cvtps_ph(v, kRound);
}

CZ_AVX512 inline __m512i Concat(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// ---- Casts: one 64-byte cache line of output per step ----

struct F32ToF16 {
  using In = float;
  using Out = uint16_t;
  using ScalarTo = F16;
  using ScalarFrom = F32;
  static constexpr size_t kStep = 32;
  template <bool kStream>
  CZ_AVX512 static void Step(Out* out, const In* in) {
    Store512<kStream>(out, Concat(NarrowF16(_mm512_loadu_ps(in)),
                                  NarrowF16(_mm512_loadu_ps(in + 16))));
  }
};

struct F16ToF32 {
  using In = uint16_t;
  using Out = float;
  using ScalarTo = F32;
  using ScalarFrom = F16;
  static constexpr size_t kStep = 16;
  template <bool kStream>
  CZ_AVX512 static void Step(Out* out, const In* in) {
    Store512<kStream>(out, _mm512_castps_si512(_mm512_cvtph_ps(Load256(in))));
  }
};

struct F32ToBF16 {
  using In = float;
  using Out = uint16_t;
  using ScalarTo = BF16;
  using ScalarFrom = F32;
  static constexpr size_t kStep = 32;
  template <bool kStream>
  CZ_AVX512 static void Step(Out* out, const In* in) {
    Store512<kStream>(out, Concat(NarrowBF16Bits(Load512(in)),
                                  NarrowBF16Bits(Load512(in + 16))));
  }
};

struct BF16ToF32 {
  using In = uint16_t;
  using Out = float;
  using ScalarTo = F32;
  using ScalarFrom = BF16;
  static constexpr size_t kStep = 16;
  template <bool kStream>
  CZ_AVX512 static void Step(Out* out, const In* in) {
    Store512<kStream>(out, _mm512_castps_si512(WidenBF16(Load256(in))));
  }
};

// Runs Op over [0, n), two steps per iteration. With `stream`, a scalar head
// first aligns `out` to 64 bytes so that the steps can use non-temporal
// stores.
template <typename Op>
CZ_AVX512 void Cast(typename Op::Out* out, const typename Op::In* in, size_t n,
                    bool stream) {
  using Out = typename Op::Out;
  size_t i = 0;
  const uintptr_t address = reinterpret_cast<uintptr_t>(out);
  if (stream && address % sizeof(Out) == 0) {
    size_t head = ((64 - address % 64) % 64) / sizeof(Out);
    if (head > n) head = n;
    ScalarCast<typename Op::ScalarTo, typename Op::ScalarFrom>(out, in, head);
    for (i = head; i + 2 * Op::kStep <= n; i += 2 * Op::kStep) {
      Op::template Step<true>(out + i, in + i);
      Op::template Step<true>(out + i + Op::kStep, in + i + Op::kStep);
    }
    for (; i + Op::kStep <= n; i += Op::kStep) {
      Op::template Step<true>(out + i, in + i);
    }
    _mm_sfence();
  } else {
    for (; i + 2 * Op::kStep <= n; i += 2 * Op::kStep) {
      Op::template Step<false>(out + i, in + i);
      Op::template Step<false>(out + i + Op::kStep, in + i + Op::kStep);
    }
    for (; i + Op::kStep <= n; i += Op::kStep) {
      Op::template Step<false>(out + i, in + i);
    }
  }
  ScalarCast<typename Op::ScalarTo, typename Op::ScalarFrom>(out + i, in + i,
                                                             n - i);
}

// ---- Scale and Axpy: 32 elements per step ----

CZ_AVX512 void ScaleF32(float* x, float a, size_t n) {
  const __m512 va = _mm512_set1_ps(a);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), va));
    _mm512_storeu_ps(x + i + 16,
                     _mm512_mul_ps(_mm512_loadu_ps(x + i + 16), va));
  }
  ScalarScale<F32>(x + i, a, n - i);
}

CZ_AVX512 void ScaleF16(uint16_t* x, float a, size_t n) {
  const __m512 va = _mm512_set1_ps(a);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i lo =
        NarrowF16(_mm512_mul_ps(_mm512_cvtph_ps(Load256(x + i)), va));
    const __m256i hi =
        NarrowF16(_mm512_mul_ps(_mm512_cvtph_ps(Load256(x + i + 16)), va));
    Store512<false>(x + i, Concat(lo, hi));
  }
  ScalarScale<F16>(x + i, a, n - i);
}

CZ_AVX512 void ScaleBF16(uint16_t* x, float a, size_t n) {
  const __m512 va = _mm512_set1_ps(a);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i lo = NarrowBF16(_mm512_mul_ps(WidenBF16(Load256(x + i)), va));
    const __m256i hi =
        NarrowBF16(_mm512_mul_ps(WidenBF16(Load256(x + i + 16)), va));
    Store512<false>(x + i, Concat(lo, hi));
  }
  ScalarScale<BF16>(x + i, a, n - i);
}

CZ_AVX512 void AxpyF32(float* y, float a, const float* x, size_t n) {
  const __m512 va = _mm512_set1_ps(a);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i),
                                            _mm512_loadu_ps(y + i)));
    _mm512_storeu_ps(y + i + 16,
                     _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i + 16),
                                     _mm512_loadu_ps(y + i + 16)));
  }
  ScalarAxpy<F32>(y + i, a, x + i, n - i);
}

CZ_AVX512 void AxpyF16(uint16_t* y, float a, const uint16_t* x, size_t n) {
  const __m512 va = _mm512_set1_ps(a);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i lo = NarrowF16(_mm512_fmadd_ps(
        va, _mm512_cvtph_ps(Load256(x + i)), _mm512_cvtph_ps(Load256(y + i))));
    const __m256i hi =
        NarrowF16(_mm512_fmadd_ps(va, _mm512_cvtph_ps(Load256(x + i + 16)),
                                  _mm512_cvtph_ps(Load256(y + i + 16))));
    Store512<false>(y + i, Concat(lo, hi));
  }
  ScalarAxpy<F16>(y + i, a, x + i, n - i);
}

CZ_AVX512 void AxpyBF16(uint16_t* y, float a, const uint16_t* x, size_t n) {
  const __m512 va = _mm512_set1_ps(a);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i lo = NarrowBF16(_mm512_fmadd_ps(va, WidenBF16(Load256(x + i)),
                                                  WidenBF16(Load256(y + i))));
    const __m256i hi = NarrowBF16(_mm512_fmadd_ps(
        va, WidenBF16(Load256(x + i + 16)), WidenBF16(Load256(y + i + 16))));
    Store512<false>(y + i, Concat(lo, hi));
  }
  ScalarAxpy<BF16>(y + i, a, x + i, n - i);
}

// ---- HasInfOrNan: 256 bytes per step ----

CZ_AVX512 bool HasInfOrNanF32(const float* x, size_t n) {
  const __m512i mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i max_finite = _mm512_set1_epi32(0x7f7fffff);
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __mmask16 any = 0;
    for (int v = 0; v < 4; ++v) {
      const __m512i bits = _mm512_and_si512(Load512(x + i + 16 * v), mask);
      any |= _mm512_cmpgt_epu32_mask(bits, max_finite);
    }
    if (any != 0) return true;
  }
  return ScalarHasInfOrNan<F32>(x + i, n - i);
}

template <typename D, int kMaxFinite>
CZ_AVX512 bool HasInfOrNan16(const uint16_t* x, size_t n) {
  const __m512i mask = _mm512_set1_epi16(0x7fff);
  const __m512i max_finite = _mm512_set1_epi16(kMaxFinite);
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    __mmask32 any = 0;
    for (int v = 0; v < 4; ++v) {
      const __m512i bits = _mm512_and_si512(Load512(x + i + 32 * v), mask);
      any |= _mm512_cmpgt_epu16_mask(bits, max_finite);
    }
    if (any != 0) return true;
  }
  return ScalarHasInfOrNan<D>(x + i, n - i);
}

// ---- SumOfSquares: lanes 0-7 in acc[0], 8-15 in acc[1] ----

CZ_AVX512 inline void Load16(const float* p, __m512d* v, F32) {
  v[0] = _mm512_cvtps_pd(_mm256_loadu_ps(p));
  v[1] = _mm512_cvtps_pd(_mm256_loadu_ps(p + 8));
}
CZ_AVX512 inline void Load16(const uint16_t* p, __m512d* v, F16) {
  v[0] = _mm512_cvtps_pd(_mm256_cvtph_ps(Load128(p)));
  v[1] = _mm512_cvtps_pd(_mm256_cvtph_ps(Load128(p + 8)));
}
CZ_AVX512 inline void Load16(const uint16_t* p, __m512d* v, BF16) {
  const __m512 f = WidenBF16(Load256(p));
  v[0] = _mm512_cvtps_pd(_mm512_castps512_ps256(f));
  v[1] = _mm512_cvtps_pd(
      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f), 1)));
}

template <typename D>
CZ_AVX512 double BlockSumSquares(const typename D::T* x, size_t n) {
  __m512d acc[2] = {_mm512_setzero_pd(), _mm512_setzero_pd()};
  size_t k = 0;
  for (; k + kSumLanes <= n; k += kSumLanes) {
    __m512d v[2];
    Load16(x + k, v, D());
    acc[0] = _mm512_fmadd_pd(v[0], v[0], acc[0]);
    acc[1] = _mm512_fmadd_pd(v[1], v[1], acc[1]);
  }
  double lanes[kSumLanes];
  _mm512_storeu_pd(lanes, acc[0]);
  _mm512_storeu_pd(lanes + 8, acc[1]);
  ScalarAddSquares<D>(lanes, x + k, n - k);
  return CombineLanes(lanes);
}

}  // namespace

const KernelTable& Avx512Kernels() {
  static const KernelTable table = [] {
    KernelTable t;
    t.cast_f32_to_f16 = &Cast<F32ToF16>;
    t.cast_f16_to_f32 = &Cast<F16ToF32>;
    t.cast_f32_to_bf16 = &Cast<F32ToBF16>;
    t.cast_bf16_to_f32 = &Cast<BF16ToF32>;
    t.scale_f32 = &ScaleF32;
    t.scale_f16 = &ScaleF16;
    t.scale_bf16 = &ScaleBF16;
    t.axpy_f32 = &AxpyF32;
    t.axpy_f16 = &AxpyF16;
    t.axpy_bf16 = &AxpyBF16;
    t.has_inf_or_nan_f32 = &HasInfOrNanF32;
    t.has_inf_or_nan_f16 = &HasInfOrNan16<F16, 0x7bff>;
    t.has_inf_or_nan_bf16 = &HasInfOrNan16<BF16, 0x7f7f>;
    t.block_sum_squares_f32 = &BlockSumSquares<F32>;
    t.block_sum_squares_f16 = &BlockSumSquares<F16>;
    t.block_sum_squares_bf16 = &BlockSumSquares<BF16>;
    return t;
  }();
  return table;
}

}  // namespace kernels_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_KERNELS_X86
