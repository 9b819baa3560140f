// LlamaLayers: where Llama's own layers run, the CPU or a GPU, behind one
// interface, beside the GptBackend that runs the layers the two models
// share (products, attention, loss): LlamaModel is written once for both.
//
//   std::unique_ptr<LlamaLayers> cpu = MakeCpuLlamaLayers();
//   CZ_ASSIGN_OR_RETURN(std::unique_ptr<LlamaLayers> gpu,
//                       MakeCudaLlamaLayers(Device::Cuda(0)));
//   CZ_RETURN_IF_ERROR(gpu->RmsNormForward(out, rstd, x, w, N, C, eps));
//
// Every layer has the arguments and results of models/llama/llama_kernels.h
// (which the CPU layers run); the CUDA layers run
// models/llama/cuda_llama_kernels.h on the compute stream, with results
// equal to the CPU's to rounding. Pointers are memory of the layers'
// device: host memory for the CPU, the GPU's for CUDA.
//
// Errors: the CPU layers cannot fail (their preconditions are the
// caller's); the CUDA layers return their kernels' errors (Unimplemented
// without --config=cuda). Thread-safety: used by one thread at a time.
#ifndef CHUNKZERO_MODELS_LLAMA_LLAMA_LAYERS_H_
#define CHUNKZERO_MODELS_LLAMA_LLAMA_LAYERS_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensor/device.h"

namespace chunkzero {

class LlamaLayers {
 public:
  virtual ~LlamaLayers() = default;

  virtual absl::Status EmbeddingForward(float* out, const int32_t* tokens,
                                        const float* wte, int N, int C,
                                        int V) = 0;
  virtual absl::Status EmbeddingBackward(float* dwte, const float* dout,
                                         const int32_t* tokens, int N, int C,
                                         int V) = 0;
  virtual absl::Status RmsNormForward(float* out, float* rstd, const float* x,
                                      const float* w, int N, int C,
                                      float eps) = 0;
  virtual absl::Status RmsNormBackward(float* dx, float* dw, const float* dout,
                                       const float* x, const float* w,
                                       const float* rstd, int N, int C) = 0;
  // The rotary tables, cos and sin [T, hd / 2], computed on the host
  // (llama_kernels::RopeTables) and written to memory of the layers'
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

// Llama's layers on the CPU (models/llama/llama_kernels.h).
std::unique_ptr<LlamaLayers> MakeCpuLlamaLayers();

// Llama's layers on `device` (cuda:N). InvalidArgument for a device that is
// not a GPU.
[[nodiscard]] absl::StatusOr<std::unique_ptr<LlamaLayers>> MakeCudaLlamaLayers(
    Device device);

}  // namespace chunkzero

#endif  // CHUNKZERO_MODELS_LLAMA_LLAMA_LAYERS_H_
