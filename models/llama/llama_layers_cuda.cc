// The CUDA LlamaLayers: models/llama/cuda_llama_kernels.h on one GPU.
// Built everywhere; without --config=cuda every layer fails with
// Unimplemented.
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "models/llama/cuda_llama_kernels.h"
#include "models/llama/llama_kernels.h"
#include "models/llama/llama_layers.h"
#include "tensor/cuda/cuda_runtime.h"
#include "tensor/memory/allocator.h"

namespace chunkzero {
namespace {

namespace kernels = cuda_llama_kernels;

class CudaLlamaLayers final : public LlamaLayers {
 public:
  explicit CudaLlamaLayers(Device device) : device_(device) {}

  absl::Status EmbeddingForward(float* out, const int32_t* tokens,
                                const float* wte, int N, int C,
                                int V) override {
    const ScopedCudaDevice on(device_.index());
    CZ_RETURN_IF_ERROR(on.status());
    return kernels::EmbeddingForward(out, tokens, wte, N, C, V);
  }
  absl::Status EmbeddingBackward(float* dwte, const float* dout,
                                 const int32_t* tokens, int N, int C,
                                 int V) override {
    const ScopedCudaDevice on(device_.index());
    CZ_RETURN_IF_ERROR(on.status());
    return kernels::EmbeddingBackward(dwte, dout, tokens, N, C, V);
  }
  absl::Status RmsNormForward(float* out, float* rstd, const float* x,
                              const float* w, int N, int C,
                              float eps) override {
    const ScopedCudaDevice on(device_.index());
    CZ_RETURN_IF_ERROR(on.status());
    return kernels::RmsNormForward(out, rstd, x, w, N, C, eps);
  }
  absl::Status RmsNormBackward(float* dx, float* dw, const float* dout,
                               const float* x, const float* w,
                               const float* rstd, int N, int C) override {
    const ScopedCudaDevice on(device_.index());
    CZ_RETURN_IF_ERROR(on.status());
    return kernels::RmsNormBackward(dx, dw, dout, x, w, rstd, N, C);
  }
  absl::Status RopeTables(float* cos, float* sin, int T, int head_dim,
                          double theta) override {
    // Made once per sequence length: on the host, as the CPU's, then in.
    const size_t n = static_cast<size_t>(T) * (head_dim / 2);
    std::vector<float> host_cos(n), host_sin(n);
    llama_kernels::RopeTables(host_cos.data(), host_sin.data(), T, head_dim,
                              theta);
    CZ_RETURN_IF_ERROR(CopyBytes(cos, device_, host_cos.data(), Device::Cpu(),
                                 n * sizeof(float)),
                       "the rotary tables");
    return CopyBytes(sin, device_, host_sin.data(), Device::Cpu(),
                     n * sizeof(float));
  }
  absl::Status RopeForward(float* x, const float* cos, const float* sin, int N,
                           int T, int heads, int head_dim) override {
    const ScopedCudaDevice on(device_.index());
    CZ_RETURN_IF_ERROR(on.status());
    return kernels::RopeForward(x, cos, sin, N, T, heads, head_dim);
  }
  absl::Status RopeBackward(float* dx, const float* cos, const float* sin,
                            int N, int T, int heads, int head_dim) override {
    const ScopedCudaDevice on(device_.index());
    CZ_RETURN_IF_ERROR(on.status());
    return kernels::RopeBackward(dx, cos, sin, N, T, heads, head_dim);
  }
  absl::Status SwiGluForward(float* h, const float* gate, const float* up,
                             size_t n) override {
    const ScopedCudaDevice on(device_.index());
    CZ_RETURN_IF_ERROR(on.status());
    return kernels::SwiGluForward(h, gate, up, n);
  }
  absl::Status SwiGluBackward(float* dgate, float* dup, const float* dh,
                              const float* gate, const float* up,
                              size_t n) override {
    const ScopedCudaDevice on(device_.index());
    CZ_RETURN_IF_ERROR(on.status());
    return kernels::SwiGluBackward(dgate, dup, dh, gate, up, n);
  }
  absl::Status ExpandQkv(float* qkv, const float* q, const float* k,
                         const float* v, int N, int NH, int KV,
                         int head_dim) override {
    const ScopedCudaDevice on(device_.index());
    CZ_RETURN_IF_ERROR(on.status());
    return kernels::ExpandQkv(qkv, q, k, v, N, NH, KV, head_dim);
  }
  absl::Status ReduceQkvGrad(float* dq, float* dk, float* dv, const float* dqkv,
                             int N, int NH, int KV, int head_dim) override {
    const ScopedCudaDevice on(device_.index());
    CZ_RETURN_IF_ERROR(on.status());
    return kernels::ReduceQkvGrad(dq, dk, dv, dqkv, N, NH, KV, head_dim);
  }

 private:
  Device device_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<LlamaLayers>> MakeCudaLlamaLayers(
    Device device) {
  if (device.type() != DeviceType::kCuda) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the CUDA Llama layers need a GPU, not ", device.ToString()));
  }
  return std::make_unique<CudaLlamaLayers>(device);
}

}  // namespace chunkzero
