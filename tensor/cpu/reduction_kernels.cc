#include "tensor/cpu/reduction_kernels.h"

#include "base/status_macros.h"
#include "tensor/cpu/cpu_features.h"
#include "tensor/cpu/internal/kernels_isa.h"

namespace chunkzero {
bool HasInfOrNanF32(const float* x, size_t n) {
  return kernels_internal::HasInfOrNanF32(BestKernelIsa(), x, n);
}
bool HasInfOrNanF16(const uint16_t* x, size_t n) {
  return kernels_internal::HasInfOrNanF16(BestKernelIsa(), x, n);
}
bool HasInfOrNanBF16(const uint16_t* x, size_t n) {
  return kernels_internal::HasInfOrNanBF16(BestKernelIsa(), x, n);
}

double SumOfSquaresF32(const float* x, size_t n) {
  return kernels_internal::SumOfSquaresF32(BestKernelIsa(), x, n);
}
double SumOfSquaresF16(const uint16_t* x, size_t n) {
  return kernels_internal::SumOfSquaresF16(BestKernelIsa(), x, n);
}
double SumOfSquaresBF16(const uint16_t* x, size_t n) {
  return kernels_internal::SumOfSquaresBF16(BestKernelIsa(), x, n);
}

absl::StatusOr<bool> HasInfOrNan(const void* x, DType dtype, size_t n) {
  CZ_RETURN_IF_ERROR(
      kernels_internal::CheckKernelArgs("HasInfOrNan", {dtype}, n, {x}));
  switch (dtype) {
    case DType::kF32:
      return HasInfOrNanF32(static_cast<const float*>(x), n);
    case DType::kF16:
      return HasInfOrNanF16(static_cast<const uint16_t*>(x), n);
    case DType::kBF16:
      return HasInfOrNanBF16(static_cast<const uint16_t*>(x), n);
    default:  // CheckKernelArgs refused the others.
      break;
  }
  return false;  // Unreachable: CheckKernelArgs rejected other values.
}

absl::StatusOr<double> SumOfSquares(const void* x, DType dtype, size_t n) {
  CZ_RETURN_IF_ERROR(
      kernels_internal::CheckKernelArgs("SumOfSquares", {dtype}, n, {x}));
  switch (dtype) {
    case DType::kF32:
      return SumOfSquaresF32(static_cast<const float*>(x), n);
    case DType::kF16:
      return SumOfSquaresF16(static_cast<const uint16_t*>(x), n);
    case DType::kBF16:
      return SumOfSquaresBF16(static_cast<const uint16_t*>(x), n);
    default:  // CheckKernelArgs refused the others.
      break;
  }
  return 0.0;  // Unreachable: CheckKernelArgs rejected other values.
}

}  // namespace chunkzero
