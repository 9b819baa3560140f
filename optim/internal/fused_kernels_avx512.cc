// AVX-512 (F, BW, VL) fused optimizer kernels (16 lanes). Like
// fused_kernels_avx2.cc: only functions marked CZ_ISA_TARGET use the
// extensions, they run only when the CPU reports them, and everything has
// internal linkage.
#include "optim/internal/fused_kernel_table.h"

#if CHUNKZERO_KERNELS_X86

// GCC 12 warns that the _mm512_undefined_*() pass-through operands inside
// its own intrinsics are (or may be) used uninitialized; they are never
// read. Silence that, only here (as tensor/cpu/internal/kernels_avx512.cc
// does).
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // Clang has no such warning (and no false alarm).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>

#define CZ_ISA_TARGET \
  __attribute__((target("avx2,f16c,fma,avx512f,avx512bw,avx512vl")))

namespace chunkzero {
namespace optim_internal {
namespace {

struct Avx512 {
  using V = __m512;
  static constexpr size_t kLanes = 16;

  CZ_ISA_TARGET static V Set1(float x) { return _mm512_set1_ps(x); }
  CZ_ISA_TARGET static V Load(const float* p) { return _mm512_loadu_ps(p); }
  CZ_ISA_TARGET static void Store(float* p, V x) { _mm512_storeu_ps(p, x); }
  CZ_ISA_TARGET static V Sqrt(V x) { return _mm512_sqrt_ps(x); }

  CZ_ISA_TARGET static V LoadGrad(const float* p, F32) { return Load(p); }
  CZ_ISA_TARGET static V LoadGrad(const uint16_t* p, F16) {
    return _mm512_cvtph_ps(Load256(p));
  }
  // bf16 is the top half of an f32: widening is a shift.
  CZ_ISA_TARGET static V LoadGrad(const uint16_t* p, BF16) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(Load256(p)), 16));
  }

  CZ_ISA_TARGET static void StoreOut(float* p, V x, F32) { Store(p, x); }
  CZ_ISA_TARGET static void StoreOut(uint16_t* p, V x, F16) {
    Store256(p,
             _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  // FloatToBFloat16Bits per lane: NaN lanes (masked) become the quiet high
  // half; the others round to nearest even by adding 0x7fff + (bit 16).
  CZ_ISA_TARGET static void StoreOut(uint16_t* p, V x, BF16) {
    const __m512i bits = _mm512_castps_si512(x);
    const __m512i high = _mm512_srli_epi32(bits, 16);
    const __m512i odd = _mm512_and_si512(high, _mm512_set1_epi32(1));
    __m512i lanes = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)),
                         odd),
        16);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    lanes = _mm512_mask_or_epi32(lanes, nan, high, _mm512_set1_epi32(0x40));
    Store256(p, _mm512_cvtepi32_epi16(lanes));
  }
  CZ_ISA_TARGET static void StoreOut(uint16_t*, V, NoOut) {}

 private:
  CZ_ISA_TARGET static __m256i Load256(const uint16_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  CZ_ISA_TARGET static void Store256(uint16_t* p, __m256i x) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), x);
  }
};

#include "optim/internal/fused_vector_loops.inc"

}  // namespace

const FusedKernelTable& Avx512FusedKernels() {
  static const FusedKernelTable table =
      MakeFusedKernelTable<VectorLoops<Avx512>>();
  return table;
}

}  // namespace optim_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_KERNELS_X86
