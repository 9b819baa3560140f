// AVX2 + F16C fused optimizer kernels (8 lanes). Compiled for the baseline
// ISA like the rest of the build; only the functions marked CZ_ISA_TARGET
// use the extensions, they run only when the CPU reports them (see
// tensor/cpu/cpu_features.h), and everything has internal linkage so that no
// AVX2 code can be picked by the linker for a baseline caller.
#include "optim/internal/fused_kernel_table.h"

#if CHUNKZERO_KERNELS_X86

#include <immintrin.h>

#include <cstdint>

#define CZ_ISA_TARGET __attribute__((target("avx2,f16c,fma")))

namespace chunkzero {
namespace optim_internal {
namespace {

struct Avx2 {
  using V = __m256;
  static constexpr size_t kLanes = 8;

  CZ_ISA_TARGET static V Set1(float x) { return _mm256_set1_ps(x); }
  CZ_ISA_TARGET static V Load(const float* p) { return _mm256_loadu_ps(p); }
  CZ_ISA_TARGET static void Store(float* p, V x) { _mm256_storeu_ps(p, x); }
  CZ_ISA_TARGET static V Sqrt(V x) { return _mm256_sqrt_ps(x); }

  CZ_ISA_TARGET static V LoadGrad(const float* p, F32) { return Load(p); }
  CZ_ISA_TARGET static V LoadGrad(const uint16_t* p, F16) {
    return _mm256_cvtph_ps(Load128(p));
  }
  // bf16 is the top half of an f32: widening is a shift.
  CZ_ISA_TARGET static V LoadGrad(const uint16_t* p, BF16) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(Load128(p)), 16));
  }

  CZ_ISA_TARGET static void StoreOut(float* p, V x, F32) { Store(p, x); }
  CZ_ISA_TARGET static void StoreOut(uint16_t* p, V x, F16) {
    Store128(p,
             _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  // FloatToBFloat16Bits per lane: NaN -> quiet (high half | 0x40); others
  // round to nearest even by adding 0x7fff + (bit 16) before the shift.
  CZ_ISA_TARGET static void StoreOut(uint16_t* p, V x, BF16) {
    const __m256i bits = _mm256_castps_si256(x);
    const __m256i high = _mm256_srli_epi32(bits, 16);
    const __m256i odd = _mm256_and_si256(high, _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)),
                         odd),
        16);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    const __m256i quiet = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
    const __m256i lanes = _mm256_blendv_epi8(rounded, quiet, nan);
    // Values fit in 16 bits, so the unsigned saturating pack is exact; it
    // packs the low and high 128-bit halves in order.
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(lanes),
                                            _mm256_extracti128_si256(lanes, 1));
    Store128(p, packed);
  }
  CZ_ISA_TARGET static void StoreOut(uint16_t*, V, NoOut) {}

 private:
  CZ_ISA_TARGET static __m128i Load128(const uint16_t* p) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  }
  CZ_ISA_TARGET static void Store128(uint16_t* p, __m128i x) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), x);
  }
};

#include "optim/internal/fused_vector_loops.inc"

}  // namespace

const FusedKernelTable& Avx2FusedKernels() {
  static const FusedKernelTable table =
      MakeFusedKernelTable<VectorLoops<Avx2>>();
  return table;
}

}  // namespace optim_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_KERNELS_X86
