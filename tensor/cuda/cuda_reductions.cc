#include "tensor/cuda/cuda_reductions.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "tensor/cuda/cuda_elementwise_kernels.h"
#include "tensor/cuda/cuda_reduction_kernels.h"

namespace chunkzero {
namespace {

absl::Status CheckArgs(const char* op, const void* x, DType dtype, size_t n) {
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no GPU ", op, " for ", DTypeName(dtype), " (f32, f16, bf16 only)"));
  }
  if (x == nullptr && n > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPU ", op, " of ", n, " elements: null array"));
  }
  return absl::OkStatus();
}

absl::Status FromCuda(int error, const char* op, DType dtype, size_t n) {
  if (error == 0) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(op, " of ", n, " ", DTypeName(dtype),
                   " elements on the GPU: ", cuda_kernels::ErrorName(error)));
}

}  // namespace

absl::StatusOr<bool> CudaHasInfOrNan(const void* x, DType dtype, size_t n) {
  const char* op = "HasInfOrNan";
  if (absl::Status s = CheckArgs(op, x, dtype, n); !s.ok()) return s;
  bool result = false;
  int error = 0;
  switch (dtype) {
    case DType::kF32:
      error = cuda_kernels::HasInfOrNanF32(static_cast<const float*>(x), n,
                                           &result);
      break;
    case DType::kF16:
      error = cuda_kernels::HasInfOrNanF16(static_cast<const uint16_t*>(x), n,
                                           &result);
      break;
    default:
      error = cuda_kernels::HasInfOrNanBF16(static_cast<const uint16_t*>(x), n,
                                            &result);
      break;
  }
  if (absl::Status s = FromCuda(error, op, dtype, n); !s.ok()) return s;
  return result;
}

absl::StatusOr<double> CudaSumOfSquares(const void* x, DType dtype, size_t n) {
  const char* op = "SumOfSquares";
  if (absl::Status s = CheckArgs(op, x, dtype, n); !s.ok()) return s;
  double result = 0.0;
  int error = 0;
  switch (dtype) {
    case DType::kF32:
      error = cuda_kernels::SumOfSquaresF32(static_cast<const float*>(x), n,
                                            &result);
      break;
    case DType::kF16:
      error = cuda_kernels::SumOfSquaresF16(static_cast<const uint16_t*>(x), n,
                                            &result);
      break;
    default:
      error = cuda_kernels::SumOfSquaresBF16(static_cast<const uint16_t*>(x), n,
                                             &result);
      break;
  }
  if (absl::Status s = FromCuda(error, op, dtype, n); !s.ok()) return s;
  return result;
}

}  // namespace chunkzero
