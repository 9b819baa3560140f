#include "tensor/memory/gpu_memory_runtime.h"

#include "tensor/cuda/cuda_runtime.h"

namespace chunkzero {

CudaMemoryRuntime::~CudaMemoryRuntime() {
  const ScopedCudaDevice device(device_index_);
  MutexLock lock(&mu_);
  // A failure here means a broken CUDA context; the events die with it.
  for (CudaEvent event : idle_events_) CudaEventDestroy(event).IgnoreError();
}

absl::StatusOr<void*> CudaMemoryRuntime::Malloc(size_t bytes) {
  return CudaMalloc(device_index_, bytes);
}

absl::Status CudaMemoryRuntime::Free(void* ptr) {
  return CudaFree(device_index_, ptr);
}

absl::StatusOr<CudaEvent> CudaMemoryRuntime::RecordEvent(CudaStream stream) {
  // Pooled events were made on this GPU; the (legacy) stream must be its.
  const ScopedCudaDevice device(device_index_);
  if (!device.status().ok()) return device.status();
  CudaEvent event = nullptr;
  {
    MutexLock lock(&mu_);
    if (!idle_events_.empty()) {
      event = idle_events_.back();
      idle_events_.pop_back();
    }
  }
  if (event == nullptr) {
    absl::StatusOr<CudaEvent> created = CudaEventCreate(device_index_);
    if (!created.ok()) return created.status();
    event = *created;
  }
  const absl::Status recorded = CudaEventRecord(event, stream);
  if (!recorded.ok()) {
    ReleaseEvent(event);
    return recorded;
  }
  return event;
}

absl::StatusOr<bool> CudaMemoryRuntime::EventDone(CudaEvent event) {
  const ScopedCudaDevice device(device_index_);
  return CudaEventQuery(event);
}

absl::Status CudaMemoryRuntime::WaitEvent(CudaEvent event) {
  const ScopedCudaDevice device(device_index_);
  return CudaEventSynchronize(event);
}

void CudaMemoryRuntime::ReleaseEvent(CudaEvent event) {
  MutexLock lock(&mu_);
  idle_events_.push_back(event);
}

}  // namespace chunkzero
