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

absl::StatusOr<std::vector<double>> CudaSumsOfSquares(
    int, DType dtype, absl::Span<const CudaReductionInput> inputs, CudaStream) {
  size_t n = 0;
  for (const CudaReductionInput& input : inputs) n += input.n;
  return NoCuda("SumOfSquares", dtype, n);
}

absl::StatusOr<double> CudaSumOfSquares(int, const void*, DType dtype, size_t n,
                                        CudaStream) {
  return NoCuda("SumOfSquares", dtype, n);
}

absl::StatusOr<bool> CudaHasInfOrNan(int, const void*, DType dtype, size_t n,
                                     CudaStream) {
  return NoCuda("HasInfOrNan", dtype, n);
}

}  // namespace chunkzero
