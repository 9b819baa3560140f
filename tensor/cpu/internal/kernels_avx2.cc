// AVX2 + F16C + FMA kernels: the primitives of 8-float vectors, under the
// loops of vector_kernels.inc. Compiled for the baseline ISA like the rest
// of the build; only the functions marked CZ_ISA_TARGET use the extensions,
// and they run only when the CPU reports them (see
// tensor/cpu/cpu_features.h). Everything here has internal linkage so that
// no AVX2 code can be picked by the linker for a baseline caller.
#include "tensor/cpu/internal/kernel_table.h"

#if CHUNKZERO_KERNELS_X86

#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#define CZ_ISA_TARGET __attribute__((target("avx2,f16c,fma")))

namespace chunkzero {
namespace kernels_internal {
namespace {

struct Avx2 {
  using VF = __m256;
  using VI = __m256i;
  using VH = __m128i;
  using VD = __m256d;
  static constexpr size_t kLanes = 8;
  static constexpr size_t kDoubleLanes = 4;
  static constexpr int kCastUnroll = 1;

  CZ_ISA_TARGET static VF LoadF(const float* p) { return _mm256_loadu_ps(p); }
  CZ_ISA_TARGET static void StoreF(float* p, VF v) { _mm256_storeu_ps(p, v); }
  CZ_ISA_TARGET static VF Set1F(float a) { return _mm256_set1_ps(a); }
  CZ_ISA_TARGET static VF MulF(VF a, VF b) { return _mm256_mul_ps(a, b); }
  CZ_ISA_TARGET static VF FmaddF(VF a, VF x, VF y) {
    return _mm256_fmadd_ps(a, x, y);
  }

  CZ_ISA_TARGET static VI LoadFull(const void* p) {
    return _mm256_loadu_si256(static_cast<const __m256i*>(p));
  }
  template <bool kStream>
  CZ_ISA_TARGET static void StoreFull(void* p, VI v) {
    if constexpr (kStream) {
      _mm256_stream_si256(static_cast<__m256i*>(p), v);
    } else {
      _mm256_storeu_si256(static_cast<__m256i*>(p), v);
    }
  }
  CZ_ISA_TARGET static VH LoadHalf(const void* p) {
    return _mm_loadu_si128(static_cast<const __m128i*>(p));
  }
  CZ_ISA_TARGET static VI Bits(VF v) { return _mm256_castps_si256(v); }
  CZ_ISA_TARGET static VI AndI(VI a, VI b) { return _mm256_and_si256(a, b); }

  CZ_ISA_TARGET static VF WidenF16(VH h) { return _mm256_cvtph_ps(h); }
  // bf16 is the top half of an f32: widening is a shift.
  CZ_ISA_TARGET static VF WidenBF16(VH b) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
  }
  CZ_ISA_TARGET static VI NarrowF16Pair(VF lo, VF hi) {
    return _mm256_set_m128i(NarrowF16(hi), NarrowF16(lo));
  }
  CZ_ISA_TARGET static VI NarrowBF16Pair(VF lo, VF hi) {
    return Pack16(RoundToBF16(Bits(lo)), RoundToBF16(Bits(hi)));
  }

  template <typename L>
  CZ_ISA_TARGET static VI Splat(L x) {
    if constexpr (sizeof(L) == 4) {
      return _mm256_set1_epi32(static_cast<int>(x));
    } else {
      return _mm256_set1_epi16(static_cast<short>(x));
    }
  }
  template <typename L>
  CZ_ISA_TARGET static VI NoFlags() {
    return _mm256_setzero_si256();
  }
  // The lanes hold magnitudes (sign cleared), so the signed compare is the
  // unsigned one.
  template <typename L>
  CZ_ISA_TARGET static VI OrAbove(VI flags, VI bits, VI max) {
    if constexpr (sizeof(L) == 4) {
      return _mm256_or_si256(flags, _mm256_cmpgt_epi32(bits, max));
    } else {
      return _mm256_or_si256(flags, _mm256_cmpgt_epi16(bits, max));
    }
  }
  CZ_ISA_TARGET static bool Any(VI flags) {
    return !_mm256_testz_si256(flags, flags);
  }

  CZ_ISA_TARGET static VD ZeroD() { return _mm256_setzero_pd(); }
  CZ_ISA_TARGET static VD FmaddD(VD a, VD x, VD y) {
    return _mm256_fmadd_pd(a, x, y);
  }
  CZ_ISA_TARGET static void StoreD(double* p, VD v) { _mm256_storeu_pd(p, v); }
  // 16 elements as four vectors of 4 doubles (elements 0-3, 4-7, ...).
  CZ_ISA_TARGET static void Load16(const float* p, VD* v, F32) {
    for (int j = 0; j < 4; ++j) v[j] = _mm256_cvtps_pd(_mm_loadu_ps(p + 4 * j));
  }
  CZ_ISA_TARGET static void Load16(const uint16_t* p, VD* v, F16) {
    Split8(WidenF16(LoadHalf(p)), v);
    Split8(WidenF16(LoadHalf(p + 8)), v + 2);
  }
  CZ_ISA_TARGET static void Load16(const uint16_t* p, VD* v, BF16) {
    Split8(WidenBF16(LoadHalf(p)), v);
    Split8(WidenBF16(LoadHalf(p + 8)), v + 2);
  }

 private:
  CZ_ISA_TARGET static VH NarrowF16(VF v) {
    return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // 8 f32 bit patterns -> 8 bf16 in the low halves of the 32-bit lanes,
  // with FloatToBFloat16Bits' rounding (nearest even; NaN quieted, sign
  // kept).
  CZ_ISA_TARGET static VI RoundToBF16(VI x) {
    const __m256i abs = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
    const __m256i is_nan =
        _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
    const __m256i high = _mm256_srli_epi32(x, 16);
    const __m256i bias =
        _mm256_add_epi32(_mm256_and_si256(high, _mm256_set1_epi32(1)),
                         _mm256_set1_epi32(0x7fff));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, bias), 16);
    const __m256i quiet = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(rounded, quiet, is_nan);
  }
  // Two vectors of 8 32-bit lanes holding 16-bit values -> 16 x 16 bits, in
  // order.
  CZ_ISA_TARGET static VI Pack16(VI lo, VI hi) {
    return _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8);
  }
  CZ_ISA_TARGET static void Split8(VF f, VD* v) {
    v[0] = _mm256_cvtps_pd(_mm256_castps256_ps128(f));
    v[1] = _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1));
  }
};

#include "tensor/cpu/internal/vector_kernels.inc"

}  // namespace

const KernelTable& Avx2Kernels() {
  static const KernelTable table = MakeKernelTable<VectorLoops<Avx2>>();
  return table;
}

}  // namespace kernels_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_KERNELS_X86
