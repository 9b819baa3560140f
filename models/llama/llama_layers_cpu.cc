// The CPU LlamaLayers: models/llama/llama_kernels.h, which cannot fail.
#include <memory>

#include "models/llama/llama_kernels.h"
#include "models/llama/llama_layers.h"

namespace chunkzero {
namespace {

namespace lk = llama_kernels;

class CpuLlamaLayers final : public LlamaLayers {
 public:
  absl::Status EmbeddingForward(float* out, const int32_t* tokens,
                                const float* wte, int N, int C,
                                int V) override {
    lk::EmbeddingForward(out, tokens, wte, N, C);
    return absl::OkStatus();
  }
  absl::Status EmbeddingBackward(float* dwte, const float* dout,
                                 const int32_t* tokens, int N, int C,
                                 int V) override {
    lk::EmbeddingBackward(dwte, dout, tokens, N, C, V);
    return absl::OkStatus();
  }
  absl::Status RmsNormForward(float* out, float* rstd, const float* x,
                              const float* w, int N, int C,
                              float eps) override {
    lk::RmsNormForward(out, rstd, x, w, N, C, eps);
    return absl::OkStatus();
  }
  absl::Status RmsNormBackward(float* dx, float* dw, const float* dout,
                               const float* x, const float* w,
                               const float* rstd, int N, int C) override {
    lk::RmsNormBackward(dx, dw, dout, x, w, rstd, N, C);
    return absl::OkStatus();
  }
  absl::Status RopeTables(float* cos, float* sin, int T, int head_dim,
                          double theta) override {
    lk::RopeTables(cos, sin, T, head_dim, theta);
    return absl::OkStatus();
  }
  absl::Status RopeForward(float* x, const float* cos, const float* sin, int N,
                           int T, int heads, int head_dim) override {
    lk::RopeForward(x, cos, sin, N, T, heads, head_dim);
    return absl::OkStatus();
  }
  absl::Status RopeBackward(float* dx, const float* cos, const float* sin,
                            int N, int T, int heads, int head_dim) override {
    lk::RopeBackward(dx, cos, sin, N, T, heads, head_dim);
    return absl::OkStatus();
  }
  absl::Status SwiGluForward(float* h, const float* gate, const float* up,
                             size_t n) override {
    lk::SwiGluForward(h, gate, up, n);
    return absl::OkStatus();
  }
  absl::Status SwiGluBackward(float* dgate, float* dup, const float* dh,
                              const float* gate, const float* up,
                              size_t n) override {
    lk::SwiGluBackward(dgate, dup, dh, gate, up, n);
    return absl::OkStatus();
  }
  absl::Status ExpandQkv(float* qkv, const float* q, const float* k,
                         const float* v, int N, int NH, int KV,
                         int head_dim) override {
    lk::ExpandQkv(qkv, q, k, v, N, NH, KV, head_dim);
    return absl::OkStatus();
  }
  absl::Status ReduceQkvGrad(float* dq, float* dk, float* dv, const float* dqkv,
                             int N, int NH, int KV, int head_dim) override {
    lk::ReduceQkvGrad(dq, dk, dv, dqkv, N, NH, KV, head_dim);
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<LlamaLayers> MakeCpuLlamaLayers() {
  return std::make_unique<CpuLlamaLayers>();
}

}  // namespace chunkzero
