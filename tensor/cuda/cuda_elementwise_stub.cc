// tensor/cuda/cuda_elementwise.h without --config=cuda: nothing runs on a GPU.
#include "absl/strings/str_cat.h"
#include "tensor/cuda/cuda_elementwise.h"

namespace chunkzero {

absl::Status CudaCast(void* dst, DType dst_dtype, const void* src,
                      DType src_dtype, size_t n, CudaStream) {
  return absl::UnimplementedError(
      absl::StrCat("casting ", n, " elements from ", DTypeName(src_dtype),
                   " to ", DTypeName(dst_dtype),
                   " on the GPU: this binary was built without --config=cuda"));
}

absl::Status CudaCastScaled(void* dst, DType dst_dtype, const float* src,
                            float scale, size_t n, CudaStream) {
  return absl::UnimplementedError(
      absl::StrCat("scaled cast of ", n, " elements to ", DTypeName(dst_dtype),
                   " on the GPU: this binary was built without --config=cuda"));
}

absl::Status CudaScale(void* x, DType dtype, float a, size_t n, CudaStream) {
  return absl::UnimplementedError(absl::StrCat(
      "scale of ", n, " ", DTypeName(dtype),
      " elements on the GPU: this binary was built without --config=cuda"));
}

absl::Status CudaAxpy(void* y, DType dtype, float a, const void* x, size_t n,
                      CudaStream) {
  return absl::UnimplementedError(absl::StrCat(
      "axpy of ", n, " ", DTypeName(dtype),
      " elements on the GPU: this binary was built without --config=cuda"));
}

}  // namespace chunkzero
