// The CUDA LayerBackend: kernels/cuda_kernels.h and cuda_layers.h
// on one GPU. Built everywhere; without --config=cuda every layer fails
// with Unimplemented.
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cpu_rmsnorm_rope_swiglu_kernels.h"
#include "kernels/cuda_kernels.h"
#include "kernels/cuda_layers.h"
#include "kernels/cuda_rmsnorm_rope_swiglu_kernels.h"
#include "kernels/layer_backend.h"
#include "tensor/cuda/cuda_runtime.h"

namespace chunkzero {
namespace {

namespace kernels = cuda_kernels;
namespace layers = cuda_layers;

layers::CudaWeight Matrix(LayerBackend::Weight w) { return {w.f32, w.bf16}; }

class CudaLayerBackend final : public LayerBackend {
 public:
  explicit CudaLayerBackend(Device device)
      : device_(device),
        scratch_(std::make_unique<layers::Bf16Scratch>(device)) {}

  Device device() const override { return device_; }
  bool Reads(Device device) const override { return device == device_; }
  void set_scratch_accounting(MemoryTracker* tracker) override {
    // Products still reading the old scratch were enqueued first: its
    // blocks go back to the stream-ordered allocator, not to other work.
    scratch_ = std::make_unique<layers::Bf16Scratch>(
        device_, StorageOptions{MemoryCategory::kActivation, tracker});
  }
  int64_t scratch_bytes() const override {
    return static_cast<int64_t>(scratch_->bytes());
  }
  bool fused_attention() const override { return fused_attention_; }
  absl::Status set_fused_attention(bool fused) override {
    fused_attention_ = fused;
    return absl::OkStatus();
  }

  absl::Status EmbeddingForward(float* out, const int32_t* tokens,
                                const float* wte, const float* wpe, int B,
                                int T, int C, int V) override {
    const ScopedCudaDevice on(device_.index());
    return kernels::EmbeddingForward(out, tokens, wte, wpe, B, T, C, V);
  }
  absl::Status EmbeddingBackward(float* dwte, float* dwpe, const float* dout,
                                 const int32_t* tokens, int B, int T, int C,
                                 int V, int P) override {
    const ScopedCudaDevice on(device_.index());
    return kernels::EmbeddingBackward(dwte, dwpe, dout, tokens, B, T, C, V, P);
  }
  absl::Status LayerNormForward(float* out, float* mean, float* rstd,
                                const float* x, const float* w, const float* b,
                                int N, int C) override {
    const ScopedCudaDevice on(device_.index());
    return kernels::LayerNormForward(out, mean, rstd, x, w, b, N, C);
  }
  absl::Status LayerNormBackward(float* dx, float* dw, float* db,
                                 const float* dout, const float* x,
                                 const float* w, const float* mean,
                                 const float* rstd, int N, int C) override {
    const ScopedCudaDevice on(device_.index());
    return kernels::LayerNormBackward(dx, dw, db, dout, x, w, mean, rstd, N, C);
  }
  absl::Status MatmulForward(float* out, const float* x, Weight w,
                             const float* bias, int N, int IC, int OC,
                             Precision precision) override {
    const ScopedCudaDevice on(device_.index());
    return layers::MatmulForward(out, x, Matrix(w), bias, N, IC, OC, precision,
                                 *scratch_);
  }
  absl::Status MatmulBackward(float* dx, float* dw, float* dbias,
                              const float* dout, const float* x, Weight w,
                              int N, int IC, int OC,
                              Precision precision) override {
    const ScopedCudaDevice on(device_.index());
    return layers::MatmulBackward(dx, dw, dbias, dout, x, Matrix(w), N, IC, OC,
                                  precision, *scratch_);
  }
  absl::Status MatmulTransposedForward(float* out, const float* x, Weight w,
                                       int N, int IC, int OC,
                                       Precision precision) override {
    const ScopedCudaDevice on(device_.index());
    return layers::MatmulTransposedForward(out, x, Matrix(w), N, IC, OC,
                                           precision, *scratch_);
  }
  absl::Status MatmulTransposedBackward(float* dx, float* dw, const float* dout,
                                        const float* x, Weight w, int N, int IC,
                                        int OC, Precision precision) override {
    const ScopedCudaDevice on(device_.index());
    return layers::MatmulTransposedBackward(dx, dw, dout, x, Matrix(w), N, IC,
                                            OC, precision, *scratch_);
  }
  absl::Status AttentionForward(float* out, float* att, const float* qkv, int B,
                                int T, int C, int NH,
                                Precision precision) override {
    const ScopedCudaDevice on(device_.index());
    if (fused_attention_) {  // att holds each query row's log-sum-exp.
      return layers::FusedAttentionForward(out, att, qkv, B, T, C, NH,
                                           precision);
    }
    return layers::AttentionForward(out, att, qkv, B, T, C, NH, precision,
                                    *scratch_);
  }
  absl::Status AttentionBackward(float* dqkv, float* datt,
                                 int64_t datt_elements, const float* dout,
                                 const float* qkv, float* att, const float* out,
                                 int B, int T, int C, int NH,
                                 Precision precision) override {
    if (datt_elements < AttentionElements(B, T, NH)) {
      return absl::InvalidArgumentError(
          absl::StrCat("AttentionBackward: datt holds ", datt_elements,
                       " floats, less than ", AttentionElements(B, T, NH)));
    }
    const ScopedCudaDevice on(device_.index());
    if (fused_attention_) {  // att: the log-sum-exps; datt: the deltas.
      return layers::FusedAttentionBackward(dqkv, datt, dout, qkv, out, att, B,
                                            T, C, NH, precision);
    }
    return layers::AttentionBackward(dqkv, datt, dout, qkv, att, B, T, C, NH,
                                     precision, *scratch_);
  }
  absl::Status GeluForward(float* out, const float* x, size_t n) override {
    const ScopedCudaDevice on(device_.index());
    return kernels::GeluForward(out, x, n);
  }
  absl::Status GeluBackward(float* dx, const float* x, const float* dout,
                            size_t n) override {
    const ScopedCudaDevice on(device_.index());
    return kernels::GeluBackward(dx, x, dout, n);
  }
  absl::Status Add(float* out, const float* a, const float* b,
                   size_t n) override {
    const ScopedCudaDevice on(device_.index());
    return kernels::Add(out, a, b, n);
  }
  absl::StatusOr<double> CrossEntropyForward(float* logits,
                                             const int32_t* targets, int N,
                                             int V,
                                             double* row_losses) override {
    const ScopedCudaDevice on(device_.index());
    return kernels::CrossEntropyForward(logits, targets, N, V, row_losses);
  }
  absl::Status CrossEntropyBackward(float* probs, const int32_t* targets,
                                    float dloss_per_row, int N,
                                    int V) override {
    const ScopedCudaDevice on(device_.index());
    return kernels::CrossEntropyBackward(probs, targets, dloss_per_row, N, V);
  }
  absl::Status Zero(float* x, size_t n) override {
    const ScopedCudaDevice on(device_.index());
    return kernels::Zero(x, n);
  }
  absl::Status Widen(float* out, const void* x, DType dtype,
                     size_t n) override {
    const ScopedCudaDevice on(device_.index());
    return kernels::Widen(out, static_cast<const uint16_t*>(x), dtype, n);
  }

  absl::Status TokenEmbeddingForward(float* out, const int32_t* tokens,
                                     const float* wte, int N, int C,
                                     int V) override {
    const ScopedCudaDevice on(device_.index());
    CZ_RETURN_IF_ERROR(on.status());
    return kernels::TokenEmbeddingForward(out, tokens, wte, N, C, V);
  }
  absl::Status TokenEmbeddingBackward(float* dwte, const float* dout,
                                      const int32_t* tokens, int N, int C,
                                      int V) override {
    const ScopedCudaDevice on(device_.index());
    CZ_RETURN_IF_ERROR(on.status());
    return kernels::TokenEmbeddingBackward(dwte, dout, tokens, N, C, V);
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
    cpu_kernels::RopeTables(host_cos.data(), host_sin.data(), T, head_dim,
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
  // Each call makes it the thread's current GPU while its kernels are
  // enqueued (ScopedCudaDevice), and restores the caller's.
  const Device device_;
  std::unique_ptr<layers::Bf16Scratch> scratch_;
  bool fused_attention_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<LayerBackend>> MakeCudaLayerBackend(
    Device device) {
  if (device.type() != DeviceType::kCuda) {
    return absl::InvalidArgumentError(
        absl::StrCat("the CUDA layers need a GPU, not ", device.ToString()));
  }
  return std::make_unique<CudaLayerBackend>(device);
}

}  // namespace chunkzero
