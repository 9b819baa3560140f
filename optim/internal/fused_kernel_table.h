// Per-ISA, single-threaded fused optimizer kernels and the scalar helpers
// that define their exact results. Private to optim/internal and
// //optim:fused_kernels.
//
//   const FusedKernelTable& k = GetFusedKernelTable(KernelIsa::kAvx2);
//   k.adam(constants, arrays, /*begin=*/0, /*end=*/n);
//
// Every table computes bit-identical results (NaN payloads aside). As in
// tensor/cpu/internal/kernel_table.h, the vector code handles whole vectors
// and hands heads and tails to the scalar helpers below, so the scalar code
// is both the fallback and the definition. The element math is that of
// optim/fused_kernels.h, over the per-call constants folded once by the
// caller (AdamConstants, SgdConstants).
//
// The per-ISA scheme is the tensor kernels' one: a table is
// MakeFusedKernelTable<Loops>() over a struct of typed loops; the scalar
// loops are plain C++ (fused_kernels_scalar.cc), the vector loops are
// written once (fused_vector_loops.inc) over the primitives of an ISA
// struct that fused_kernels_<isa>.cc defines with CZ_ISA_TARGET.
#ifndef CHUNKZERO_OPTIM_INTERNAL_FUSED_KERNEL_TABLE_H_
#define CHUNKZERO_OPTIM_INTERNAL_FUSED_KERNEL_TABLE_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "optim/internal/fused_kernels_isa.h"
#include "optim/internal/fused_math.h"
#include "tensor/cpu/cpu_features.h"
#include "tensor/cpu/internal/kernel_table.h"

namespace chunkzero {
namespace optim_internal {

// Element types (load, round-to-nearest-even store) shared with tensor/.
using kernels_internal::BF16;
using kernels_internal::F16;
using kernels_internal::F32;

// Single-threaded implementations over elements [begin, end) of the arrays.
struct FusedKernelTable {
  void (*adam)(const AdamConstants& c, const AdamArrays& a, size_t begin,
               size_t end);
  void (*sgd)(const SgdConstants& c, const SgdArrays& a, size_t begin,
              size_t end);
  // acc = (first ? 0 : acc) + f32(grad); param_out = out_dtype(master).
  void (*accumulate)(bool first, const AccumulateArrays& a, size_t begin,
                     size_t end);
};

// REQUIRES: IsKernelIsaSupported(isa).
const FusedKernelTable& GetFusedKernelTable(KernelIsa isa);

// The tables of each ISA (defined in fused_kernels_<isa>.cc).
const FusedKernelTable& ScalarFusedKernels();
#if CHUNKZERO_KERNELS_X86
const FusedKernelTable& Avx2FusedKernels();
const FusedKernelTable& Avx512FusedKernels();
#endif

// ---- Typed views and dispatch, shared by every table ----

// Element i of an array of O (null for NoOut, where nothing is stored).
template <typename O>
typename O::T* OutAt(void* out, size_t i) {
  if constexpr (std::is_same_v<O, NoOut>) {
    return nullptr;
  } else {
    return static_cast<typename O::T*>(out) + i;
  }
}
template <typename G>
const typename G::T* GradAt(const void* grad, size_t i) {
  return static_cast<const typename G::T*>(grad) + i;
}

// Calls fn(G(), O()) with the element types of the grad and of param_out
// (NoOut when it is null). REQUIRES: valid dtypes.
template <typename Fn>
void DispatchTypes(DType grad_dtype, const void* param_out, DType out_dtype,
                   const Fn& fn) {
  const auto with_grad = [&](auto g) {
    if (param_out == nullptr) return fn(g, NoOut());
    switch (out_dtype) {
      case DType::kF32:
        return fn(g, F32());
      case DType::kF16:
        return fn(g, F16());
      case DType::kBF16:
        return fn(g, BF16());
      default:  // The caller checked the dtypes.
        break;
    }
  };
  switch (grad_dtype) {
    case DType::kF32:
      return with_grad(F32());
    case DType::kF16:
      return with_grad(F16());
    case DType::kBF16:
      return with_grad(BF16());
    default:  // The caller checked the dtypes.
      break;
  }
}

template <WeightDecay kMode>
using WeightDecayTag = std::integral_constant<WeightDecay, kMode>;

// Calls fn(WeightDecayTag<mode>()).
template <typename Fn>
void DispatchWeightDecay(WeightDecay mode, const Fn& fn) {
  switch (mode) {
    case WeightDecay::kNone:
      return fn(WeightDecayTag<WeightDecay::kNone>());
    case WeightDecay::kCoupled:
      return fn(WeightDecayTag<WeightDecay::kCoupled>());
    case WeightDecay::kDecoupled:
      return fn(WeightDecayTag<WeightDecay::kDecoupled>());
  }
}

// The table entries of an ISA whose typed loops are the static member
// templates of `Loops`: Adam<G, O, kMode>, Sgd<G, O> and Accumulate<G, O>,
// over arrays already offset to the first element (see ScalarAdam for the
// arguments). Dispatching once per range keeps the loops free of branches
// on dtypes and modes.
template <typename Loops>
void TableAdam(const AdamConstants& c, const AdamArrays& a, size_t begin,
               size_t end) {
  DispatchTypes(a.grad_dtype, a.param_out, a.out_dtype, [&](auto g, auto o) {
    using G = decltype(g);
    using O = decltype(o);
    DispatchWeightDecay(c.weight_decay_mode, [&](auto mode) {
      Loops::template Adam<G, O, decltype(mode)::value>(
          c, a.param + begin, a.exp_avg + begin, a.exp_avg_sq + begin,
          GradAt<G>(a.grad, begin), OutAt<O>(a.param_out, begin), end - begin);
    });
  });
}

template <typename Loops>
void TableSgd(const SgdConstants& c, const SgdArrays& a, size_t begin,
              size_t end) {
  float* buffer =
      c.momentum_mode == Momentum::kNone ? nullptr : a.momentum_buffer + begin;
  DispatchTypes(a.grad_dtype, a.param_out, a.out_dtype, [&](auto g, auto o) {
    using G = decltype(g);
    using O = decltype(o);
    Loops::template Sgd<G, O>(c, a.param + begin, buffer,
                              GradAt<G>(a.grad, begin),
                              OutAt<O>(a.param_out, begin), end - begin);
  });
}

template <typename Loops>
void TableAccumulate(bool first, const AccumulateArrays& a, size_t begin,
                     size_t end) {
  DispatchTypes(a.grad_dtype, a.param_out, a.out_dtype, [&](auto g, auto o) {
    using G = decltype(g);
    using O = decltype(o);
    Loops::template Accumulate<G, O>(first, a.acc + begin,
                                     GradAt<G>(a.grad, begin), a.master + begin,
                                     OutAt<O>(a.param_out, begin), end - begin);
  });
}

template <typename Loops>
FusedKernelTable MakeFusedKernelTable() {
  return {&TableAdam<Loops>, &TableSgd<Loops>, &TableAccumulate<Loops>};
}

// ---- Scalar helpers: the definition of every kernel's result ----

// Adam over elements [0, n) of arrays already offset to the first element.
template <typename G, typename O, WeightDecay kMode>
void ScalarAdam(const AdamConstants& c, float* param, float* exp_avg,
                float* exp_avg_sq, const typename G::T* grad,
                typename O::T* param_out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    AdamAt<G, O, kMode>(c, param, exp_avg, exp_avg_sq, grad, param_out, i);
  }
}

template <typename G, typename O>
void ScalarSgd(const SgdConstants& c, float* param, float* momentum_buffer,
               const typename G::T* grad, typename O::T* param_out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    SgdAt<G, O>(c, param, momentum_buffer, grad, param_out, i);
  }
}

template <typename G, typename O>
void ScalarAccumulate(bool first, float* acc, const typename G::T* grad,
                      const float* master, typename O::T* param_out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    AccumulateAt<G, O>(first, acc, grad, master, param_out, i);
  }
}

}  // namespace optim_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_OPTIM_INTERNAL_FUSED_KERNEL_TABLE_H_
