#include "tensor/cuda/cuda_elementwise.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "tensor/cuda/cuda_elementwise_kernels.h"
#include "tensor/cuda/cuda_runtime.h"

namespace chunkzero {
namespace {

absl::Status FromCuda(int error, DType dst, DType src, size_t n) {
  if (error == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(
      "casting ", n, " elements from ", DTypeName(src), " to ", DTypeName(dst),
      " on the GPU: ", cuda_kernels::ErrorName(error)));
}

absl::Status FromCuda(int error, const char* op, DType dtype, size_t n) {
  if (error == 0) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(op, " of ", n, " ", DTypeName(dtype),
                   " elements on the GPU: ", cuda_kernels::ErrorName(error)));
}

absl::Status NoKernel(const char* op, DType dtype) {
  return absl::InvalidArgumentError(absl::StrCat(
      "no GPU ", op, " for ", DTypeName(dtype), " (f32, f16, bf16 only)"));
}

}  // namespace

absl::Status CudaCast(void* dst, DType dst_dtype, const void* src,
                      DType src_dtype, size_t n, CudaStream stream) {
  if (dst_dtype == src_dtype) {
    return CudaMemcpyAsync(dst, src, n * ElementSize(src_dtype), stream);
  }
  void* const s = stream;
  int error = -1;
  if (src_dtype == DType::kF32 && dst_dtype == DType::kF16) {
    error = cuda_kernels::CastF32ToF16(static_cast<uint16_t*>(dst),
                                       static_cast<const float*>(src), n, s);
  } else if (src_dtype == DType::kF32 && dst_dtype == DType::kBF16) {
    error = cuda_kernels::CastF32ToBF16(static_cast<uint16_t*>(dst),
                                        static_cast<const float*>(src), n, s);
  } else if (src_dtype == DType::kF16 && dst_dtype == DType::kF32) {
    error = cuda_kernels::CastF16ToF32(static_cast<float*>(dst),
                                       static_cast<const uint16_t*>(src), n, s);
  } else if (src_dtype == DType::kBF16 && dst_dtype == DType::kF32) {
    error = cuda_kernels::CastBF16ToF32(
        static_cast<float*>(dst), static_cast<const uint16_t*>(src), n, s);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("no GPU cast from ", DTypeName(src_dtype), " to ",
                     DTypeName(dst_dtype), " (f32 <-> f16 / bf16 only)"));
  }
  return FromCuda(error, dst_dtype, src_dtype, n);
}

absl::Status CudaCastScaled(void* dst, DType dst_dtype, const float* src,
                            float scale, size_t n, CudaStream stream) {
  void* const s = stream;
  switch (dst_dtype) {
    case DType::kF32:
      return FromCuda(cuda_kernels::CastScaledF32(static_cast<float*>(dst), src,
                                                  scale, n, s),
                      "scaled cast", dst_dtype, n);
    case DType::kF16:
      return FromCuda(cuda_kernels::CastScaledF16(static_cast<uint16_t*>(dst),
                                                  src, scale, n, s),
                      "scaled cast", dst_dtype, n);
    case DType::kBF16:
      return FromCuda(cuda_kernels::CastScaledBF16(static_cast<uint16_t*>(dst),
                                                   src, scale, n, s),
                      "scaled cast", dst_dtype, n);
    default:
      return NoKernel("scaled cast", dst_dtype);
  }
}

absl::Status CudaScale(void* x, DType dtype, float a, size_t n,
                       CudaStream stream) {
  void* const s = stream;
  switch (dtype) {
    case DType::kF32:
      return FromCuda(cuda_kernels::ScaleF32(static_cast<float*>(x), a, n, s),
                      "scale", dtype, n);
    case DType::kF16:
      return FromCuda(
          cuda_kernels::ScaleF16(static_cast<uint16_t*>(x), a, n, s), "scale",
          dtype, n);
    case DType::kBF16:
      return FromCuda(
          cuda_kernels::ScaleBF16(static_cast<uint16_t*>(x), a, n, s), "scale",
          dtype, n);
    default:
      return NoKernel("scale", dtype);
  }
}

absl::Status CudaAxpy(void* y, DType dtype, float a, const void* x, size_t n,
                      CudaStream stream) {
  void* const s = stream;
  switch (dtype) {
    case DType::kF32:
      return FromCuda(cuda_kernels::AxpyF32(static_cast<float*>(y), a,
                                            static_cast<const float*>(x), n, s),
                      "axpy", dtype, n);
    case DType::kF16:
      return FromCuda(
          cuda_kernels::AxpyF16(static_cast<uint16_t*>(y), a,
                                static_cast<const uint16_t*>(x), n, s),
          "axpy", dtype, n);
    case DType::kBF16:
      return FromCuda(
          cuda_kernels::AxpyBF16(static_cast<uint16_t*>(y), a,
                                 static_cast<const uint16_t*>(x), n, s),
          "axpy", dtype, n);
    default:
      return NoKernel("axpy", dtype);
  }
}

}  // namespace chunkzero
