// GPU kernels against a device-to-device copy of the same bytes, measured
// in the same iteration with CUDA events.
//
//   cuda_bench --benchmark_counters_tabular=true
//
// Rows (256M elements unless the argument says otherwise):
//   BM_CudaAdam       the mixed-precision AdamW step as ZeRO runs it: bf16
//                     grad reused as the bf16 param, f32 master, exp_avg,
//                     exp_avg_sq; 28 bytes per param read and written.
//   BM_CudaCast*      f32 -> bf16 and back: 6 bytes per element.
//   BM_CudaSumOfSquares  bf16, the CPU's order: 2 bytes per element read.
// Each iteration times the kernel, then a cudaMemcpyAsync device-to-device
// of half the kernel's counted bytes (a copy reads and writes each byte, so
// both move the same traffic). Counters:
//   GB/s        the kernel's counted bytes per second (1e9).
//   copy_GB/s   the copy's bytes read and written per second.
//   vs_copy     GB/s / copy_GB/s (the target: >= 0.8 for Adam and
//               the casts).
// On a machine without a GPU every row reports "no GPU visible".
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "optim/cuda_fused_kernels.h"
#include "tensor/cuda/cuda_elementwise.h"
#include "tensor/cuda/cuda_reductions.h"
#include "tensor/cuda/cuda_runtime.h"

namespace chunkzero {
namespace {

// A device buffer freed at scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) {
    absl::StatusOr<void*> p = CudaMalloc(0, bytes);
    if (p.ok()) {
      ptr_ = *p;
      // Zeros: finite inputs for every kernel.
      std::vector<uint8_t> zeros(1 << 20, 0);
      for (size_t at = 0; at < bytes; at += zeros.size()) {
        const size_t n = bytes - at < zeros.size() ? bytes - at : zeros.size();
        CudaMemcpy(static_cast<uint8_t*>(ptr_) + at, zeros.data(), n)
            .IgnoreError();
      }
    } else {
      error_ = std::string(p.status().message());
    }
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) CudaFree(0, ptr_).IgnoreError();
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  const std::string& error() const { return error_; }

 private:
  void* ptr_ = nullptr;
  std::string error_;
};

// Times `kernel` and a copy of `copy_bytes` per iteration with events;
// reports the counters above for `counted_bytes` of kernel traffic.
template <typename Kernel>
void RunAgainstCopy(benchmark::State& state, double counted_bytes,
                    size_t copy_bytes, Kernel kernel) {
  DeviceBuffer src(copy_bytes), dst(copy_bytes);
  if (src.get() == nullptr || dst.get() == nullptr) {
    state.SkipWithError(("copy buffers: " + src.error() + dst.error()).c_str());
    return;
  }
  CudaEvent marks[3];
  for (CudaEvent& mark : marks) mark = *CudaEventCreate(0, /*timing=*/true);
  double kernel_seconds = 0, copy_seconds = 0;
  for (auto _ : state) {
    CudaEventRecord(marks[0], nullptr).IgnoreError();
    const absl::Status status = kernel();
    CudaEventRecord(marks[1], nullptr).IgnoreError();
    CudaMemcpyAsync(dst.get(), src.get(), copy_bytes, nullptr).IgnoreError();
    CudaEventRecord(marks[2], nullptr).IgnoreError();
    const absl::Status synced = CudaEventSynchronize(marks[2]);
    if (!status.ok() || !synced.ok()) {
      state.SkipWithError(
          absl::StrCat(status.message(), synced.message()).c_str());
      break;
    }
    const double kernel_ms = *CudaEventElapsedMs(marks[0], marks[1]);
    const double copy_ms = *CudaEventElapsedMs(marks[1], marks[2]);
    state.SetIterationTime(kernel_ms / 1e3);
    kernel_seconds += kernel_ms / 1e3;
    copy_seconds += copy_ms / 1e3;
  }
  for (CudaEvent mark : marks) CudaEventDestroy(mark).IgnoreError();
  if (kernel_seconds <= 0 || copy_seconds <= 0) return;
  const double iterations = static_cast<double>(state.iterations());
  const double gbps = counted_bytes * iterations / kernel_seconds / 1e9;
  const double copy_gbps =
      2.0 * static_cast<double>(copy_bytes) * iterations / copy_seconds / 1e9;
  state.counters["GB/s"] = gbps;
  state.counters["copy_GB/s"] = copy_gbps;
  state.counters["vs_copy"] = gbps / copy_gbps;
}

bool SkipWithoutGpu(benchmark::State& state) {
  if (CudaDeviceCount() > 0) return false;
  state.SkipWithError(BuiltWithCuda() ? "no GPU visible"
                                      : "built without --config=cuda");
  return true;
}

void BM_CudaAdam(benchmark::State& state) {
  if (SkipWithoutGpu(state)) return;
  const size_t n = static_cast<size_t>(state.range(0));
  DeviceBuffer master(4 * n), m(4 * n), v(4 * n), grad(2 * n);
  if (grad.get() == nullptr || v.get() == nullptr) {
    state.SkipWithError("cannot allocate the Adam arrays");
    return;
  }
  AdamStep step;
  step.lr = 3e-4f;
  step.weight_decay = 0.1f;
  step.decoupled_weight_decay = true;
  step.bias_correction1 = 0.65f;
  step.bias_correction2_sqrt = 0.1f;
  RunAgainstCopy(state, 28.0 * n, 14 * n, [&] {
    return CudaFusedAdam(step, static_cast<float*>(master.get()),
                         static_cast<float*>(m.get()),
                         static_cast<float*>(v.get()), grad.get(), DType::kBF16,
                         grad.get(), DType::kBF16, n, nullptr);
  });
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(n));
}
BENCHMARK(BM_CudaAdam)
    ->Arg(256 << 20)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

void CastRow(benchmark::State& state, DType from, DType to) {
  if (SkipWithoutGpu(state)) return;
  const size_t n = static_cast<size_t>(state.range(0));
  DeviceBuffer in(n * ElementSize(from)), out(n * ElementSize(to));
  if (in.get() == nullptr || out.get() == nullptr) {
    state.SkipWithError("cannot allocate the cast arrays");
    return;
  }
  RunAgainstCopy(state, 6.0 * n, 3 * n,
                 [&] { return CudaCast(out.get(), to, in.get(), from, n); });
}

void BM_CudaCastF32ToBF16(benchmark::State& state) {
  CastRow(state, DType::kF32, DType::kBF16);
}
void BM_CudaCastBF16ToF32(benchmark::State& state) {
  CastRow(state, DType::kBF16, DType::kF32);
}
BENCHMARK(BM_CudaCastF32ToBF16)
    ->Arg(256 << 20)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CudaCastBF16ToF32)
    ->Arg(256 << 20)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

void BM_CudaSumOfSquares(benchmark::State& state) {
  if (SkipWithoutGpu(state)) return;
  const size_t n = static_cast<size_t>(state.range(0));
  DeviceBuffer x(2 * n);
  if (x.get() == nullptr) {
    state.SkipWithError("cannot allocate the array");
    return;
  }
  RunAgainstCopy(state, 2.0 * n, n, [&] {
    return CudaSumOfSquares(/*device_index=*/0, x.get(), DType::kBF16, n)
        .status();
  });
}
BENCHMARK(BM_CudaSumOfSquares)
    ->Arg(256 << 20)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace chunkzero

BENCHMARK_MAIN();
