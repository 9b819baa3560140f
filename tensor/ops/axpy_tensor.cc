#include "tensor/ops/axpy_tensor.h"

#include "absl/strings/str_cat.h"
#include "tensor/cpu/elementwise_kernels.h"
#include "tensor/cuda/cuda_elementwise.h"

namespace chunkzero {

absl::Status AxpyTensor(Tensor& y, float a, const Tensor& x) {
  if (y.dtype() != DType::kF32 || x.dtype() != DType::kF32 ||
      y.numel() != x.numel() || y.device() != x.device() ||
      !y.is_materialized() || !x.is_materialized()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot add ", x.DebugString(), " into ", y.DebugString(),
                     ": want two materialised f32 tensors of one size on one "
                     "device"));
  }
  if (y.device().is_host_accessible()) {
    AxpyF32(y.data<float>(), a, x.data<float>(), x.numel());
    return absl::OkStatus();
  }
  return CudaAxpy(y.raw_data(), DType::kF32, a, x.raw_data(), x.numel());
}

}  // namespace chunkzero
