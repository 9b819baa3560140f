#include "tensor/cpu/elementwise_kernels.h"

#include "base/status_macros.h"
#include "tensor/cpu/cpu_features.h"
#include "tensor/cpu/internal/kernels_isa.h"

namespace chunkzero {
void Copy(void* out, const void* in, size_t bytes) {
  kernels_internal::Copy(out, in, bytes);
}

void ScaleF32(float* x, float a, size_t n) {
  kernels_internal::ScaleF32(BestKernelIsa(), x, a, n);
}
void ScaleF16(uint16_t* x, float a, size_t n) {
  kernels_internal::ScaleF16(BestKernelIsa(), x, a, n);
}
void ScaleBF16(uint16_t* x, float a, size_t n) {
  kernels_internal::ScaleBF16(BestKernelIsa(), x, a, n);
}
void AxpyF32(float* y, float a, const float* x, size_t n) {
  kernels_internal::AxpyF32(BestKernelIsa(), y, a, x, n);
}
void AxpyF16(uint16_t* y, float a, const uint16_t* x, size_t n) {
  kernels_internal::AxpyF16(BestKernelIsa(), y, a, x, n);
}
void AxpyBF16(uint16_t* y, float a, const uint16_t* x, size_t n) {
  kernels_internal::AxpyBF16(BestKernelIsa(), y, a, x, n);
}

absl::Status Scale(void* x, DType dtype, float a, size_t n) {
  CZ_RETURN_IF_ERROR(
      kernels_internal::CheckKernelArgs("Scale", {dtype}, n, {x}));
  switch (dtype) {
    case DType::kF32:
      ScaleF32(static_cast<float*>(x), a, n);
      break;
    case DType::kF16:
      ScaleF16(static_cast<uint16_t*>(x), a, n);
      break;
    case DType::kBF16:
      ScaleBF16(static_cast<uint16_t*>(x), a, n);
      break;
    default:  // CheckKernelArgs refused the others.
      break;
  }
  return absl::OkStatus();
}

absl::Status Axpy(void* y, DType dtype, float a, const void* x, size_t n) {
  CZ_RETURN_IF_ERROR(
      kernels_internal::CheckKernelArgs("Axpy", {dtype}, n, {y, x}));
  switch (dtype) {
    case DType::kF32:
      AxpyF32(static_cast<float*>(y), a, static_cast<const float*>(x), n);
      break;
    case DType::kF16:
      AxpyF16(static_cast<uint16_t*>(y), a, static_cast<const uint16_t*>(x), n);
      break;
    case DType::kBF16:
      AxpyBF16(static_cast<uint16_t*>(y), a, static_cast<const uint16_t*>(x),
               n);
      break;
    default:  // CheckKernelArgs refused the others.
      break;
  }
  return absl::OkStatus();
}

}  // namespace chunkzero
