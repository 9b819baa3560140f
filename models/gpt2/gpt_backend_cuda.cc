// The CUDA GptBackend: models/gpt2/cuda_gpt_kernels.h and cuda_gpt_layers.h
// on one GPU. Built everywhere; without --config=cuda every layer fails
// with Unimplemented.
#include <memory>

#include "absl/strings/str_cat.h"
#include "models/gpt2/cuda_gpt_kernels.h"
#include "models/gpt2/cuda_gpt_layers.h"
#include "models/gpt2/gpt_backend.h"
#include "tensor/cuda/cuda_runtime.h"

namespace chunkzero {
namespace {

namespace kernels = cuda_gpt_kernels;
namespace layers = cuda_gpt_layers;

layers::CudaWeight Matrix(GptBackend::Weight w) { return {w.f32, w.bf16}; }

class CudaGptBackend final : public GptBackend {
 public:
  explicit CudaGptBackend(Device device)
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

 private:
  // Each call makes it the thread's current GPU while its kernels are
  // enqueued (ScopedCudaDevice), and restores the caller's.
  const Device device_;
  std::unique_ptr<layers::Bf16Scratch> scratch_;
  bool fused_attention_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GptBackend>> MakeCudaGptBackend(Device device) {
  if (device.type() != DeviceType::kCuda) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the CUDA GPT-2 layers need a GPU, not ", device.ToString()));
  }
  return std::make_unique<CudaGptBackend>(device);
}

}  // namespace chunkzero
