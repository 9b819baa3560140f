// Per-ISA, single-threaded kernel implementations and the scalar helpers
// that define their exact results. Private to tensor/cpu/internal.
//
//   const KernelTable& k = GetKernelTable(KernelIsa::kAvx2);
//   k.cast_f32_to_f16(out, in, n, /*stream=*/false);
//
// Every table computes bit-identical results (NaN payloads aside, see the
// public headers). The vector code handles whole vectors and hands heads and
// tails to the scalar helpers below, so the scalar code is both the fallback
// and the definition.
//
// One scheme for every ISA (the optimizer's kernels, optim/internal, use it
// too): a table is MakeKernelTable<Loops>() over a struct of typed loops.
// The scalar loops are plain C++ (kernels_scalar.cc). The vector loops are
// written once, in vector_kernels.inc, over the primitives of an ISA struct
// (a few intrinsics each); kernels_<isa>.cc defines CZ_ISA_TARGET and its
// ISA struct, then includes the loops. Every file is compiled for the
// baseline ISA; only functions marked CZ_ISA_TARGET use the extensions.
#ifndef CHUNKZERO_TENSOR_CPU_INTERNAL_KERNEL_TABLE_H_
#define CHUNKZERO_TENSOR_CPU_INTERNAL_KERNEL_TABLE_H_

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "tensor/cpu/cpu_features.h"
#include "tensor/elementwise_math.h"
#include "tensor/half.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define CHUNKZERO_KERNELS_X86 1
#else
#define CHUNKZERO_KERNELS_X86 0
#endif

namespace chunkzero {
namespace kernels_internal {

// SumOfSquares order: tensor/elementwise_math.h (shared with the CUDA
// reduction). The lanes are combined by CombineLanes; block sums are added
// in block order by the caller.
using elementwise_math::kSumBlock;
using elementwise_math::kSumLanes;

// Single-threaded implementations over x[0, n). `stream` asks for
// non-temporal stores (a hint; the result is the same).
struct KernelTable {
  void (*cast_f32_to_f16)(uint16_t* out, const float* in, size_t n,
                          bool stream);
  void (*cast_f16_to_f32)(float* out, const uint16_t* in, size_t n,
                          bool stream);
  void (*cast_f32_to_bf16)(uint16_t* out, const float* in, size_t n,
                           bool stream);
  void (*cast_bf16_to_f32)(float* out, const uint16_t* in, size_t n,
                           bool stream);
  void (*scale_f32)(float* x, float a, size_t n);
  void (*scale_f16)(uint16_t* x, float a, size_t n);
  void (*scale_bf16)(uint16_t* x, float a, size_t n);
  void (*axpy_f32)(float* y, float a, const float* x, size_t n);
  void (*axpy_f16)(uint16_t* y, float a, const uint16_t* x, size_t n);
  void (*axpy_bf16)(uint16_t* y, float a, const uint16_t* x, size_t n);
  bool (*has_inf_or_nan_f32)(const float* x, size_t n);
  bool (*has_inf_or_nan_f16)(const uint16_t* x, size_t n);
  bool (*has_inf_or_nan_bf16)(const uint16_t* x, size_t n);
  // The sum of squares of one block x[0, n), n <= kSumBlock, in the
  // defined order (lanes, then CombineLanes).
  double (*block_sum_squares_f32)(const float* x, size_t n);
  double (*block_sum_squares_f16)(const uint16_t* x, size_t n);
  double (*block_sum_squares_bf16)(const uint16_t* x, size_t n);
};

// REQUIRES: IsKernelIsaSupported(isa).
const KernelTable& GetKernelTable(KernelIsa isa);

// The table of a struct of loops, each a static member template over the
// element types (F32, F16, BF16 below):
//   Cast<To, From>(To::T* out, const From::T* in, size_t n, bool stream)
//   Scale<D>(D::T* x, float a, size_t n)
//   Axpy<D>(D::T* y, float a, const D::T* x, size_t n)
//   HasInfOrNan<D>(const D::T* x, size_t n) -> bool
//   BlockSumSquares<D>(const D::T* x, size_t n) -> double
template <typename Loops>
KernelTable MakeKernelTable();

// The tables of each ISA (defined in kernels_<isa>.cc).
const KernelTable& ScalarKernels();
#if CHUNKZERO_KERNELS_X86
const KernelTable& Avx2Kernels();
const KernelTable& Avx512Kernels();
#endif

// ---- Scalar helpers: the definition of every kernel's result. ----

// Element types (F32, F16, BF16) and the per-element math, shared with
// the CUDA kernels: tensor/elementwise_math.h.
using elementwise_math::BF16;
using elementwise_math::F16;
using elementwise_math::F32;

// out[i] = To(From(in[i])) for i < n.
template <typename To, typename From>
void ScalarCast(typename To::T* out, const typename From::T* in, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = To::Store(From::Load(in[i]));
}

// x[i] = D(f32(x[i]) * a): computed in f32, rounded once to D.
template <typename D>
void ScalarScale(typename D::T* x, float a, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = elementwise_math::Scale<D>(x[i], a);
}

// y[i] = D(fma(a, f32(x[i]), f32(y[i]))): one f32 rounding, then D's.
template <typename D>
void ScalarAxpy(typename D::T* y, float a, const typename D::T* x, size_t n) {
  for (size_t i = 0; i < n; ++i)
    y[i] = elementwise_math::Axpy<D>(y[i], a, x[i]);
}

template <typename D>
bool ScalarHasInfOrNan(const typename D::T* x, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (D::IsInfOrNan(x[i])) return true;
  }
  return false;
}

// lanes[k % kSumLanes] += double(x[k])^2 for k < n, in increasing k. The
// square of an f32 is exact in double, so this equals an FMA.
template <typename D>
void ScalarAddSquares(double* lanes, const typename D::T* x, size_t n) {
  for (size_t k = 0; k < n; ++k) {
    const double v = D::Load(x[k]);
    lanes[k % kSumLanes] += v * v;
  }
}

// The largest finite magnitude of D as bits: D::IsInfOrNan(x) iff the
// magnitude bits of x (sign cleared) are above it.
template <typename D>
inline constexpr uint32_t kMaxFiniteBits = 0;
template <>
inline constexpr uint32_t kMaxFiniteBits<F32> = 0x7f7fffffu;
template <>
inline constexpr uint32_t kMaxFiniteBits<F16> = 0x7bffu;
template <>
inline constexpr uint32_t kMaxFiniteBits<BF16> = 0x7f7fu;

// Combines the lanes of one block in the defined order:
// lanes[i] += lanes[i + w] for w = 8, 4, 2, 1; returns lanes[0].
inline double CombineLanes(double* lanes) {
  for (size_t width = kSumLanes / 2; width >= 1; width /= 2) {
    for (size_t i = 0; i < width; ++i) lanes[i] += lanes[i + width];
  }
  return lanes[0];
}

template <typename Loops>
KernelTable MakeKernelTable() {
  KernelTable t;
  t.cast_f32_to_f16 = &Loops::template Cast<F16, F32>;
  t.cast_f16_to_f32 = &Loops::template Cast<F32, F16>;
  t.cast_f32_to_bf16 = &Loops::template Cast<BF16, F32>;
  t.cast_bf16_to_f32 = &Loops::template Cast<F32, BF16>;
  t.scale_f32 = &Loops::template Scale<F32>;
  t.scale_f16 = &Loops::template Scale<F16>;
  t.scale_bf16 = &Loops::template Scale<BF16>;
  t.axpy_f32 = &Loops::template Axpy<F32>;
  t.axpy_f16 = &Loops::template Axpy<F16>;
  t.axpy_bf16 = &Loops::template Axpy<BF16>;
  t.has_inf_or_nan_f32 = &Loops::template HasInfOrNan<F32>;
  t.has_inf_or_nan_f16 = &Loops::template HasInfOrNan<F16>;
  t.has_inf_or_nan_bf16 = &Loops::template HasInfOrNan<BF16>;
  t.block_sum_squares_f32 = &Loops::template BlockSumSquares<F32>;
  t.block_sum_squares_f16 = &Loops::template BlockSumSquares<F16>;
  t.block_sum_squares_bf16 = &Loops::template BlockSumSquares<BF16>;
  return t;
}

}  // namespace kernels_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_CPU_INTERNAL_KERNEL_TABLE_H_
