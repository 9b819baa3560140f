// Bandwidth of the cast kernels and Copy, beside memcpy of the same source
// bytes measured in the same run.
//
//   bazel run --config=opt //tools/bench:cast_bench
//   bazel run --config=opt //tools/bench:cast_bench -- --benchmark_filter=F16
//
// Each row is one kernel at one size (`bytes`: bytes of input) and thread
// count (`threads`: 1, or 0 for the default, all hardware threads). Every
// iteration runs the kernel and then memcpy of the same input bytes into a
// separate buffer (split over the same threads the same way), so both see
// the same machine load; only the kernel's time is the row's time. Counters:
//   GB/s         kernel: bytes read + bytes written per second (1e9 bytes).
//   memcpy_GB/s  memcpy of the input bytes: 2 x bytes per second.
//   vs_memcpy    GB/s / memcpy_GB/s.
// The environment variable CHUNKZERO_KERNEL_ISA=scalar|avx2|avx512 picks the
// implementation (default: the best the CPU supports), and
// CHUNKZERO_BENCH_STREAM_THRESHOLD=<bytes> overrides the output size from
// which the casts use non-temporal stores.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/parallel_for.h"
#include "benchmark/benchmark.h"
#include "tensor/cpu/cpu_features.h"
#include "tensor/cpu/internal/kernels_isa.h"
#include "tensor/half.h"
#include "tools/bench/bench_buffers.h"

namespace chunkzero {
namespace {

using bench::Buffer;
using bench::ParallelMemcpy;

namespace ki = kernels_internal;

// Sets the thread count for this benchmark; 0 keeps the default.
void SetThreads(benchmark::State& state) {
  SetParallelThreadsForTesting(static_cast<int>(state.range(1)));
}

// Runs `body` (the kernel) and then memcpy of `in_bytes` from `in` in every
// iteration; reports the kernel's time and GB/s for `bytes_moved` per call,
// memcpy's GB/s, and their ratio.
template <typename Body>
void TimeLoop(benchmark::State& state, const void* in, size_t in_bytes,
              double bytes_moved, Body body) {
  using Clock = std::chrono::steady_clock;
  Buffer copy(in_bytes);
  const bool parallel = state.range(1) != 1;
  double kernel_seconds = 0, memcpy_seconds = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    body();
    benchmark::ClobberMemory();
    const auto t1 = Clock::now();
    ParallelMemcpy(copy.data.get(), static_cast<const unsigned char*>(in),
                   in_bytes, parallel, ki::kParallelGrainCopyBytes);
    benchmark::ClobberMemory();
    const auto t2 = Clock::now();
    const double seconds = std::chrono::duration<double>(t1 - t0).count();
    state.SetIterationTime(seconds);
    kernel_seconds += seconds;
    memcpy_seconds += std::chrono::duration<double>(t2 - t1).count();
  }
  const double iterations = static_cast<double>(state.iterations());
  const double gbps = bytes_moved * iterations / kernel_seconds / 1e9;
  const double memcpy_gbps = 2.0 * in_bytes * iterations / memcpy_seconds / 1e9;
  state.counters["GB/s"] = gbps;
  state.counters["memcpy_GB/s"] = memcpy_gbps;
  state.counters["vs_memcpy"] = gbps / memcpy_gbps;
  state.SetLabel(std::string(KernelIsaName(BestKernelIsa())));
  SetParallelThreadsForTesting(0);
}

void BM_Copy(benchmark::State& state) {
  SetThreads(state);
  const size_t bytes = state.range(0);
  Buffer in(bytes), out(bytes);
  std::memset(in.data.get(), 0x5a, bytes);
  ki::Copy(out.data.get(), in.data.get(), bytes);
  if (std::memcmp(out.data.get(), in.data.get(), bytes) != 0) {
    state.SkipWithError("Copy produced wrong bytes");
    return;
  }
  TimeLoop(state, in.data.get(), bytes, 2.0 * bytes,
           [&] { ki::Copy(out.data.get(), in.data.get(), bytes); });
}

// One cast: the kernel, the scalar reference, and an input generator.
template <typename In, typename Out>
struct CastSpec {
  void (*kernel)(KernelIsa, Out*, const In*, size_t);
  Out (*reference)(In);
  In (*make_input)(uint32_t random_bits);
};

float RandomF32(uint32_t r) {
  // Values over the f16 range and beyond, both signs.
  return std::ldexp(static_cast<float>(r >> 8) / (1 << 24) - 0.5f,
                    static_cast<int>(r % 40) - 24);
}
uint16_t RandomF16(uint32_t r) {
  return static_cast<uint16_t>(r & 0xfbff);  // Finite.
}
uint16_t RandomBF16(uint32_t r) {
  return static_cast<uint16_t>(r & 0xbfff);  // Finite.
}
uint32_t Bits32(float f) { return FloatBits(f); }
uint32_t Bits32(uint16_t u) { return u; }

template <typename In, typename Out>
void RunCast(benchmark::State& state, const CastSpec<In, Out>& spec) {
  SetThreads(state);
  const size_t n = state.range(0) / sizeof(In);
  Buffer in(n * sizeof(In)), out(n * sizeof(Out));
  std::mt19937 rng(42);
  In* input = in.as<In>();
  for (size_t i = 0; i < n; ++i) {
    input[i] = spec.make_input(static_cast<uint32_t>(rng()));
  }
  const KernelIsa isa = BestKernelIsa();
  spec.kernel(isa, out.as<Out>(), input, n);
  // Check 1024 elements spread over the array (the first and last
  // included) against the scalar reference.
  for (size_t k = 0; k < 1024; ++k) {
    const size_t i = k == 1023 ? n - 1 : k * (n / 1024);
    if (Bits32(out.as<Out>()[i]) != Bits32(spec.reference(input[i]))) {
      state.SkipWithError(absl::StrCat("wrong result at element ", i).c_str());
      return;
    }
  }
  TimeLoop(state, input, n * sizeof(In),
           static_cast<double>(n) * (sizeof(In) + sizeof(Out)),
           [&] { spec.kernel(isa, out.as<Out>(), input, n); });
}

void BM_CastF32ToF16(benchmark::State& state) {
  RunCast<float, uint16_t>(state,
                           {&ki::CastF32ToF16, &FloatToHalfBits, &RandomF32});
}
void BM_CastF16ToF32(benchmark::State& state) {
  RunCast<uint16_t, float>(state,
                           {&ki::CastF16ToF32, &HalfBitsToFloat, &RandomF16});
}
void BM_CastF32ToBF16(benchmark::State& state) {
  RunCast<float, uint16_t>(
      state, {&ki::CastF32ToBF16, &FloatToBFloat16Bits, &RandomF32});
}
void BM_CastBF16ToF32(benchmark::State& state) {
  RunCast<uint16_t, float>(
      state, {&ki::CastBF16ToF32, &BFloat16BitsToFloat, &RandomBF16});
}

// bytes of input: 64 KiB .. 256 MiB (x4); threads: 1 and the default.
void Sizes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"bytes", "threads"});
  for (int threads : {1, 0}) {
    for (int64_t bytes = int64_t{64} << 10; bytes <= int64_t{256} << 20;
         bytes *= 4) {
      b->Args({bytes, threads});
    }
  }
  b->UseManualTime();
}

BENCHMARK(BM_Copy)->Apply(Sizes);
BENCHMARK(BM_CastF32ToF16)->Apply(Sizes);
BENCHMARK(BM_CastF16ToF32)->Apply(Sizes);
BENCHMARK(BM_CastF32ToBF16)->Apply(Sizes);
BENCHMARK(BM_CastBF16ToF32)->Apply(Sizes);

// Applies CHUNKZERO_BENCH_STREAM_THRESHOLD before any benchmark runs.
const bool kStreamThresholdApplied = [] {
  size_t bytes = 0;
  const char* env = std::getenv("CHUNKZERO_BENCH_STREAM_THRESHOLD");
  if (env != nullptr && absl::SimpleAtoi(env, &bytes)) {
    ki::SetStreamingThresholdForTesting(bytes);
  }
  return true;
}();

}  // namespace
}  // namespace chunkzero
