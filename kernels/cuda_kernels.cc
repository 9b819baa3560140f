#include "kernels/cuda_kernels.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/internal/cuda_kernels_nvcc.h"
#include "tensor/cuda/cuda_runtime.h"

namespace chunkzero {
namespace cuda_kernels {
namespace {

namespace internal = cuda_kernels_internal;

}  // namespace

absl::Status LaunchStatus(int error, const char* what) {
  if (error == 0) return absl::OkStatus();
  const std::string message =
      absl::StrCat(what, " on the GPU: ", internal::ErrorName(error));
  return error == internal::kNoCuda ? absl::UnimplementedError(message)
                                    : absl::InternalError(message);
}

absl::Status EmbeddingForward(float* out, const int32_t* tokens,
                              const float* wte, const float* wpe, int B, int T,
                              int C, int V, CudaStream stream) {
  return LaunchStatus(
      internal::EmbeddingForward(out, tokens, wte, wpe, B * T, T, C, V, stream),
      "embedding forward");
}

absl::Status EmbeddingBackward(float* dwte, float* dwpe, const float* dout,
                               const int32_t* tokens, int B, int T, int C,
                               int V, int P, CudaStream stream) {
  return LaunchStatus(internal::EmbeddingBackward(dwte, dwpe, dout, tokens,
                                                  B * T, T, C, V, P, stream),
                      "embedding backward");
}

absl::Status LayerNormForward(float* out, float* mean, float* rstd,
                              const float* x, const float* w, const float* b,
                              int N, int C, CudaStream stream) {
  return LaunchStatus(
      internal::LayerNormForward(out, mean, rstd, x, w, b, N, C, stream),
      "layernorm forward");
}

absl::Status LayerNormBackward(float* dx, float* dw, float* db,
                               const float* dout, const float* x,
                               const float* w, const float* mean,
                               const float* rstd, int N, int C,
                               CudaStream stream) {
  return LaunchStatus(internal::LayerNormBackward(dx, dw, db, dout, x, w, mean,
                                                  rstd, N, C, stream),
                      "layernorm backward");
}

absl::Status BroadcastRows(float* out, const float* bias, int N, int C,
                           CudaStream stream) {
  return LaunchStatus(internal::BroadcastRows(out, bias, N, C, stream),
                      "bias broadcast");
}

absl::Status ColumnSums(float* out, const float* in, int N, int C,
                        CudaStream stream) {
  return LaunchStatus(internal::ColumnSums(out, in, N, C, stream),
                      "column sums");
}

absl::Status GeluForward(float* out, const float* x, size_t n,
                         CudaStream stream) {
  return LaunchStatus(internal::GeluForward(out, x, n, stream), "gelu forward");
}

absl::Status GeluBackward(float* dx, const float* x, const float* dout,
                          size_t n, CudaStream stream) {
  return LaunchStatus(internal::GeluBackward(dx, x, dout, n, stream),
                      "gelu backward");
}

absl::Status Add(float* out, const float* a, const float* b, size_t n,
                 CudaStream stream) {
  return LaunchStatus(internal::Add(out, a, b, n, stream), "add");
}

absl::Status RoundToBf16(uint16_t* out, const float* x, size_t n,
                         CudaStream stream) {
  return LaunchStatus(internal::RoundToBf16(out, x, n, stream),
                      "bf16 rounding");
}

absl::Status Widen(float* out, const uint16_t* x, DType dtype, size_t n,
                   CudaStream stream) {
  switch (dtype) {
    case DType::kBF16:
      return LaunchStatus(internal::WidenBf16(out, x, n, stream),
                          "bf16 widening");
    case DType::kF16:
      return LaunchStatus(internal::WidenF16(out, x, n, stream),
                          "f16 widening");
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "widening ", DTypeName(dtype), " on the GPU: only bf16 and f16"));
  }
}

absl::Status Zero(float* x, size_t n, CudaStream stream) {
  return LaunchStatus(internal::Zero(x, n, stream), "zeroing");
}

absl::Status CausalSoftmax(float* att, size_t rows, int T, CudaStream stream) {
  return LaunchStatus(internal::CausalSoftmax(att, rows, T, stream),
                      "causal softmax");
}

absl::Status CausalSoftmaxBackward(float* datt, const float* att, size_t rows,
                                   int T, float scale, CudaStream stream) {
  return LaunchStatus(
      internal::CausalSoftmaxBackward(datt, att, rows, T, scale, stream),
      "causal softmax backward");
}

absl::StatusOr<double> CrossEntropyForward(float* logits,
                                           const int32_t* targets, int N, int V,
                                           double* row_losses,
                                           CudaStream stream) {
  if (absl::Status s =
          LaunchStatus(internal::CrossEntropyForward(logits, targets, N, V,
                                                     row_losses, stream),
                       "cross-entropy forward");
      !s.ok()) {
    return s;
  }
  if (N == 0) return 0.0;
  // The host needs the value: copy on the stream, wait for the stream.
  std::vector<double> losses(N);
  absl::Status s =
      CudaMemcpyAsync(losses.data(), row_losses, sizeof(double) * N, stream);
  if (s.ok()) s = CudaStreamSynchronize(stream);
  if (!s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("cross-entropy forward: ",
                                     "reading the row losses: ", s.message()));
  }
  double sum = 0;
  for (double loss : losses) sum += loss;
  return sum / N;
}

absl::Status CrossEntropyBackward(float* probs, const int32_t* targets,
                                  float dloss_per_row, int N, int V,
                                  CudaStream stream) {
  return LaunchStatus(internal::CrossEntropyBackward(
                          probs, targets, dloss_per_row, N, V, stream),
                      "cross-entropy backward");
}

}  // namespace cuda_kernels
}  // namespace chunkzero
