#include "kernels/cuda_layers.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda_gemm.h"
#include "kernels/cuda_kernels.h"
#include "kernels/internal/cuda_fused_attention.h"

namespace chunkzero {
namespace cuda_layers {
namespace {

using gemm::CudaGemm;
using gemm::DeviceMatrix;
constexpr gemm::Transpose kNo = gemm::Transpose::kNo;
constexpr gemm::Transpose kYes = gemm::Transpose::kYes;

// `elements` past `base`, in an operand of `precision` (f32 or bf16 bits).
const void* At(const void* base, size_t elements, Precision precision) {
  const size_t element = precision == Precision::kBf16 ? 2 : 4;
  return static_cast<const char*>(base) + elements * element;
}

// What a product of `precision` reads for the f32 activations x[n]: x
// itself, or its bf16 rounding in scratch slot `slot`.
absl::StatusOr<const void*> Operand(const float* x, size_t n,
                                    Precision precision, Bf16Scratch& scratch,
                                    int slot, CudaStream stream) {
  if (precision != Precision::kBf16) return x;
  CZ_ASSIGN_OR_RETURN(uint16_t * bits, scratch.Get(slot, n));
  CZ_RETURN_IF_ERROR(cuda_kernels::RoundToBf16(bits, x, n, stream));
  return bits;
}

// The weight's operand: its bf16 copy for a bf16 product when it has one,
// else as Operand.
absl::StatusOr<const void*> WeightOperand(const CudaWeight& w, size_t n,
                                          Precision precision,
                                          Bf16Scratch& scratch, int slot,
                                          CudaStream stream) {
  if (precision == Precision::kBf16 && w.bf16 != nullptr) return w.bf16;
  if (w.f32 == nullptr) {
    return absl::InvalidArgumentError(
        "a weight matrix with no f32 values (and no bf16 copy for a bf16 "
        "product)");
  }
  return Operand(w.f32, n, precision, scratch, slot, stream);
}

}  // namespace

Bf16Scratch::Bf16Scratch(Device device, StorageOptions options)
    : device_(device), options_(options) {}

absl::StatusOr<uint16_t*> Bf16Scratch::Get(int slot, size_t n) {
  if (slot < 0 || slot >= kSlots) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bf16 scratch slot ", slot, " is not in [0, ", kSlots, ")"));
  }
  std::shared_ptr<Storage>& storage = slots_[slot];
  const size_t bytes = n * sizeof(uint16_t);
  if (storage == nullptr || storage->nbytes() < bytes) {
    // The old block goes back to the allocator now; products still reading
    // it were enqueued first and run first (stream order).
    storage.reset();
    absl::StatusOr<std::shared_ptr<Storage>> made =
        Storage::Create(bytes, device_, options_);
    CZ_RETURN_IF_ERROR(made.status(), "bf16 scratch for ", n, " elements on ",
                       device_.ToString());
    storage = *std::move(made);
  }
  return static_cast<uint16_t*>(storage->data());
}

size_t Bf16Scratch::bytes() const {
  size_t total = 0;
  for (const auto& storage : slots_) {
    if (storage != nullptr) total += storage->nbytes();
  }
  return total;
}

absl::Status MatmulForward(float* out, const float* x, const CudaWeight& w,
                           const float* bias, int N, int IC, int OC,
                           Precision precision, Bf16Scratch& scratch,
                           CudaStream stream) {
  float beta = 0.0f;
  if (bias != nullptr) {
    CZ_RETURN_IF_ERROR(cuda_kernels::BroadcastRows(out, bias, N, OC, stream));
    beta = 1.0f;
  }
  CZ_ASSIGN_OR_RETURN(const void* xa, Operand(x, size_t{1} * N * IC, precision,
                                              scratch, 0, stream));
  CZ_ASSIGN_OR_RETURN(
      const void* wa,
      WeightOperand(w, size_t{1} * IC * OC, precision, scratch, 1, stream));
  return CudaGemm(kNo, kNo, N, OC, IC, 1.0f, {xa, IC}, {wa, OC}, beta, out, OC,
                  precision, 1, 0, stream);
}

absl::Status MatmulBackward(float* dx, float* dw, float* dbias,
                            const float* dout, const float* x,
                            const CudaWeight& w, int N, int IC, int OC,
                            Precision precision, Bf16Scratch& scratch,
                            CudaStream stream) {
  CZ_ASSIGN_OR_RETURN(const void* grad, Operand(dout, size_t{1} * N * OC,
                                                precision, scratch, 0, stream));
  // dw and dbias first: dx may overwrite x (the model's dfch in place).
  CZ_ASSIGN_OR_RETURN(const void* xa, Operand(x, size_t{1} * N * IC, precision,
                                              scratch, 2, stream));
  CZ_RETURN_IF_ERROR(CudaGemm(kYes, kNo, IC, OC, N, 1.0f, {xa, IC}, {grad, OC},
                              0.0f, dw, OC, precision, 1, 0, stream));
  if (dbias != nullptr) {
    CZ_RETURN_IF_ERROR(cuda_kernels::ColumnSums(dbias, dout, N, OC, stream));
  }
  CZ_ASSIGN_OR_RETURN(
      const void* wa,
      WeightOperand(w, size_t{1} * IC * OC, precision, scratch, 1, stream));
  return CudaGemm(kNo, kYes, N, IC, OC, 1.0f, {grad, OC}, {wa, OC}, 0.0f, dx,
                  IC, precision, 1, 0, stream);
}

absl::Status MatmulTransposedForward(float* out, const float* x,
                                     const CudaWeight& w, int N, int IC, int OC,
                                     Precision precision, Bf16Scratch& scratch,
                                     CudaStream stream) {
  CZ_ASSIGN_OR_RETURN(const void* xa, Operand(x, size_t{1} * N * IC, precision,
                                              scratch, 0, stream));
  CZ_ASSIGN_OR_RETURN(
      const void* wa,
      WeightOperand(w, size_t{1} * OC * IC, precision, scratch, 1, stream));
  return CudaGemm(kNo, kYes, N, OC, IC, 1.0f, {xa, IC}, {wa, IC}, 0.0f, out, OC,
                  precision, 1, 0, stream);
}

absl::Status MatmulTransposedBackward(float* dx, float* dw, const float* dout,
                                      const float* x, const CudaWeight& w,
                                      int N, int IC, int OC,
                                      Precision precision, Bf16Scratch& scratch,
                                      CudaStream stream) {
  CZ_ASSIGN_OR_RETURN(const void* grad, Operand(dout, size_t{1} * N * OC,
                                                precision, scratch, 0, stream));
  CZ_ASSIGN_OR_RETURN(
      const void* wa,
      WeightOperand(w, size_t{1} * OC * IC, precision, scratch, 1, stream));
  CZ_RETURN_IF_ERROR(CudaGemm(kNo, kNo, N, IC, OC, 1.0f, {grad, OC}, {wa, IC},
                              0.0f, dx, IC, precision, 1, 0, stream));
  CZ_ASSIGN_OR_RETURN(const void* xa, Operand(x, size_t{1} * N * IC, precision,
                                              scratch, 2, stream));
  return CudaGemm(kYes, kNo, OC, IC, N, 1.0f, {grad, OC}, {xa, IC}, 0.0f, dw,
                  IC, precision, 1, 0, stream);
}

// Per sequence b, the heads are one strided batch: head h's Q, K and V are
// the [T, hd] column blocks at h * hd of qkv's rows (leading dimension 3C),
// its scores the h-th T x T block of att.
absl::Status AttentionForward(float* out, float* att, const float* qkv, int B,
                              int T, int C, int NH, Precision precision,
                              Bf16Scratch& scratch, CudaStream stream) {
  const int hd = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t tt = int64_t{T} * T;
  const size_t rows = size_t{1} * B * T;
  CZ_ASSIGN_OR_RETURN(const void* q_all, Operand(qkv, rows * 3 * C, precision,
                                                 scratch, 0, stream));
  for (int b = 0; b < B; ++b) {
    const size_t row0 = size_t{1} * b * T * 3 * C;
    CZ_RETURN_IF_ERROR(CudaGemm(
        kNo, kYes, T, T, hd, scale, {At(q_all, row0, precision), 3 * C, hd},
        {At(q_all, row0 + C, precision), 3 * C, hd}, 0.0f, att + b * NH * tt, T,
        precision, NH, tt, stream));
  }
  CZ_RETURN_IF_ERROR(
      cuda_kernels::CausalSoftmax(att, size_t{1} * B * NH * T, T, stream));
  CZ_ASSIGN_OR_RETURN(
      const void* p_all,
      Operand(att, size_t{1} * B * NH * tt, precision, scratch, 1, stream));
  for (int b = 0; b < B; ++b) {
    const size_t row0 = size_t{1} * b * T * 3 * C;
    CZ_RETURN_IF_ERROR(
        CudaGemm(kNo, kNo, T, hd, T, 1.0f,
                 {At(p_all, size_t{1} * b * NH * tt, precision), T, tt},
                 {At(q_all, row0 + 2 * C, precision), 3 * C, hd}, 0.0f,
                 out + size_t{1} * b * T * C, C, precision, NH, hd, stream));
  }
  return absl::OkStatus();
}

// From S = Q K^T * scale, P = softmax(S), Y = P V: dP = dY V^T, dV = P^T dY,
// dS = P * (dP - rowsum(P * dP)) * scale, dQ = dS K, dK = dS^T Q.
absl::Status AttentionBackward(float* dqkv, float* datt, const float* dout,
                               const float* qkv, const float* att, int B, int T,
                               int C, int NH, Precision precision,
                               Bf16Scratch& scratch, CudaStream stream) {
  const int hd = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t tt = int64_t{T} * T;
  const size_t rows = size_t{1} * B * T;
  const size_t scores = size_t{1} * B * NH * tt;
  CZ_ASSIGN_OR_RETURN(const void* q_all, Operand(qkv, rows * 3 * C, precision,
                                                 scratch, 0, stream));
  CZ_ASSIGN_OR_RETURN(const void* dy_all,
                      Operand(dout, rows * C, precision, scratch, 1, stream));
  CZ_ASSIGN_OR_RETURN(const void* p_all,
                      Operand(att, scores, precision, scratch, 2, stream));
  for (int b = 0; b < B; ++b) {
    const size_t row0 = size_t{1} * b * T * 3 * C;
    const void* dy = At(dy_all, size_t{1} * b * T * C, precision);
    CZ_RETURN_IF_ERROR(CudaGemm(kNo, kYes, T, T, hd, 1.0f, {dy, C, hd},
                                {At(q_all, row0 + 2 * C, precision), 3 * C, hd},
                                0.0f, datt + b * NH * tt, T, precision, NH, tt,
                                stream));
    CZ_RETURN_IF_ERROR(CudaGemm(
        kYes, kNo, T, hd, T, 1.0f,
        {At(p_all, size_t{1} * b * NH * tt, precision), T, tt}, {dy, C, hd},
        0.0f, dqkv + row0 + 2 * C, 3 * C, precision, NH, hd, stream));
  }
  CZ_RETURN_IF_ERROR(cuda_kernels::CausalSoftmaxBackward(
      datt, att, size_t{1} * B * NH * T, T, scale, stream));
  // Slot 2 again: the products reading P were enqueued before this.
  CZ_ASSIGN_OR_RETURN(const void* ds_all,
                      Operand(datt, scores, precision, scratch, 2, stream));
  for (int b = 0; b < B; ++b) {
    const size_t row0 = size_t{1} * b * T * 3 * C;
    const DeviceMatrix ds{At(ds_all, size_t{1} * b * NH * tt, precision), T,
                          tt};
    CZ_RETURN_IF_ERROR(CudaGemm(kNo, kNo, T, hd, T, 1.0f, ds,
                                {At(q_all, row0 + C, precision), 3 * C, hd},
                                0.0f, dqkv + row0, 3 * C, precision, NH, hd,
                                stream));
    CZ_RETURN_IF_ERROR(CudaGemm(
        kYes, kNo, T, hd, T, 1.0f, ds, {At(q_all, row0, precision), 3 * C, hd},
        0.0f, dqkv + row0 + C, 3 * C, precision, NH, hd, stream));
  }
  return absl::OkStatus();
}

namespace {

absl::Status CheckHeadDim(int C, int NH) {
  if (NH > 0 && C % NH == 0 &&
      C / NH <= cuda_kernels_internal::kMaxFusedHeadDim) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("fused attention: head size ", NH > 0 ? C / NH : 0, " (C ",
                   C, ", ", NH, " heads); it takes whole heads of at most ",
                   cuda_kernels_internal::kMaxFusedHeadDim));
}

}  // namespace

absl::Status FusedAttentionForward(float* out, float* lse, const float* qkv,
                                   int B, int T, int C, int NH,
                                   Precision precision, CudaStream stream) {
  CZ_RETURN_IF_ERROR(CheckHeadDim(C, NH));
  return cuda_kernels::LaunchStatus(
      cuda_kernels_internal::FusedAttentionForward(
          out, lse, qkv, B, T, C, NH, precision == Precision::kBf16, stream),
      "fused attention forward");
}

absl::Status FusedAttentionBackward(float* dqkv, float* delta,
                                    const float* dout, const float* qkv,
                                    const float* out, const float* lse, int B,
                                    int T, int C, int NH, Precision precision,
                                    CudaStream stream) {
  CZ_RETURN_IF_ERROR(CheckHeadDim(C, NH));
  return cuda_kernels::LaunchStatus(
      cuda_kernels_internal::FusedAttentionBackward(
          dqkv, delta, dout, qkv, out, lse, B, T, C, NH,
          precision == Precision::kBf16, stream),
      "fused attention backward");
}

}  // namespace cuda_layers
}  // namespace chunkzero
