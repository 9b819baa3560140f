// The model's matrix products (kernels/gemm.h, oneDNN) against the
// processor's own f32 peak, measured in the same run.
//
//   bazel run --config=opt //tools/bench:gemm_bench
//
// BM_FmaPeak: independent fused multiply-adds at the widest vector width the
// CPU has (AVX-512, else AVX2 + FMA, else SSE multiply and add), on one
// thread: what one core can do at all, with no memory traffic. Counter
// GFLOP/s.
// BM_Bf16DotPeak: the same for AVX512-BF16 dot products (vdpbf16ps), one
// thread; an error where the CPU lacks them.
// BM_Gemm/threads:T/size:S/bf16:B: Gemm of S x S x S on T threads
// (ParallelFor), in f32 (B = 0) or Precision::kBf16 (B = 1, rounding
// included), GFLOP/s = 2 S^3 / time, and vs_fma_peak = GFLOP/s / (T x the
// FMA peak measured first). Target for f32: vs_fma_peak >= 0.5 at size
// 1024; below it the benchmark reports an error: a kernel that ignores the
// vector units (e.g. a BLAS falling back to SSE3 on a processor it does not
// know) runs at a quarter of the peak or less. bf16 above 1 is bf16
// arithmetic outrunning f32 FMAs; the label names the kernel.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/parallel_for.h"
#include "benchmark/benchmark.h"
#include "kernels/gemm.h"
#include "tensor/cpu/cpu_features.h"

namespace chunkzero {
namespace {

constexpr double kFloorVsPeak = 0.5;

// FLOP/s of `iterations` rounds of kAccumulators independent FMAs. Enough
// accumulators to cover the FMA latency on two ports (4 cycles x 2).
constexpr int kAccumulators = 12;

__attribute__((target("avx512f"))) double PeakAvx512(int64_t iterations) {
  __m512 acc[kAccumulators];
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_set1_ps(0.001f * i);
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it) {
    for (int i = 0; i < kAccumulators; ++i) {
      acc[i] = _mm512_fmadd_ps(acc[i], x, y);
    }
  }
  __m512 sum = acc[0];
  for (int i = 1; i < kAccumulators; ++i) sum = _mm512_add_ps(sum, acc[i]);
  benchmark::DoNotOptimize(sum);
  return 2.0 * 16 * kAccumulators * iterations;
}

__attribute__((target("avx2,fma"))) double PeakAvx2(int64_t iterations) {
  __m256 acc[kAccumulators];
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm256_set1_ps(0.001f * i);
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it) {
    for (int i = 0; i < kAccumulators; ++i) {
      acc[i] = _mm256_fmadd_ps(acc[i], x, y);
    }
  }
  __m256 sum = acc[0];
  for (int i = 1; i < kAccumulators; ++i) sum = _mm256_add_ps(sum, acc[i]);
  benchmark::DoNotOptimize(sum);
  return 2.0 * 8 * kAccumulators * iterations;
}

double PeakSse(int64_t iterations) {
  __m128 acc[kAccumulators];
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm_set1_ps(0.001f * i);
  const __m128 x = _mm_set1_ps(0.999999f), y = _mm_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it) {
    for (int i = 0; i < kAccumulators; ++i) {
      acc[i] = _mm_add_ps(_mm_mul_ps(acc[i], x), y);
    }
  }
  __m128 sum = acc[0];
  for (int i = 1; i < kAccumulators; ++i) sum = _mm_add_ps(sum, acc[i]);
  benchmark::DoNotOptimize(sum);
  return 2.0 * 4 * kAccumulators * iterations;
}

double RunPeak(int64_t iterations) {
  const CpuFeatures& cpu = GetCpuFeatures();
  if (cpu.avx512) return PeakAvx512(iterations);
  if (cpu.avx2) return PeakAvx2(iterations);
  return PeakSse(iterations);
}

// The single-thread peak, GFLOP/s; measured once, by the first BM_Gemm
// (best of 5 runs of ~50 ms).
double g_peak_gflops = 0;

double MeasurePeak() {
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    const double flop = RunPeak(int64_t{1} << 21);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    best = std::max(best, flop / s / 1e9);
  }
  return best;
}

void BM_FmaPeak(benchmark::State& state) {
  double flop = 0;
  for (auto _ : state) flop += RunPeak(int64_t{1} << 20);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flop / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(GetCpuFeatures().avx512 ? "avx512"
                 : GetCpuFeatures().avx2 ? "avx2"
                                         : "sse");
}
BENCHMARK(BM_FmaPeak);

// vdpbf16ps (AVX512-BF16) on independent accumulators: each instruction
// multiplies 32 pairs of bf16 values and adds them into 16 f32 lanes, 64
// FLOP. Beside BM_FmaPeak it says whether bf16 arithmetic can outrun f32
// on this processor (docs/PERFORMANCE.md: half the FMA rate on the Xeon
// measured).
__attribute__((target("avx512f,avx512bf16"))) double PeakBf16Dot(
    int64_t iterations) {
  __m512 acc[kAccumulators];
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_set1_ps(0.001f * i);
  // 1.0 and 2^-24 as bf16 bit patterns.
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80);
  const __m512bh y = (__m512bh)_mm512_set1_epi16(0x3380);
  for (int64_t it = 0; it < iterations; ++it) {
    for (int i = 0; i < kAccumulators; ++i) {
      acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
    }
  }
  __m512 sum = acc[0];
  for (int i = 1; i < kAccumulators; ++i) sum = _mm512_add_ps(sum, acc[i]);
  benchmark::DoNotOptimize(sum);
  return 64.0 * kAccumulators * iterations;
}

void BM_Bf16DotPeak(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx512bf16")) {
    state.SkipWithError("no AVX512-BF16 on this processor");
    return;
  }
  double flop = 0;
  for (auto _ : state) flop += PeakBf16Dot(int64_t{1} << 20);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flop / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Bf16DotPeak);

void BM_Gemm(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const int n = static_cast<int>(state.range(1));
  const gemm::Precision precision =
      state.range(2) != 0 ? gemm::Precision::kBf16 : gemm::Precision::kF32;
  if (g_peak_gflops == 0) g_peak_gflops = MeasurePeak();
  SetParallelThreadsForTesting(threads);
  std::vector<float> a(size_t(n) * n), b(size_t(n) * n), c(size_t(n) * n);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(i % 7) - 3;
    b[i] = static_cast<float>(i % 5) - 2;
  }
  const auto run = [&] {
    gemm::Gemm(gemm::Transpose::kNo, gemm::Transpose::kNo, n, n, n, 1.0f,
               a.data(), n, b.data(), n, 0.0f, c.data(), n, precision);
  };
  run();
  // Small integers: the products are exact in f32 and bf16 and the sums in
  // f32. Check one row.
  for (int j = 0; j < n; ++j) {
    double want = 0;
    for (int p = 0; p < n; ++p) want += double(a[p]) * b[size_t(p) * n + j];
    if (c[j] != static_cast<float>(want)) {
      state.SkipWithError(absl::StrCat("wrong result at column ", j).c_str());
      SetParallelThreadsForTesting(0);
      return;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    run();
    benchmark::ClobberMemory();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  SetParallelThreadsForTesting(0);
  const double gflops = 2.0 * n * n * n * state.iterations() / seconds / 1e9;
  // Threads beyond the cores add nothing to the peak.
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  const double vs_peak = gflops / (std::min(threads, cores) * g_peak_gflops);
  state.counters["GFLOP/s"] = gflops;
  state.counters["vs_fma_peak"] = vs_peak;
  state.SetLabel(gemm::GemmKernelName(precision));
  if (precision == gemm::Precision::kF32 && n >= 1024 &&
      vs_peak < kFloorVsPeak) {
    state.SkipWithError(absl::StrCat("Gemm runs at ", vs_peak,
                                     " of the FMA peak, below the floor ",
                                     kFloorVsPeak, ": ", gemm::GemmKernelName())
                            .c_str());
  }
}
BENCHMARK(BM_Gemm)
    ->ArgNames({"threads", "size", "bf16"})
    ->Args({1, 1024, 0})
    ->Args({2, 1024, 0})
    ->Args({1, 256, 0})
    ->Args({1, 1024, 1})
    ->Args({2, 1024, 1})
    ->UseRealTime();

}  // namespace
}  // namespace chunkzero
