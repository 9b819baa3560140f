// AVX2 + F16C + FMA kernels. Compiled for the baseline ISA like the rest of
// the build; only the functions marked CZ_AVX2 use the extensions, and they
// run only when the CPU reports them (see tensor/cpu_features.h). Everything
// here has internal linkage so that no AVX2 code can be picked by the linker
// for a baseline caller.
#include "tensor/internal/kernel_table.h"

#if CHUNKZERO_KERNELS_X86

#include <immintrin.h>

#include <cstdint>

#define CZ_AVX2 __attribute__((target("avx2,f16c,fma")))

namespace chunkzero {
namespace kernels_internal {
namespace {

constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

// ---- Building blocks ----

template <bool kStream>
CZ_AVX2 inline void Store256(void* p, __m256i v) {
  if constexpr (kStream) {
    _mm256_stream_si256(static_cast<__m256i*>(p), v);
  } else {
    _mm256_storeu_si256(static_cast<__m256i*>(p), v);
  }
}

CZ_AVX2 inline __m256i Load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}
CZ_AVX2 inline __m128i Load128(const void* p) {
  return _mm_loadu_si128(static_cast<const __m128i*>(p));
}

// 8 f32 bit patterns -> 8 bf16 in the low halves of the 32-bit lanes, with
// FloatToBFloat16Bits' rounding (nearest even; NaN quieted, sign kept).
CZ_AVX2 inline __m256i RoundToBF16(__m256i x) {
  const __m256i abs = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
  const __m256i is_nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
  const __m256i high = _mm256_srli_epi32(x, 16);
  const __m256i bias = _mm256_add_epi32(
      _mm256_and_si256(high, _mm256_set1_epi32(1)), _mm256_set1_epi32(0x7fff));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, bias), 16);
  const __m256i quiet = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quiet, is_nan);
}

// Two vectors of 8 32-bit lanes holding 16-bit values -> 16 x 16 bits, in
// order.
CZ_AVX2 inline __m256i Pack16(__m256i lo, __m256i hi) {
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8);
}

// 8 bf16 -> 8 f32.
CZ_AVX2 inline __m256 WidenBF16(__m128i b) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
}

CZ_AVX2 inline __m128i NarrowF16(__m256 v) {
  return _mm256_cvtps_ph(v, kRound);
}

// 16 f32 -> 16 bf16.
CZ_AVX2 inline __m256i NarrowBF16(__m256 lo, __m256 hi) {
  return Pack16(RoundToBF16(_mm256_castps_si256(lo)),
                RoundToBF16(_mm256_castps_si256(hi)));
}

// ---- Casts: one 64-byte cache line of output per step ----

struct F32ToF16 {
  using In = float;
  using Out = uint16_t;
  using ScalarTo = F16;
  using ScalarFrom = F32;
  static constexpr size_t kStep = 32;
  template <bool kStream>
  CZ_AVX2 static void Step(Out* out, const In* in) {
    for (int h = 0; h < 2; ++h) {
      const __m128i lo = NarrowF16(_mm256_loadu_ps(in + 16 * h));
      const __m128i hi = NarrowF16(_mm256_loadu_ps(in + 16 * h + 8));
      Store256<kStream>(out + 16 * h, _mm256_set_m128i(hi, lo));
    }
  }
};

struct F16ToF32 {
  using In = uint16_t;
  using Out = float;
  using ScalarTo = F32;
  using ScalarFrom = F16;
  static constexpr size_t kStep = 16;
  template <bool kStream>
  CZ_AVX2 static void Step(Out* out, const In* in) {
    for (int h = 0; h < 2; ++h) {
      const __m256 v = _mm256_cvtph_ps(Load128(in + 8 * h));
      Store256<kStream>(out + 8 * h, _mm256_castps_si256(v));
    }
  }
};

struct F32ToBF16 {
  using In = float;
  using Out = uint16_t;
  using ScalarTo = BF16;
  using ScalarFrom = F32;
  static constexpr size_t kStep = 32;
  template <bool kStream>
  CZ_AVX2 static void Step(Out* out, const In* in) {
    for (int h = 0; h < 2; ++h) {
      Store256<kStream>(out + 16 * h,
                        Pack16(RoundToBF16(Load256(in + 16 * h)),
                               RoundToBF16(Load256(in + 16 * h + 8))));
    }
  }
};

struct BF16ToF32 {
  using In = uint16_t;
  using Out = float;
  using ScalarTo = F32;
  using ScalarFrom = BF16;
  static constexpr size_t kStep = 16;
  template <bool kStream>
  CZ_AVX2 static void Step(Out* out, const In* in) {
    for (int h = 0; h < 2; ++h) {
      Store256<kStream>(out + 8 * h,
                        _mm256_castps_si256(WidenBF16(Load128(in + 8 * h))));
    }
  }
};

// Runs Op over [0, n). With `stream`, a scalar head first aligns `out` to 64
// bytes so that the vector steps can use non-temporal stores.
template <typename Op>
CZ_AVX2 void Cast(typename Op::Out* out, const typename Op::In* in, size_t n,
                  bool stream) {
  using Out = typename Op::Out;
  size_t i = 0;
  const uintptr_t address = reinterpret_cast<uintptr_t>(out);
  if (stream && address % sizeof(Out) == 0) {
    size_t head = ((64 - address % 64) % 64) / sizeof(Out);
    if (head > n) head = n;
    ScalarCast<typename Op::ScalarTo, typename Op::ScalarFrom>(out, in, head);
    for (i = head; i + Op::kStep <= n; i += Op::kStep) {
      Op::template Step<true>(out + i, in + i);
    }
    _mm_sfence();
  } else {
    for (; i + Op::kStep <= n; i += Op::kStep) {
      Op::template Step<false>(out + i, in + i);
    }
  }
  ScalarCast<typename Op::ScalarTo, typename Op::ScalarFrom>(out + i, in + i,
                                                             n - i);
}

// ---- Scale and Axpy: 16 elements per step ----

CZ_AVX2 void ScaleF32(float* x, float a, size_t n) {
  const __m256 va = _mm256_set1_ps(a);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), va));
    _mm256_storeu_ps(x + i + 8, _mm256_mul_ps(_mm256_loadu_ps(x + i + 8), va));
  }
  ScalarScale<F32>(x + i, a, n - i);
}

CZ_AVX2 void ScaleF16(uint16_t* x, float a, size_t n) {
  const __m256 va = _mm256_set1_ps(a);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i lo =
        NarrowF16(_mm256_mul_ps(_mm256_cvtph_ps(Load128(x + i)), va));
    const __m128i hi =
        NarrowF16(_mm256_mul_ps(_mm256_cvtph_ps(Load128(x + i + 8)), va));
    Store256<false>(x + i, _mm256_set_m128i(hi, lo));
  }
  ScalarScale<F16>(x + i, a, n - i);
}

CZ_AVX2 void ScaleBF16(uint16_t* x, float a, size_t n) {
  const __m256 va = _mm256_set1_ps(a);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 lo = _mm256_mul_ps(WidenBF16(Load128(x + i)), va);
    const __m256 hi = _mm256_mul_ps(WidenBF16(Load128(x + i + 8)), va);
    Store256<false>(x + i, NarrowBF16(lo, hi));
  }
  ScalarScale<BF16>(x + i, a, n - i);
}

CZ_AVX2 void AxpyF32(float* y, float a, const float* x, size_t n) {
  const __m256 va = _mm256_set1_ps(a);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i),
                                            _mm256_loadu_ps(y + i)));
    _mm256_storeu_ps(y + i + 8, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i + 8),
                                                _mm256_loadu_ps(y + i + 8)));
  }
  ScalarAxpy<F32>(y + i, a, x + i, n - i);
}

CZ_AVX2 void AxpyF16(uint16_t* y, float a, const uint16_t* x, size_t n) {
  const __m256 va = _mm256_set1_ps(a);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i lo = NarrowF16(_mm256_fmadd_ps(
        va, _mm256_cvtph_ps(Load128(x + i)), _mm256_cvtph_ps(Load128(y + i))));
    const __m128i hi =
        NarrowF16(_mm256_fmadd_ps(va, _mm256_cvtph_ps(Load128(x + i + 8)),
                                  _mm256_cvtph_ps(Load128(y + i + 8))));
    Store256<false>(y + i, _mm256_set_m128i(hi, lo));
  }
  ScalarAxpy<F16>(y + i, a, x + i, n - i);
}

CZ_AVX2 void AxpyBF16(uint16_t* y, float a, const uint16_t* x, size_t n) {
  const __m256 va = _mm256_set1_ps(a);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 lo = _mm256_fmadd_ps(va, WidenBF16(Load128(x + i)),
                                      WidenBF16(Load128(y + i)));
    const __m256 hi = _mm256_fmadd_ps(va, WidenBF16(Load128(x + i + 8)),
                                      WidenBF16(Load128(y + i + 8)));
    Store256<false>(y + i, NarrowBF16(lo, hi));
  }
  ScalarAxpy<BF16>(y + i, a, x + i, n - i);
}

// ---- HasInfOrNan: 128 bytes per step ----

CZ_AVX2 bool HasInfOrNanF32(const float* x, size_t n) {
  const __m256i mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i max_finite = _mm256_set1_epi32(0x7f7fffff);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i any = _mm256_setzero_si256();
    for (int v = 0; v < 4; ++v) {
      const __m256i bits = _mm256_and_si256(Load256(x + i + 8 * v), mask);
      any = _mm256_or_si256(any, _mm256_cmpgt_epi32(bits, max_finite));
    }
    if (!_mm256_testz_si256(any, any)) return true;
  }
  return ScalarHasInfOrNan<F32>(x + i, n - i);
}

template <typename D, int kMaxFinite>
CZ_AVX2 bool HasInfOrNan16(const uint16_t* x, size_t n) {
  const __m256i mask = _mm256_set1_epi16(0x7fff);
  const __m256i max_finite = _mm256_set1_epi16(kMaxFinite);
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m256i any = _mm256_setzero_si256();
    for (int v = 0; v < 4; ++v) {
      const __m256i bits = _mm256_and_si256(Load256(x + i + 16 * v), mask);
      any = _mm256_or_si256(any, _mm256_cmpgt_epi16(bits, max_finite));
    }
    if (!_mm256_testz_si256(any, any)) return true;
  }
  return ScalarHasInfOrNan<D>(x + i, n - i);
}

// ---- SumOfSquares: lanes 0-3, 4-7, 8-11, 12-15 in acc[0..3] ----

// Loads 16 elements as four vectors of 4 doubles (elements 0-3, 4-7, ...).
CZ_AVX2 inline void Load16(const float* p, __m256d* v) {
  for (int j = 0; j < 4; ++j) v[j] = _mm256_cvtps_pd(_mm_loadu_ps(p + 4 * j));
}
CZ_AVX2 inline void Split8(__m256 f, __m256d* v) {
  v[0] = _mm256_cvtps_pd(_mm256_castps256_ps128(f));
  v[1] = _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1));
}
CZ_AVX2 inline void Load16F16(const uint16_t* p, __m256d* v) {
  Split8(_mm256_cvtph_ps(Load128(p)), v);
  Split8(_mm256_cvtph_ps(Load128(p + 8)), v + 2);
}
CZ_AVX2 inline void Load16BF16(const uint16_t* p, __m256d* v) {
  Split8(WidenBF16(Load128(p)), v);
  Split8(WidenBF16(Load128(p + 8)), v + 2);
}
CZ_AVX2 inline void Load16(const uint16_t* p, __m256d* v, F16) {
  Load16F16(p, v);
}
CZ_AVX2 inline void Load16(const uint16_t* p, __m256d* v, BF16) {
  Load16BF16(p, v);
}
CZ_AVX2 inline void Load16(const float* p, __m256d* v, F32) { Load16(p, v); }

template <typename D>
CZ_AVX2 double BlockSumSquares(const typename D::T* x, size_t n) {
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(),
                    _mm256_setzero_pd(), _mm256_setzero_pd()};
  size_t k = 0;
  for (; k + kSumLanes <= n; k += kSumLanes) {
    __m256d v[4];
    Load16(x + k, v, D());
    for (int j = 0; j < 4; ++j) acc[j] = _mm256_fmadd_pd(v[j], v[j], acc[j]);
  }
  double lanes[kSumLanes];
  for (int j = 0; j < 4; ++j) _mm256_storeu_pd(lanes + 4 * j, acc[j]);
  ScalarAddSquares<D>(lanes, x + k, n - k);
  return CombineLanes(lanes);
}

}  // namespace

const KernelTable& Avx2Kernels() {
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
