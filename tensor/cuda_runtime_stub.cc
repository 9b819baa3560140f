// Build of cuda_runtime.h without --config=cuda: no GPU is reachable.
#include "tensor/cuda_runtime.h"

namespace chunkzero {
namespace {

absl::Status NoCuda() {
  return absl::UnimplementedError(
      "chunkzero was built without CUDA (rebuild with --config=cuda)");
}

}  // namespace

bool BuiltWithCuda() { return false; }
int CudaDeviceCount() { return 0; }
absl::StatusOr<void*> CudaMalloc(int, size_t) { return NoCuda(); }
absl::Status CudaFree(int, void*) { return NoCuda(); }
absl::Status CudaMemcpy(void*, const void*, size_t) { return NoCuda(); }

}  // namespace chunkzero
