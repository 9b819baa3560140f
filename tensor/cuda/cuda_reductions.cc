#include "tensor/cuda/cuda_reductions.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/mutex.h"
#include "tensor/cuda/cuda_elementwise_kernels.h"
#include "tensor/cuda/cuda_reduction_kernels.h"
#include "tensor/cuda/cuda_runtime.h"

namespace chunkzero {
namespace {

absl::Status CheckArgs(const char* op, DType dtype,
                       absl::Span<const CudaReductionInput> inputs) {
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no GPU ", op, " for ", DTypeName(dtype), " (f32, f16, bf16 only)"));
  }
  for (const CudaReductionInput& input : inputs) {
    if (input.x == nullptr && input.n > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("GPU ", op, " of ", input.n, " elements: null array"));
    }
  }
  return absl::OkStatus();
}

int KernelDType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return cuda_kernels::kReduceF32;
    case DType::kF16:
      return cuda_kernels::kReduceF16;
    default:
      return cuda_kernels::kReduceBF16;
  }
}

absl::Status FromCuda(int error, const char* op, DType dtype, size_t n) {
  if (error == 0) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(op, " of ", n, " ", DTypeName(dtype),
                   " elements on the GPU: ", cuda_kernels::ErrorName(error)));
}

// One GPU's scratch: device memory for the kernels, pinned host memory for
// the results, and the event the host waits on. A batch holds `mu` from
// its first enqueue to the end of its wait, so a buffer is never regrown
// under work still using it.
struct GpuScratch {
  Mutex mu;
  int device_index = 0;
  void* device ABSL_GUARDED_BY(mu) = nullptr;
  size_t device_bytes ABSL_GUARDED_BY(mu) = 0;
  void* host ABSL_GUARDED_BY(mu) = nullptr;
  size_t host_bytes ABSL_GUARDED_BY(mu) = 0;
  CudaEvent done ABSL_GUARDED_BY(mu) = nullptr;

  // At least `device_bytes` and `host_bytes`, and the event.
  absl::Status Reserve(size_t want_device, size_t want_host)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (done == nullptr) {
      absl::StatusOr<CudaEvent> event =
          CudaEventCreate(device_index, /*timing=*/false);
      if (!event.ok()) return event.status();
      done = *event;
    }
    if (want_device > device_bytes) {
      if (device != nullptr) {
        if (absl::Status s = CudaFree(device_index, device); !s.ok()) return s;
        device = nullptr;
        device_bytes = 0;
      }
      // Doubling, so that a growing batch reallocates a few times at most.
      const size_t bytes = std::max(want_device, 2 * device_bytes);
      absl::StatusOr<void*> grown = CudaMalloc(device_index, bytes);
      if (!grown.ok()) return grown.status();
      device = *grown;
      device_bytes = bytes;
    }
    if (want_host > host_bytes) {
      if (host != nullptr) {
        if (absl::Status s = CudaHostFree(host); !s.ok()) return s;
        host = nullptr;
        host_bytes = 0;
      }
      const size_t bytes = std::max(want_host, 2 * host_bytes);
      absl::StatusOr<void*> grown = CudaHostAlloc(bytes);
      if (!grown.ok()) return grown.status();
      host = *grown;
      host_bytes = bytes;
    }
    return absl::OkStatus();
  }

  // The one host wait of a batch: until `stream` reaches this point.
  absl::Status WaitFor(CudaStream stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (absl::Status s = CudaEventRecord(done, stream); !s.ok()) return s;
    return CudaEventSynchronize(done);
  }
};

// Kept for the process's life: a GPU's scratch is small (a batch's results
// and one input's block sums) and outlives any one caller.
GpuScratch& ScratchOf(int device_index) {
  static Mutex* const mu = new Mutex;
  static auto* const scratches = new std::map<int, std::unique_ptr<GpuScratch>>;
  MutexLock lock(mu);
  std::unique_ptr<GpuScratch>& scratch = (*scratches)[device_index];
  if (scratch == nullptr) {
    scratch = std::make_unique<GpuScratch>();
    scratch->device_index = device_index;
  }
  return *scratch;
}

}  // namespace

absl::StatusOr<std::vector<double>> CudaSumsOfSquares(
    int device_index, DType dtype, absl::Span<const CudaReductionInput> inputs,
    CudaStream stream) {
  const char* op = "SumOfSquares";
  if (absl::Status s = CheckArgs(op, dtype, inputs); !s.ok()) return s;
  std::vector<double> sums(inputs.size(), 0.0);
  std::vector<const void*> xs;
  std::vector<size_t> ns;
  size_t largest = 0, total = 0;
  for (const CudaReductionInput& input : inputs) {
    if (input.n == 0) continue;  // Its sum is 0; nothing to launch.
    xs.push_back(input.x);
    ns.push_back(input.n);
    largest = std::max(largest, input.n);
    total += input.n;
  }
  if (xs.empty()) return sums;
  GpuScratch& scratch = ScratchOf(device_index);
  MutexLock lock(&scratch.mu);
  const size_t count = xs.size();
  absl::Status status =
      scratch.Reserve(cuda_kernels::ReductionScratchBytes(largest, count),
                      count * sizeof(double));
  if (status.ok()) {
    status = FromCuda(
        cuda_kernels::EnqueueSumsOfSquares(
            KernelDType(dtype), xs.data(), ns.data(), count, scratch.device,
            static_cast<double*>(scratch.host), stream),
        op, dtype, total);
  }
  if (status.ok()) status = scratch.WaitFor(stream);
  if (!status.ok()) {
    return absl::Status(
        status.code(),
        absl::StrCat(op, " of ", inputs.size(),
                     " arrays on cuda:", device_index, ": ", status.message()));
  }
  const double* results = static_cast<const double*>(scratch.host);
  size_t next = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].n > 0) sums[i] = results[next++];
  }
  return sums;
}

absl::StatusOr<double> CudaSumOfSquares(int device_index, const void* x,
                                        DType dtype, size_t n,
                                        CudaStream stream) {
  const CudaReductionInput input{x, n};
  absl::StatusOr<std::vector<double>> sums =
      CudaSumsOfSquares(device_index, dtype, {&input, 1}, stream);
  if (!sums.ok()) return sums.status();
  return (*sums)[0];
}

absl::StatusOr<bool> CudaHasInfOrNan(int device_index, const void* x,
                                     DType dtype, size_t n, CudaStream stream) {
  const char* op = "HasInfOrNan";
  const CudaReductionInput input{x, n};
  if (absl::Status s = CheckArgs(op, dtype, {&input, 1}); !s.ok()) return s;
  if (n == 0) return false;
  GpuScratch& scratch = ScratchOf(device_index);
  MutexLock lock(&scratch.mu);
  absl::Status status =
      scratch.Reserve(cuda_kernels::ReductionScratchBytes(0, 0), sizeof(int));
  if (status.ok()) {
    status = FromCuda(cuda_kernels::EnqueueHasInfOrNan(
                          KernelDType(dtype), x, n, scratch.device,
                          static_cast<int*>(scratch.host), stream),
                      op, dtype, n);
  }
  if (status.ok()) status = scratch.WaitFor(stream);
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat(op, " of ", n, " ", DTypeName(dtype),
                                     " elements on cuda:", device_index, ": ",
                                     status.message()));
  }
  return *static_cast<const int*>(scratch.host) != 0;
}

}  // namespace chunkzero
