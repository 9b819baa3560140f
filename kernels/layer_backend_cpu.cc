// The CPU LayerBackend: kernels/cpu_kernels.h as it is.
#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "kernels/cpu_kernels.h"
#include "kernels/cpu_rmsnorm_rope_swiglu_kernels.h"
#include "kernels/layer_backend.h"
#include "tensor/cpu/cast_kernels.h"

namespace chunkzero {
namespace {

namespace k = cpu_kernels;

k::WeightMatrix Matrix(LayerBackend::Weight w) { return {w.f32, w.bf16}; }

class CpuLayerBackend final : public LayerBackend {
 public:
  Device device() const override { return Device::Cpu(); }
  bool Reads(Device device) const override {
    return device.is_host_accessible();
  }
  void set_scratch_accounting(MemoryTracker*) override {}
  int64_t scratch_bytes() const override { return 0; }
  bool fused_attention() const override { return false; }
  absl::Status set_fused_attention(bool fused) override {
    if (!fused) return absl::OkStatus();
    return absl::InvalidArgumentError(
        "the fused attention runs on GPUs; the CPU attention is batched");
  }

  absl::Status EmbeddingForward(float* out, const int32_t* tokens,
                                const float* wte, const float* wpe, int B,
                                int T, int C, int) override {
    k::EmbeddingForward(out, tokens, wte, wpe, B, T, C);
    return absl::OkStatus();
  }
  absl::Status EmbeddingBackward(float* dwte, float* dwpe, const float* dout,
                                 const int32_t* tokens, int B, int T, int C,
                                 int V, int P) override {
    k::EmbeddingBackward(dwte, dwpe, dout, tokens, B, T, C, V, P);
    return absl::OkStatus();
  }
  absl::Status LayerNormForward(float* out, float* mean, float* rstd,
                                const float* x, const float* w, const float* b,
                                int N, int C) override {
    k::LayerNormForward(out, mean, rstd, x, w, b, N, C);
    return absl::OkStatus();
  }
  absl::Status LayerNormBackward(float* dx, float* dw, float* db,
                                 const float* dout, const float* x,
                                 const float* w, const float* mean,
                                 const float* rstd, int N, int C) override {
    k::LayerNormBackward(dx, dw, db, dout, x, w, mean, rstd, N, C);
    return absl::OkStatus();
  }
  absl::Status MatmulForward(float* out, const float* x, Weight w,
                             const float* bias, int N, int IC, int OC,
                             Precision precision) override {
    k::MatmulForward(out, x, Matrix(w), bias, N, IC, OC, precision);
    return absl::OkStatus();
  }
  absl::Status MatmulBackward(float* dx, float* dw, float* dbias,
                              const float* dout, const float* x, Weight w,
                              int N, int IC, int OC,
                              Precision precision) override {
    k::MatmulBackward(dx, dw, dbias, dout, x, Matrix(w), N, IC, OC, precision);
    return absl::OkStatus();
  }
  absl::Status MatmulTransposedForward(float* out, const float* x, Weight w,
                                       int N, int IC, int OC,
                                       Precision precision) override {
    k::MatmulTransposedForward(out, x, Matrix(w), N, IC, OC, precision);
    return absl::OkStatus();
  }
  absl::Status MatmulTransposedBackward(float* dx, float* dw, const float* dout,
                                        const float* x, Weight w, int N, int IC,
                                        int OC, Precision precision) override {
    k::MatmulTransposedBackward(dx, dw, dout, x, Matrix(w), N, IC, OC,
                                precision);
    return absl::OkStatus();
  }
  absl::Status AttentionForward(float* out, float* att, const float* qkv, int B,
                                int T, int C, int NH,
                                Precision precision) override {
    k::AttentionForward(out, att, qkv, B, T, C, NH, precision);
    return absl::OkStatus();
  }
  int64_t AttentionScratchElements(int B, int T, int C, int NH,
                                   int threads) const override {
    return std::min<int64_t>(int64_t{B} * NH, std::max(1, threads)) *
           static_cast<int64_t>(k::AttentionBackwardScratchPerHead(T, C, NH));
  }
  bool AttentionBackwardInPlace() const override { return true; }
  absl::Status AttentionBackward(float* dqkv, float* datt,
                                 int64_t datt_elements, const float* dout,
                                 const float* qkv, float* att, const float*,
                                 int B, int T, int C, int NH,
                                 Precision precision) override {
    const int64_t block =
        static_cast<int64_t>(k::AttentionBackwardScratchPerHead(T, C, NH));
    if (datt_elements < block) {
      return absl::InvalidArgumentError(
          absl::StrCat("AttentionBackward: datt holds ", datt_elements,
                       " floats, less than one head's ", block));
    }
    const int64_t heads =
        std::min<int64_t>(datt_elements / block, int64_t{B} * NH);
    k::AttentionBackward(dqkv, datt, static_cast<int>(heads), dout, qkv, att, B,
                         T, C, NH, precision);
    return absl::OkStatus();
  }
  absl::Status GeluForward(float* out, const float* x, size_t n) override {
    k::GeluForward(out, x, n);
    return absl::OkStatus();
  }
  absl::Status GeluBackward(float* dx, const float* x, const float* dout,
                            size_t n) override {
    k::GeluBackward(dx, x, dout, n);
    return absl::OkStatus();
  }
  absl::Status Add(float* out, const float* a, const float* b,
                   size_t n) override {
    k::Add(out, a, b, n);
    return absl::OkStatus();
  }
  absl::StatusOr<double> CrossEntropyForward(float* logits,
                                             const int32_t* targets, int N,
                                             int V,
                                             double* row_losses) override {
    return k::CrossEntropyForward(logits, targets, N, V, row_losses);
  }
  absl::Status CrossEntropyBackward(float* probs, const int32_t* targets,
                                    float dloss_per_row, int N,
                                    int V) override {
    k::CrossEntropyBackward(probs, targets, dloss_per_row, N, V);
    return absl::OkStatus();
  }
  absl::Status Zero(float* x, size_t n) override {
    std::memset(x, 0, n * sizeof(float));
    return absl::OkStatus();
  }
  absl::Status Widen(float* out, const void* x, DType dtype,
                     size_t n) override {
    return Cast(out, DType::kF32, x, dtype, n);
  }
  absl::Status TokenEmbeddingForward(float* out, const int32_t* tokens,
                                     const float* wte, int N, int C,
                                     int V) override {
    cpu_kernels::TokenEmbeddingForward(out, tokens, wte, N, C);
    return absl::OkStatus();
  }
  absl::Status TokenEmbeddingBackward(float* dwte, const float* dout,
                                      const int32_t* tokens, int N, int C,
                                      int V) override {
    cpu_kernels::TokenEmbeddingBackward(dwte, dout, tokens, N, C, V);
    return absl::OkStatus();
  }
  absl::Status RmsNormForward(float* out, float* rstd, const float* x,
                              const float* w, int N, int C,
                              float eps) override {
    cpu_kernels::RmsNormForward(out, rstd, x, w, N, C, eps);
    return absl::OkStatus();
  }
  absl::Status RmsNormBackward(float* dx, float* dw, const float* dout,
                               const float* x, const float* w,
                               const float* rstd, int N, int C) override {
    cpu_kernels::RmsNormBackward(dx, dw, dout, x, w, rstd, N, C);
    return absl::OkStatus();
  }
  absl::Status RopeTables(float* cos, float* sin, int T, int head_dim,
                          double theta) override {
    cpu_kernels::RopeTables(cos, sin, T, head_dim, theta);
    return absl::OkStatus();
  }
  absl::Status RopeForward(float* x, const float* cos, const float* sin, int N,
                           int T, int heads, int head_dim) override {
    cpu_kernels::RopeForward(x, cos, sin, N, T, heads, head_dim);
    return absl::OkStatus();
  }
  absl::Status RopeBackward(float* dx, const float* cos, const float* sin,
                            int N, int T, int heads, int head_dim) override {
    cpu_kernels::RopeBackward(dx, cos, sin, N, T, heads, head_dim);
    return absl::OkStatus();
  }
  absl::Status SwiGluForward(float* h, const float* gate, const float* up,
                             size_t n) override {
    cpu_kernels::SwiGluForward(h, gate, up, n);
    return absl::OkStatus();
  }
  absl::Status SwiGluBackward(float* dgate, float* dup, const float* dh,
                              const float* gate, const float* up,
                              size_t n) override {
    cpu_kernels::SwiGluBackward(dgate, dup, dh, gate, up, n);
    return absl::OkStatus();
  }
  absl::Status ExpandQkv(float* qkv, const float* q, const float* k,
                         const float* v, int N, int NH, int KV,
                         int head_dim) override {
    cpu_kernels::ExpandQkv(qkv, q, k, v, N, NH, KV, head_dim);
    return absl::OkStatus();
  }
  absl::Status ReduceQkvGrad(float* dq, float* dk, float* dv, const float* dqkv,
                             int N, int NH, int KV, int head_dim) override {
    cpu_kernels::ReduceQkvGrad(dq, dk, dv, dqkv, N, NH, KV, head_dim);
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<LayerBackend> MakeCpuLayerBackend() {
  return std::make_unique<CpuLayerBackend>();
}

}  // namespace chunkzero
