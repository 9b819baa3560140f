#include "tensor/cpu/cast_kernels.h"

#include <algorithm>

#include "base/parallel_for.h"
#include "base/status_macros.h"
#include "tensor/cpu/cpu_features.h"
#include "tensor/cpu/internal/kernels_isa.h"

namespace chunkzero {

void CastF32ToF16(uint16_t* out, const float* in, size_t n) {
  kernels_internal::CastF32ToF16(BestKernelIsa(), out, in, n);
}
void CastF16ToF32(float* out, const uint16_t* in, size_t n) {
  kernels_internal::CastF16ToF32(BestKernelIsa(), out, in, n);
}
void CastF32ToBF16(uint16_t* out, const float* in, size_t n) {
  kernels_internal::CastF32ToBF16(BestKernelIsa(), out, in, n);
}
void CastBF16ToF32(float* out, const uint16_t* in, size_t n) {
  kernels_internal::CastBF16ToF32(BestKernelIsa(), out, in, n);
}
void CastF16ToBF16(uint16_t* out, const uint16_t* in, size_t n) {
  kernels_internal::CastF16ToBF16(BestKernelIsa(), out, in, n);
}
void CastBF16ToF16(uint16_t* out, const uint16_t* in, size_t n) {
  kernels_internal::CastBF16ToF16(BestKernelIsa(), out, in, n);
}

absl::Status Cast(void* out, DType out_dtype, const void* in, DType in_dtype,
                  size_t n) {
  CZ_RETURN_IF_ERROR(kernels_internal::CheckKernelArgs(
                         "Cast", {out_dtype, in_dtype}, n, {out, in}),
                     DTypeName(in_dtype), " -> ", DTypeName(out_dtype));
  if (n == 0) return absl::OkStatus();
  if (out_dtype == in_dtype) {
    kernels_internal::Copy(out, in, n * ElementSize(in_dtype));
    return absl::OkStatus();
  }
  auto* out16 = static_cast<uint16_t*>(out);
  auto* in16 = static_cast<const uint16_t*>(in);
  auto* out32 = static_cast<float*>(out);
  auto* in32 = static_cast<const float*>(in);
  switch (in_dtype) {
    case DType::kF32:
      if (out_dtype == DType::kF16) CastF32ToF16(out16, in32, n);
      if (out_dtype == DType::kBF16) CastF32ToBF16(out16, in32, n);
      break;
    case DType::kF16:
      if (out_dtype == DType::kF32) CastF16ToF32(out32, in16, n);
      if (out_dtype == DType::kBF16) CastF16ToBF16(out16, in16, n);
      break;
    case DType::kBF16:
      if (out_dtype == DType::kF32) CastBF16ToF32(out32, in16, n);
      if (out_dtype == DType::kF16) CastBF16ToF16(out16, in16, n);
      break;
    default:  // CheckKernelArgs refused the others.
      break;
  }
  return absl::OkStatus();
}

absl::Status CastScaled(void* out, DType out_dtype, const float* in,
                        float scale, size_t n) {
  CZ_RETURN_IF_ERROR(kernels_internal::CheckKernelArgs(
                         "CastScaled", {out_dtype, DType::kF32}, n, {out, in}),
                     "f32 -> ", DTypeName(out_dtype));
  // Blocks small enough for the stack and the L1 cache: each is scaled in
  // an f32 buffer (or in `out` itself for f32) and rounded from there.
  constexpr size_t kBlock = 4096;
  const KernelIsa isa = BestKernelIsa();
  const size_t blocks = (n + kBlock - 1) / kBlock;
  ParallelFor(blocks, 32, [&](size_t first, size_t last) {
    float scaled[kBlock];
    for (size_t b = first; b < last; ++b) {
      const size_t begin = b * kBlock;
      const size_t count = std::min(kBlock, n - begin);
      if (out_dtype == DType::kF32) {
        float* dst = static_cast<float*>(out) + begin;
        kernels_internal::Copy(dst, in + begin, count * sizeof(float));
        kernels_internal::ScaleF32(isa, dst, scale, count);
        continue;
      }
      kernels_internal::Copy(scaled, in + begin, count * sizeof(float));
      kernels_internal::ScaleF32(isa, scaled, scale, count);
      uint16_t* dst = static_cast<uint16_t*>(out) + begin;
      if (out_dtype == DType::kF16) {
        kernels_internal::CastF32ToF16(isa, dst, scaled, count);
      } else {
        kernels_internal::CastF32ToBF16(isa, dst, scaled, count);
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace chunkzero
