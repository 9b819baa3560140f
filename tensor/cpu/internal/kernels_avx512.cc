// AVX-512 (F, BW, VL) kernels, with F16C for 16 halves at a time: the
// primitives of 16-float vectors, under the loops of vector_kernels.inc.
// Like kernels_avx2.cc: only functions marked CZ_ISA_TARGET use the
// extensions, they run only when the CPU reports them, and everything has
// internal linkage.
#include "tensor/cpu/internal/kernel_table.h"

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
#include <type_traits>

#define CZ_ISA_TARGET \
  __attribute__((target("avx2,f16c,fma,avx512f,avx512bw,avx512vl")))

namespace chunkzero {
namespace kernels_internal {
namespace {

struct Avx512 {
  using VF = __m512;
  using VI = __m512i;
  using VH = __m256i;
  using VD = __m512d;
  static constexpr size_t kLanes = 16;
  static constexpr size_t kDoubleLanes = 8;
  static constexpr int kCastUnroll = 2;

  CZ_ISA_TARGET static VF LoadF(const float* p) { return _mm512_loadu_ps(p); }
  CZ_ISA_TARGET static void StoreF(float* p, VF v) { _mm512_storeu_ps(p, v); }
  CZ_ISA_TARGET static VF Set1F(float a) { return _mm512_set1_ps(a); }
  CZ_ISA_TARGET static VF MulF(VF a, VF b) { return _mm512_mul_ps(a, b); }
  CZ_ISA_TARGET static VF FmaddF(VF a, VF x, VF y) {
    return _mm512_fmadd_ps(a, x, y);
  }

  CZ_ISA_TARGET static VI LoadFull(const void* p) {
    return _mm512_loadu_si512(p);
  }
  template <bool kStream>
  CZ_ISA_TARGET static void StoreFull(void* p, VI v) {
    if constexpr (kStream) {
      _mm512_stream_si512(static_cast<__m512i*>(p), v);
    } else {
      _mm512_storeu_si512(p, v);
    }
  }
  CZ_ISA_TARGET static VH LoadHalf(const void* p) {
    return _mm256_loadu_si256(static_cast<const __m256i*>(p));
  }
  CZ_ISA_TARGET static VI Bits(VF v) { return _mm512_castps_si512(v); }
  CZ_ISA_TARGET static VI AndI(VI a, VI b) { return _mm512_and_si512(a, b); }

  CZ_ISA_TARGET static VF WidenF16(VH h) { return _mm512_cvtph_ps(h); }
  // bf16 is the top half of an f32: widening is a shift.
  CZ_ISA_TARGET static VF WidenBF16(VH b) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
  }
  CZ_ISA_TARGET static VI NarrowF16Pair(VF lo, VF hi) {
    return Concat(NarrowF16(lo), NarrowF16(hi));
  }
  CZ_ISA_TARGET static VI NarrowBF16Pair(VF lo, VF hi) {
    return Concat(NarrowBF16Bits(Bits(lo)), NarrowBF16Bits(Bits(hi)));
  }

  template <typename L>
  CZ_ISA_TARGET static VI Splat(L x) {
    if constexpr (sizeof(L) == 4) {
      return _mm512_set1_epi32(static_cast<int>(x));
    } else {
      return _mm512_set1_epi16(static_cast<short>(x));
    }
  }
  // One bit per lane.
  template <typename L>
  CZ_ISA_TARGET static auto NoFlags() {
    if constexpr (sizeof(L) == 4) {
      return __mmask16{0};
    } else {
      return __mmask32{0};
    }
  }
  template <typename L, typename Flags>
  CZ_ISA_TARGET static Flags OrAbove(Flags flags, VI bits, VI max) {
    if constexpr (sizeof(L) == 4) {
      return flags | _mm512_cmpgt_epu32_mask(bits, max);
    } else {
      return flags | _mm512_cmpgt_epu16_mask(bits, max);
    }
  }
  template <typename Flags>
  CZ_ISA_TARGET static bool Any(Flags flags) {
    return flags != 0;
  }

  CZ_ISA_TARGET static VD ZeroD() { return _mm512_setzero_pd(); }
  CZ_ISA_TARGET static VD FmaddD(VD a, VD x, VD y) {
    return _mm512_fmadd_pd(a, x, y);
  }
  CZ_ISA_TARGET static void StoreD(double* p, VD v) { _mm512_storeu_pd(p, v); }
  // 16 elements as two vectors of 8 doubles (elements 0-7, 8-15).
  CZ_ISA_TARGET static void Load16(const float* p, VD* v, F32) {
    v[0] = _mm512_cvtps_pd(_mm256_loadu_ps(p));
    v[1] = _mm512_cvtps_pd(_mm256_loadu_ps(p + 8));
  }
  CZ_ISA_TARGET static void Load16(const uint16_t* p, VD* v, F16) {
    v[0] = _mm512_cvtps_pd(_mm256_cvtph_ps(Load128(p)));
    v[1] = _mm512_cvtps_pd(_mm256_cvtph_ps(Load128(p + 8)));
  }
  CZ_ISA_TARGET static void Load16(const uint16_t* p, VD* v, BF16) {
    const __m512 f = WidenBF16(LoadHalf(p));
    v[0] = _mm512_cvtps_pd(_mm512_castps512_ps256(f));
    v[1] = _mm512_cvtps_pd(
        _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f), 1)));
  }

 private:
  CZ_ISA_TARGET static __m128i Load128(const void* p) {
    return _mm_loadu_si128(static_cast<const __m128i*>(p));
  }
  CZ_ISA_TARGET static VH NarrowF16(VF v) {
    return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // 16 f32 bit patterns -> 16 bf16, rounded like FloatToBFloat16Bits
  // (nearest even; NaN quieted, sign kept).
  CZ_ISA_TARGET static VH NarrowBF16Bits(VI x) {
    const __m512i abs = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
    const __mmask16 is_nan =
        _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000));
    const __m512i high = _mm512_srli_epi32(x, 16);
    const __m512i bias =
        _mm512_add_epi32(_mm512_and_si512(high, _mm512_set1_epi32(1)),
                         _mm512_set1_epi32(0x7fff));
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(x, bias), 16);
    const __m512i quiet = _mm512_or_si512(high, _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(
        _mm512_mask_blend_epi32(is_nan, rounded, quiet));
  }
  CZ_ISA_TARGET static VI Concat(VH lo, VH hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  }
};

#include "tensor/cpu/internal/vector_kernels.inc"

}  // namespace

const KernelTable& Avx512Kernels() {
  static const KernelTable table = MakeKernelTable<VectorLoops<Avx512>>();
  return table;
}

}  // namespace kernels_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_KERNELS_X86
