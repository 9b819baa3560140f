#include "kernels/cuda_gemm.h"

#include "absl/strings/str_cat.h"
#include "kernels/internal/cublas_call.h"

namespace chunkzero {
namespace gemm {
namespace {

// "gemm(N, T, m=4, n=5, k=6, bf16, batch 2)", for messages.
std::string Describe(Transpose trans_a, Transpose trans_b, int m, int n, int k,
                     Precision precision, int batch) {
  return absl::StrCat("gemm(", trans_a == Transpose::kYes ? "T" : "N", ", ",
                      trans_b == Transpose::kYes ? "T" : "N", ", m=", m,
                      ", n=", n, ", k=", k, ", ",
                      precision == Precision::kBf16 ? "bf16" : "f32",
                      batch == 1 ? "" : absl::StrCat(", batch ", batch), ")");
}

// OK when an operand stored `rows` x `cols` fits its leading dimension.
absl::Status CheckLd(const char* name, int ld, int cols) {
  if (ld >= 1 && ld >= cols) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "leading dimension of ", name, " is ", ld, ", below its row of ", cols));
}

}  // namespace

absl::Status CudaGemm(Transpose trans_a, Transpose trans_b, int m, int n, int k,
                      float alpha, DeviceMatrix a, DeviceMatrix b, float beta,
                      float* c, int ldc, Precision precision, int batch,
                      int64_t stride_c, CudaStream stream) {
  // The call's description, for errors only: not built on the hot path.
  auto described = [&](const absl::Status& error) {
    return absl::Status(
        error.code(),
        absl::StrCat(Describe(trans_a, trans_b, m, n, k, precision, batch),
                     ": ", error.message()));
  };
  absl::Status valid = m < 0 || n < 0 || k < 0
                           ? absl::InvalidArgumentError("negative size")
                       : batch < 1 ? absl::InvalidArgumentError("batch below 1")
                       : a.stride < 0 || b.stride < 0 || stride_c < 0
                           ? absl::InvalidArgumentError("negative batch stride")
                           : absl::OkStatus();
  // Stored shapes, row-major: A is m x k (k x m transposed), B is k x n
  // (n x k transposed), C is m x n.
  if (valid.ok()) {
    valid = CheckLd("A", a.ld, trans_a == Transpose::kYes ? m : k);
  }
  if (valid.ok()) {
    valid = CheckLd("B", b.ld, trans_b == Transpose::kYes ? k : n);
  }
  if (valid.ok()) valid = CheckLd("C", ldc, n);
  if (!valid.ok()) return described(valid);
  if (m == 0 || n == 0) return absl::OkStatus();  // Nothing to write.
  const absl::Status ran =
      gemm_internal::CublasGemm(trans_a, trans_b, m, n, k, alpha, a, b, beta, c,
                                ldc, precision, batch, stride_c, stream);
  return ran.ok() ? ran : described(ran);
}

}  // namespace gemm
}  // namespace chunkzero
