// LayerBackend: where a model's layers run, the CPU or a GPU, behind one
// interface, so that a model's scopes, hooks and buffers are written once.
//
//   std::unique_ptr<LayerBackend> cpu = MakeCpuLayerBackend();
//   CZ_ASSIGN_OR_RETURN(std::unique_ptr<LayerBackend> gpu,
//                       MakeCudaLayerBackend(Device::Cuda(0)));
//   CZ_RETURN_IF_ERROR(gpu->LayerNormForward(out, mean, rstd, x, w, b, N, C));
//
// Every layer has the arguments and results of kernels/cpu_kernels.h and
// kernels/cpu_rmsnorm_rope_swiglu_kernels.h
// (which the CPU backend runs); the CUDA backend runs
// kernels/cuda_kernels.h and cuda_layers.h on the compute stream,
// with results equal to the CPU's to rounding. Pointers are memory of
// device(): host memory for the CPU backend, the GPU's for a CUDA backend.
//
// Errors: the CPU backend's layers cannot fail (their preconditions are the
// caller's); the CUDA backend returns its kernels' and products' errors.
// Thread-safety: a backend is used by one thread (its model's) at a time.
#ifndef CHUNKZERO_KERNELS_LAYER_BACKEND_H_
#define CHUNKZERO_KERNELS_LAYER_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/gemm_types.h"
#include "kernels/weight_reader.h"
#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/memory/memory_tracker.h"

namespace chunkzero {

class LayerBackend : public WeightReader {
 public:
  using Precision = gemm::Precision;

  // A weight matrix as the products read it (kernels/weight_reader.h).
  using Weight = MatrixWeight;

  // WeightReader: the layers compute on Device::Cpu() or cuda:N, and read
  // in place any host-accessible memory (the CPU backend) or their GPU's
  // (a CUDA backend).
  // Where the backend's own working memory (a GPU's bf16 scratch) is
  // counted, as MemoryCategory::kActivation on device(); nullptr: nowhere.
  // Drops that memory (it grows back as the products need it).
  virtual void set_scratch_accounting(MemoryTracker* tracker) = 0;
  // The bytes of that working memory held now.
  virtual int64_t scratch_bytes() const = 0;

  // Whether the attention is fused (cuda_layers.h): its forward then
  // keeps lse[B, NH, T] where the batched attention keeps the
  // probabilities att[B, NH, T, T], and its backward takes the forward's
  // output and a delta[B, NH, T] scratch where the batched one takes
  // datt (AttentionScratchElements). AttentionElements says how many floats
  // att needs.
  virtual bool fused_attention() const = 0;
  // Chooses the attention: InvalidArgument for the fused one on the CPU,
  // which has only the batched one.
  [[nodiscard]] virtual absl::Status set_fused_attention(bool fused) = 0;
  // Floats of att per sequence batch: B NH T^2 batched, B NH T fused.
  int64_t AttentionElements(int B, int T, int NH) const {
    const int64_t rows = int64_t{B} * NH * T;
    return fused_attention() ? rows : rows * T;
  }
  // Floats of AttentionBackward's datt when `threads` threads may run it:
  // the CPU's T x T + 3 T C / NH per head computed at once, for
  // min(threads, B NH) heads; a GPU's AttentionElements (every head at
  // once).
  virtual int64_t AttentionScratchElements(int B, int T, int C, int NH,
                                           int threads) const {
    return AttentionElements(B, T, NH);
  }
  // Whether AttentionBackward may write dqkv over qkv and read dout from
  // `out` itself (the CPU's, which does not read `out`), so that Backward
  // needs no buffers of its own for them.
  virtual bool AttentionBackwardInPlace() const { return false; }

  virtual absl::Status EmbeddingForward(float* out, const int32_t* tokens,
                                        const float* wte, const float* wpe,
                                        int B, int T, int C, int V) = 0;
  virtual absl::Status EmbeddingBackward(float* dwte, float* dwpe,
                                         const float* dout,
                                         const int32_t* tokens, int B, int T,
                                         int C, int V, int P) = 0;
  virtual absl::Status LayerNormForward(float* out, float* mean, float* rstd,
                                        const float* x, const float* w,
                                        const float* b, int N, int C) = 0;
  virtual absl::Status LayerNormBackward(float* dx, float* dw, float* db,
                                         const float* dout, const float* x,
                                         const float* w, const float* mean,
                                         const float* rstd, int N, int C) = 0;
  virtual absl::Status MatmulForward(float* out, const float* x, Weight w,
                                     const float* bias, int N, int IC, int OC,
                                     Precision precision) = 0;
  virtual absl::Status MatmulBackward(float* dx, float* dw, float* dbias,
                                      const float* dout, const float* x,
                                      Weight w, int N, int IC, int OC,
                                      Precision precision) = 0;
  virtual absl::Status MatmulTransposedForward(float* out, const float* x,
                                               Weight w, int N, int IC, int OC,
                                               Precision precision) = 0;
  virtual absl::Status MatmulTransposedBackward(float* dx, float* dw,
                                                const float* dout,
                                                const float* x, Weight w, int N,
                                                int IC, int OC,
                                                Precision precision) = 0;
  virtual absl::Status AttentionForward(float* out, float* att,
                                        const float* qkv, int B, int T, int C,
                                        int NH, Precision precision) = 0;
  // `out` is the forward's output (the fused attention reads it). `att`
  // may be used up (the CPU writes the scores' grads over it); datt holds
  // datt_elements floats, at least AttentionScratchElements for some
  // thread count.
  virtual absl::Status AttentionBackward(float* dqkv, float* datt,
                                         int64_t datt_elements,
                                         const float* dout, const float* qkv,
                                         float* att, const float* out, int B,
                                         int T, int C, int NH,
                                         Precision precision) = 0;
  virtual absl::Status GeluForward(float* out, const float* x, size_t n) = 0;
  virtual absl::Status GeluBackward(float* dx, const float* x,
                                    const float* dout, size_t n) = 0;
  virtual absl::Status Add(float* out, const float* a, const float* b,
                           size_t n) = 0;
  // The mean row loss; `row_losses` is memory of device(). On a GPU this
  // waits for the loss to come to the host.
  virtual absl::StatusOr<double> CrossEntropyForward(float* logits,
                                                     const int32_t* targets,
                                                     int N, int V,
                                                     double* row_losses) = 0;
  virtual absl::Status CrossEntropyBackward(float* probs,
                                            const int32_t* targets,
                                            float dloss_per_row, int N,
                                            int V) = 0;
  // x[n] = 0.
  virtual absl::Status Zero(float* x, size_t n) = 0;

  // The layers of RMSNorm-and-rotary decoders (Llama, Qwen2;
  // kernels/cpu_rmsnorm_rope_swiglu_kernels.h).

  virtual absl::Status TokenEmbeddingForward(float* out, const int32_t* tokens,
                                             const float* wte, int N, int C,
                                             int V) = 0;
  virtual absl::Status TokenEmbeddingBackward(float* dwte, const float* dout,
                                              const int32_t* tokens, int N,
                                              int C, int V) = 0;
  virtual absl::Status RmsNormForward(float* out, float* rstd, const float* x,
                                      const float* w, int N, int C,
                                      float eps) = 0;
  virtual absl::Status RmsNormBackward(float* dx, float* dw, const float* dout,
                                       const float* x, const float* w,
                                       const float* rstd, int N, int C) = 0;
  // The rotary tables, cos and sin [T, hd / 2], computed on the host
  // (cpu_kernels::RopeTables) and written to memory of the layers'
  // device.
  virtual absl::Status RopeTables(float* cos, float* sin, int T, int head_dim,
                                  double theta) = 0;
  virtual absl::Status RopeForward(float* x, const float* cos, const float* sin,
                                   int N, int T, int heads, int head_dim) = 0;
  virtual absl::Status RopeBackward(float* dx, const float* cos,
                                    const float* sin, int N, int T, int heads,
                                    int head_dim) = 0;
  virtual absl::Status SwiGluForward(float* h, const float* gate,
                                     const float* up, size_t n) = 0;
  virtual absl::Status SwiGluBackward(float* dgate, float* dup, const float* dh,
                                      const float* gate, const float* up,
                                      size_t n) = 0;
  virtual absl::Status ExpandQkv(float* qkv, const float* q, const float* k,
                                 const float* v, int N, int NH, int KV,
                                 int head_dim) = 0;
  virtual absl::Status ReduceQkvGrad(float* dq, float* dk, float* dv,
                                     const float* dqkv, int N, int NH, int KV,
                                     int head_dim) = 0;
};

// The layers of kernels/cpu_kernels.h on the CPU.
std::unique_ptr<LayerBackend> MakeCpuLayerBackend();

// The CUDA layers on `device` (cuda:N). InvalidArgument for a device that
// is not a GPU.
[[nodiscard]] absl::StatusOr<std::unique_ptr<LayerBackend>>
MakeCudaLayerBackend(Device device);

}  // namespace chunkzero

#endif  // CHUNKZERO_KERNELS_LAYER_BACKEND_H_
