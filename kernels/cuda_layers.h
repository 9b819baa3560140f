// The matrix-product layers on a GPU: the CUDA counterparts of
// cpu_kernels.h's Matmul*, MatmulTransposed* and Attention* (same
// arguments, layouts and results to rounding), built from CudaGemm
// (kernels/cuda_gemm.h) and the kernels of cuda_kernels.h.
//
//   Bf16Scratch scratch(Device::Cuda(0), {MemoryCategory::kActivation,
//                                         &tracker});
//   CZ_RETURN_IF_ERROR(cuda_layers::MatmulForward(
//       out, x, {w_f32, w_bf16}, bias, N, IC, OC, Precision::kBf16,
//       scratch));
//
// Precision kBf16 is the CPU's: every product of the layer multiplies
// bf16-rounded operands with f32 accumulation. Activations and grads are
// rounded into `scratch` on the GPU before each product; a weight uses its
// bf16 copy when the layer has one (the param stored in bf16), else it is
// rounded too.
//
// Everything is enqueued on `stream` (the compute stream, kComputeStream,
// unless given) without a host wait; one Bf16Scratch serves one stream.
// Errors: the failing product's or kernel's Status; scratch allocation
// failures (ResourceExhausted at a memory cap).
#ifndef CHUNKZERO_KERNELS_CUDA_LAYERS_H_
#define CHUNKZERO_KERNELS_CUDA_LAYERS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/gemm_types.h"
#include "tensor/cuda/cuda_handles.h"
#include "tensor/device.h"
#include "tensor/storage.h"

namespace chunkzero {
namespace cuda_layers {

// Device memory that bf16 products round their operands into: a few
// slots, each grown to its largest request and kept, counted by `options`
// (the activation category). A slot may be reused as soon as the products
// reading it are enqueued: they run in stream order. One per model, used
// by one thread.
class Bf16Scratch {
 public:
  static constexpr int kSlots = 3;

  explicit Bf16Scratch(Device device,
                       StorageOptions options = {MemoryCategory::kActivation});

  // `n` bf16 elements in `slot` (0 <= slot < kSlots).
  [[nodiscard]] absl::StatusOr<uint16_t*> Get(int slot, size_t n);
  // Bytes held over all slots.
  size_t bytes() const;

 private:
  const Device device_;
  const StorageOptions options_;
  std::array<std::shared_ptr<Storage>, kSlots> slots_;
};

// A weight matrix in GPU memory: its f32 values and, when its parameter is
// stored in bf16, the bit patterns (else null). kBf16 products read the
// bits when present (f32 may then be null); kF32 products read the values.
struct CudaWeight {
  const float* f32 = nullptr;
  const uint16_t* bf16 = nullptr;
};

using gemm::Precision;

// out[N, OC] = x[N, IC] w[IC, OC] + bias[OC] (bias may be null).
[[nodiscard]] absl::Status MatmulForward(float* out, const float* x,
                                         const CudaWeight& w, const float* bias,
                                         int N, int IC, int OC,
                                         Precision precision,
                                         Bf16Scratch& scratch,
                                         CudaStream stream = kComputeStream);
// dx[N, IC] = dout w^T, dw[IC, OC] = x^T dout, dbias = column sums of
// dout (dbias may be null); all overwritten. dx may be x itself: dw and
// dbias are enqueued first.
[[nodiscard]] absl::Status MatmulBackward(float* dx, float* dw, float* dbias,
                                          const float* dout, const float* x,
                                          const CudaWeight& w, int N, int IC,
                                          int OC, Precision precision,
                                          Bf16Scratch& scratch,
                                          CudaStream stream = kComputeStream);

// out[N, OC] = x[N, IC] w[OC, IC]^T (the tied output projection).
[[nodiscard]] absl::Status MatmulTransposedForward(
    float* out, const float* x, const CudaWeight& w, int N, int IC, int OC,
    Precision precision, Bf16Scratch& scratch,
    CudaStream stream = kComputeStream);
// dx[N, IC] = dout w, dw[OC, IC] = dout^T x; both overwritten.
[[nodiscard]] absl::Status MatmulTransposedBackward(
    float* dx, float* dw, const float* dout, const float* x,
    const CudaWeight& w, int N, int IC, int OC, Precision precision,
    Bf16Scratch& scratch, CudaStream stream = kComputeStream);

// Causal multi-head self-attention over qkv[N, 3C] (see cpu_kernels.h):
// scores through batched products per sequence, the masked softmax kept
// in att[B, NH, T, T] for the backward.
[[nodiscard]] absl::Status AttentionForward(float* out, float* att,
                                            const float* qkv, int B, int T,
                                            int C, int NH, Precision precision,
                                            Bf16Scratch& scratch,
                                            CudaStream stream = kComputeStream);
// dqkv[N, 3C] overwritten; datt[B, NH, T, T] is scratch.
[[nodiscard]] absl::Status AttentionBackward(
    float* dqkv, float* datt, const float* dout, const float* qkv,
    const float* att, int B, int T, int C, int NH, Precision precision,
    Bf16Scratch& scratch, CudaStream stream = kComputeStream);

// The same attention fused, keeping no T x T matrix: out[N, C] as
// AttentionForward's, and lse[B, NH, T] (each query row's log-sum-exp of
// its scaled scores) for the backward, which recomputes the probabilities
// from it (FlashAttention's scheme). O(T) memory per head instead of
// O(T^2), at the price of CUDA-core rather than tensor-core arithmetic in
// this first, simple version (one thread per query or key row). With bf16
// precision q, k, v and dout are rounded to bf16 as the products' operands
// are; the probabilities stay f32, where the batched path rounds them too.
// InvalidArgument for a head size above 128.
[[nodiscard]] absl::Status FusedAttentionForward(
    float* out, float* lse, const float* qkv, int B, int T, int C, int NH,
    Precision precision, CudaStream stream = kComputeStream);
// dqkv[N, 3C] overwritten from dout, qkv and the forward's out and lse;
// delta[B, NH, T] is scratch.
[[nodiscard]] absl::Status FusedAttentionBackward(
    float* dqkv, float* delta, const float* dout, const float* qkv,
    const float* out, const float* lse, int B, int T, int C, int NH,
    Precision precision, CudaStream stream = kComputeStream);

}  // namespace cuda_layers
}  // namespace chunkzero

#endif  // CHUNKZERO_KERNELS_CUDA_LAYERS_H_
