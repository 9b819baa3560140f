// Build of cuda_runtime.h without --config=cuda: no GPU is reachable.
#include "tensor/cuda/cuda_runtime.h"

namespace chunkzero {
namespace {

absl::Status NoCuda() {
  return absl::UnimplementedError(
      "chunkzero was built without CUDA (rebuild with --config=cuda)");
}

}  // namespace

ScopedCudaDevice::ScopedCudaDevice(int) : status_(NoCuda()) {}
ScopedCudaDevice::~ScopedCudaDevice() {
  (void)previous_;  // No GPU was selected, so none is restored.
}

int CudaCurrentDevice() { return -1; }
absl::Status CudaPendingError() { return absl::OkStatus(); }
bool BuiltWithCuda() { return false; }
int CudaDeviceCount() { return 0; }
absl::StatusOr<void*> CudaMalloc(int, size_t) { return NoCuda(); }
absl::Status CudaFree(int, void*) { return NoCuda(); }
absl::Status CudaMemcpy(void*, const void*, size_t) { return NoCuda(); }
absl::StatusOr<CudaStream> CudaStreamCreate(int) { return NoCuda(); }
absl::Status CudaStreamDestroy(CudaStream) { return NoCuda(); }
absl::Status CudaStreamSynchronize(CudaStream) { return NoCuda(); }
absl::Status CudaStreamWaitEvent(CudaStream, CudaEvent) { return NoCuda(); }
absl::StatusOr<CudaEvent> CudaEventCreate(int, bool) { return NoCuda(); }
absl::StatusOr<float> CudaEventElapsedMs(CudaEvent, CudaEvent) {
  return NoCuda();
}
absl::Status CudaEventDestroy(CudaEvent) { return NoCuda(); }
absl::Status CudaEventRecord(CudaEvent, CudaStream) { return NoCuda(); }
absl::StatusOr<bool> CudaEventQuery(CudaEvent) { return NoCuda(); }
absl::Status CudaEventSynchronize(CudaEvent) { return NoCuda(); }
absl::Status CudaMemcpyAsync(void*, const void*, size_t, CudaStream) {
  return NoCuda();
}
absl::StatusOr<void*> CudaHostAlloc(size_t) { return NoCuda(); }
absl::Status CudaHostFree(void*) { return NoCuda(); }
absl::StatusOr<bool> CudaIsPinned(const void*) { return NoCuda(); }
bool CudaIsDeviceMemory(const void*) { return false; }
absl::StatusOr<CudaMemoryInfo> CudaMemGetInfo(int) { return NoCuda(); }

}  // namespace chunkzero
