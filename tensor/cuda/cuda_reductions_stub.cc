// tensor/cuda/cuda_reductions.h without --config=cuda: nothing runs on a GPU.
#include "absl/strings/str_cat.h"
#include "tensor/cuda/cuda_reductions.h"

namespace chunkzero {
namespace {

absl::Status NoCuda(const char* op, DType dtype, size_t n) {
  return absl::UnimplementedError(absl::StrCat(
      op, " of ", n, " ", DTypeName(dtype),
      " elements on the GPU: this binary was built without --config=cuda"));
}

}  // namespace

absl::StatusOr<bool> CudaHasInfOrNan(const void*, DType dtype, size_t n) {
  return NoCuda("HasInfOrNan", dtype, n);
}

absl::StatusOr<double> CudaSumOfSquares(const void*, DType dtype, size_t n) {
  return NoCuda("SumOfSquares", dtype, n);
}

}  // namespace chunkzero
