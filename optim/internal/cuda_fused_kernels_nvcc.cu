// Fused optimizer kernels on the GPU: one element per thread in a
// grid-stride loop, through optim/internal/fused_math.h (the CPU scalar
// kernels' definition) and tensor/elementwise_math.h's loads and stores,
// so that every result equals the CPU's bit for bit.
#include <cuda_runtime.h>

#include "optim/internal/cuda_fused_kernels_nvcc.h"
#include "optim/internal/fused_math.h"
#include "tensor/elementwise_math.h"

namespace chunkzero {
namespace optim_internal {
namespace cuda {
namespace {

using elementwise_math::BF16;
using elementwise_math::F16;
using elementwise_math::F32;

constexpr int kThreads = 256;

unsigned Blocks(size_t n) {
  const size_t wanted = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(wanted < 65535 * 8 ? wanted : 65535 * 8);
}

cudaStream_t Raw(CudaStream stream) {
  return reinterpret_cast<cudaStream_t>(stream);
}

// grad and param_out may be the same array (grad reuse): each element is
// read before it is written, by the same thread.
template <typename G, typename O, WeightDecay kMode>
__global__ void AdamKernel(AdamConstants c, float* __restrict__ param,
                           float* __restrict__ exp_avg,
                           float* __restrict__ exp_avg_sq,
                           const typename G::T* grad, typename O::T* param_out,
                           size_t n) {
  const size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    AdamAt<G, O, kMode>(c, param, exp_avg, exp_avg_sq, grad, param_out, i);
  }
}

template <typename G, typename O>
__global__ void SgdKernel(SgdConstants c, float* __restrict__ param,
                          float* __restrict__ momentum_buffer,
                          const typename G::T* grad, typename O::T* param_out,
                          size_t n) {
  const size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    SgdAt<G, O>(c, param, momentum_buffer, grad, param_out, i);
  }
}

template <typename G, typename O>
__global__ void AccumulateKernel(bool first, float* __restrict__ acc,
                                 const typename G::T* grad,
                                 const float* __restrict__ master,
                                 typename O::T* param_out, size_t n) {
  const size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    AccumulateAt<G, O>(first, acc, grad, master, param_out, i);
  }
}

// Calls fn(G(), O()) for the element types.
template <typename Fn>
void DispatchTypes(Element grad_type, Element out_type, const Fn& fn) {
  const auto with_grad = [&](auto g) {
    switch (out_type) {
      case Element::kF32:
        return fn(g, F32());
      case Element::kF16:
        return fn(g, F16());
      case Element::kBF16:
        return fn(g, BF16());
      case Element::kNone:
        return fn(g, NoOut());
    }
  };
  switch (grad_type) {
    case Element::kF16:
      return with_grad(F16());
    case Element::kBF16:
      return with_grad(BF16());
    default:
      return with_grad(F32());
  }
}

int Launched() { return cudaGetLastError(); }

}  // namespace

int Adam(const AdamConstants& c, float* param, float* exp_avg,
         float* exp_avg_sq, const void* grad, Element grad_type,
         void* param_out, Element out_type, size_t n, CudaStream stream) {
  if (n == 0) return cudaSuccess;
  DispatchTypes(grad_type, out_type, [&](auto g, auto o) {
    using G = decltype(g);
    using O = decltype(o);
    const auto* typed_grad = static_cast<const typename G::T*>(grad);
    auto* typed_out = static_cast<typename O::T*>(param_out);
    switch (c.weight_decay_mode) {
      case WeightDecay::kNone:
        AdamKernel<G, O, WeightDecay::kNone>
            <<<Blocks(n), kThreads, 0, Raw(stream)>>>(
                c, param, exp_avg, exp_avg_sq, typed_grad, typed_out, n);
        break;
      case WeightDecay::kCoupled:
        AdamKernel<G, O, WeightDecay::kCoupled>
            <<<Blocks(n), kThreads, 0, Raw(stream)>>>(
                c, param, exp_avg, exp_avg_sq, typed_grad, typed_out, n);
        break;
      case WeightDecay::kDecoupled:
        AdamKernel<G, O, WeightDecay::kDecoupled>
            <<<Blocks(n), kThreads, 0, Raw(stream)>>>(
                c, param, exp_avg, exp_avg_sq, typed_grad, typed_out, n);
        break;
    }
  });
  return Launched();
}

int Sgd(const SgdConstants& c, float* param, float* momentum_buffer,
        const void* grad, Element grad_type, void* param_out, Element out_type,
        size_t n, CudaStream stream) {
  if (n == 0) return cudaSuccess;
  DispatchTypes(grad_type, out_type, [&](auto g, auto o) {
    using G = decltype(g);
    using O = decltype(o);
    SgdKernel<G, O><<<Blocks(n), kThreads, 0, Raw(stream)>>>(
        c, param, momentum_buffer, static_cast<const typename G::T*>(grad),
        static_cast<typename O::T*>(param_out), n);
  });
  return Launched();
}

int Accumulate(bool first, float* acc, const void* grad, Element grad_type,
               const float* master, void* param_out, Element out_type, size_t n,
               CudaStream stream) {
  if (n == 0) return cudaSuccess;
  DispatchTypes(grad_type, out_type, [&](auto g, auto o) {
    using G = decltype(g);
    using O = decltype(o);
    AccumulateKernel<G, O><<<Blocks(n), kThreads, 0, Raw(stream)>>>(
        first, acc, static_cast<const typename G::T*>(grad), master,
        static_cast<typename O::T*>(param_out), n);
  });
  return Launched();
}

const char* ErrorName(int error) {
  return cudaGetErrorName(static_cast<cudaError_t>(error));
}

}  // namespace cuda
}  // namespace optim_internal
}  // namespace chunkzero
