// gemm_internal::CublasGemm in the CUDA build: cublasGemmStridedBatchedEx.
#include "kernels/internal/cublas_call.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <map>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace chunkzero {
namespace gemm_internal {
namespace {

absl::Status FromCublas(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(call, ": ", cublasGetStatusString(status)));
}

// This thread's cuBLAS handle for each GPU it has used: a handle is not to
// be shared between threads that call at once. Destroyed when the thread
// ends (errors ignored: the context may be gone at process exit).
class ThreadHandles {
 public:
  ~ThreadHandles() {
    for (auto& [device, handle] : handles_) cublasDestroy(handle);
  }

  absl::StatusOr<cublasHandle_t> For(int device) {
    auto it = handles_.find(device);
    if (it != handles_.end()) return it->second;
    cublasHandle_t handle = nullptr;
    if (absl::Status s = FromCublas(cublasCreate(&handle), "cublasCreate");
        !s.ok()) {
      return s;
    }
    // The compute stream (the legacy default stream), and f32 products in
    // f32: no reduced-precision reductions (TF32 is off by default).
    absl::Status s =
        FromCublas(cublasSetStream(handle, nullptr), "cublasSetStream");
    if (s.ok()) {
      s = FromCublas(
          cublasSetMathMode(
              handle, static_cast<cublasMath_t>(
                          CUBLAS_DEFAULT_MATH |
                          CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
          "cublasSetMathMode");
    }
    if (!s.ok()) {
      cublasDestroy(handle);
      return s;
    }
    handles_[device] = handle;
    return handle;
  }

 private:
  std::map<int, cublasHandle_t> handles_;
};

cublasOperation_t Op(gemm::Transpose t) {
  return t == gemm::Transpose::kYes ? CUBLAS_OP_T : CUBLAS_OP_N;
}

}  // namespace

absl::Status CublasGemm(gemm::Transpose trans_a, gemm::Transpose trans_b, int m,
                        int n, int k, float alpha, gemm::DeviceMatrix a,
                        gemm::DeviceMatrix b, float beta, float* c, int ldc,
                        gemm::Precision precision, int batch, int64_t stride_c,
                        CudaStream stream) {
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) {
    return absl::InternalError(
        absl::StrCat("cudaGetDevice: ", cudaGetErrorString(e)));
  }
  thread_local ThreadHandles handles;
  absl::StatusOr<cublasHandle_t> handle = handles.For(device);
  if (!handle.ok()) return handle.status();
  // The handle is this thread's; the stream is the caller's, set per call
  // (cheap: cuBLAS only records it).
  if (absl::Status s = FromCublas(
          cublasSetStream(*handle, reinterpret_cast<cudaStream_t>(stream)),
          "cublasSetStream");
      !s.ok()) {
    return s;
  }
  const cudaDataType_t in =
      precision == gemm::Precision::kBf16 ? CUDA_R_16BF : CUDA_R_32F;
  // cuBLAS is column-major: a row-major C is C^T there, and
  // C^T = op(B)^T op(A)^T, so B goes first and m and n swap.
  return FromCublas(
      cublasGemmStridedBatchedEx(
          *handle, Op(trans_b), Op(trans_a), n, m, k, &alpha, b.data, in, b.ld,
          b.stride, a.data, in, a.ld, a.stride, &beta, c, CUDA_R_32F, ldc,
          stride_c, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmStridedBatchedEx");
}

}  // namespace gemm_internal
}  // namespace chunkzero
