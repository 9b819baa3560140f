// Throughput of the fused mixed-precision Adam step (optim/fused_kernels.h),
// beside memcpy of the same bytes measured in the same run.
//
//   bazel run --config=opt //tools/bench:optim_bench --
//       --benchmark_counters_tabular=true
//
// Each row is one step over `params` parameters with `threads` threads, in
// the layout the ZeRO optimizer runs: f16 grad reused as the f16 param
// (param_out aliases grad), f32 master, exp_avg, exp_avg_sq; AdamW with
// weight decay and bias correction at step 10. Every iteration runs the
// step, puts the gradient back (untimed), and then runs memcpy of the step's
// input bytes (the three f32 arrays and the f16 grad, 14 bytes per param)
// into a separate buffer, split over the same threads, so both see the same
// machine load; only the step's time is the row's time. Counters:
//   params/s     parameters updated per second.
//   GB/s         28 bytes per param (read p, m, v, g; write p, m, v and the
//                f16 param: DESIGN.md §7) per second (1e9 bytes).
//   memcpy_GB/s  memcpy of the 14 input bytes per param: 28 bytes counted
//                (read + written) per param per second, so
//   vs_memcpy    GB/s / memcpy_GB/s is also memcpy time / step time.
// The environment variable CHUNKZERO_KERNEL_ISA=scalar|avx2|avx512 picks the
// implementation (default: the best the CPU supports).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/parallel_for.h"
#include "benchmark/benchmark.h"
#include "optim/fused_kernels.h"
#include "tensor/cpu/cpu_features.h"
#include "tensor/half.h"
#include "tools/bench/bench_buffers.h"

namespace chunkzero {
namespace {

using bench::Buffer;
using bench::ParallelMemcpy;

// Bytes moved per parameter by a mixed-precision Adam step (DESIGN.md §7).
constexpr double kAdamBytesPerParam = 28;

// AdamW at step 10 with a loss scale of 2^16, as a GPT-2 run would call it.
AdamStep BenchStep() {
  AdamStep step;
  step.lr = 6e-4f;
  step.beta2 = 0.95f;
  step.weight_decay = 0.1f;
  step.decoupled_weight_decay = true;
  step.bias_correction1 = 1.0f - std::pow(step.beta1, 10.0f);
  step.bias_correction2_sqrt = std::sqrt(1.0f - std::pow(step.beta2, 10.0f));
  step.grad_scale = 1.0f / 65536;
  return step;
}

// The optimizer state of n parameters: realistic magnitudes, no
// subnormals (which would slow the arithmetic down on x86).
struct AdamState {
  explicit AdamState(size_t n)
      : n(n),
        param(n * sizeof(float)),
        exp_avg(n * sizeof(float)),
        exp_avg_sq(n * sizeof(float)),
        grad(n * sizeof(uint16_t)),
        fresh_grad(n * sizeof(uint16_t)),
        copy(n * 14) {
    ParallelFor(n, size_t{1} << 16, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        param.as<float>()[i] = 0.02f * Uniform(4 * i);
        exp_avg.as<float>()[i] = 1e-3f * Uniform(4 * i + 1);
        exp_avg_sq.as<float>()[i] = 1e-6f * (1.5f + Uniform(4 * i + 2));
        grad.as<uint16_t>()[i] =
            FloatToHalfBits(65536 * 1e-3f * Uniform(4 * i + 3));
      }
    });
    std::memcpy(fresh_grad.data.get(), grad.data.get(), n * sizeof(uint16_t));
  }

  // A pseudo-random value in [-1, 1) from a hash of k (fast enough to fill
  // 64M parameters in well under a second).
  static float Uniform(uint64_t k) {
    k = (k + 0x9e3779b97f4a7c15u) * 0xbf58476d1ce4e5b9u;
    k = (k ^ (k >> 31)) * 0x94d049bb133111ebu;
    return static_cast<float>(static_cast<int32_t>(k >> 32)) * 0x1p-31f;
  }

  // One step over elements [begin, end) with `isa`.
  absl::Status Step(KernelIsa isa, size_t begin, size_t end) {
    uint16_t* g = grad.as<uint16_t>() + begin;
    return optim_internal::FusedAdam(
        isa, BenchStep(), param.as<float>() + begin,
        exp_avg.as<float>() + begin, exp_avg_sq.as<float>() + begin, g,
        DType::kF16, g, DType::kF16, end - begin);
  }

  // Puts back the scaled gradient that the step overwrote with the f16
  // param. (Fed its own params as grads, thousands of steps would drive
  // some states to subnormals, which x86 computes ~100x slower.)
  void RestoreGrad(bool parallel) {
    ParallelMemcpy(grad.data.get(), fresh_grad.data.get(), n * sizeof(uint16_t),
                   parallel, size_t{1} << 19);
  }

  // The arrays as (pointer, bytes), for the memcpy baseline; the grad first,
  // so that the copy evicts what RestoreGrad left in the cache.
  std::vector<std::pair<unsigned char*, size_t>> Arrays() {
    return {{grad.data.get(), n * 2},
            {param.data.get(), n * 4},
            {exp_avg.data.get(), n * 4},
            {exp_avg_sq.data.get(), n * 4}};
  }

  size_t n;
  Buffer param, exp_avg, exp_avg_sq, grad;
  Buffer fresh_grad;
  Buffer copy;  // The memcpy baseline's destination.
};

// Google Benchmark calls a benchmark function several times (to size the
// run, then once per repetition): the state (2.7 GB at 64M params) is built
// once per size and then keeps evolving, as it would in training.
AdamState& StateFor(size_t n) {
  static std::unique_ptr<AdamState> state;
  if (state == nullptr || state->n != n) {
    state.reset();
    state = std::make_unique<AdamState>(n);
  }
  return *state;
}

// The inputs of elements [begin, begin + len), copied before a step.
struct Slice {
  Slice(AdamState& state, size_t begin, size_t len)
      : begin(begin),
        param(state.param.as<float>() + begin,
              state.param.as<float>() + begin + len),
        exp_avg(state.exp_avg.as<float>() + begin,
                state.exp_avg.as<float>() + begin + len),
        exp_avg_sq(state.exp_avg_sq.as<float>() + begin,
                   state.exp_avg_sq.as<float>() + begin + len),
        grad(state.grad.as<uint16_t>() + begin,
             state.grad.as<uint16_t>() + begin + len) {}

  // Runs the scalar kernel on the copy and compares with `state` after
  // its step: "" or the first difference.
  std::string CheckAgainstScalar(AdamState& state) {
    const absl::Status status = optim_internal::FusedAdam(
        KernelIsa::kScalar, BenchStep(), param.data(), exp_avg.data(),
        exp_avg_sq.data(), grad.data(), DType::kF16, grad.data(), DType::kF16,
        param.size());
    if (!status.ok()) return std::string(status.message());
    for (size_t i = 0; i < param.size(); ++i) {
      const size_t at = begin + i;
      if (FloatBits(param[i]) != FloatBits(state.param.as<float>()[at]) ||
          FloatBits(exp_avg[i]) != FloatBits(state.exp_avg.as<float>()[at]) ||
          FloatBits(exp_avg_sq[i]) !=
              FloatBits(state.exp_avg_sq.as<float>()[at]) ||
          grad[i] != state.grad.as<uint16_t>()[at]) {
        return absl::StrCat("differs from the scalar kernel at element ", at);
      }
    }
    return "";
  }

  size_t begin;
  std::vector<float> param, exp_avg, exp_avg_sq;
  std::vector<uint16_t> grad;
};

void BM_FusedAdam(benchmark::State& bench) {
  using Clock = std::chrono::steady_clock;
  const size_t n = bench.range(0);
  const int threads = static_cast<int>(bench.range(1));
  SetParallelThreadsForTesting(threads);
  AdamState& state = StateFor(n);
  const KernelIsa isa = BestKernelIsa();

  // One checked step: the head, a middle piece and the tail (with its
  // scalar remainder) against the scalar kernel.
  const size_t len = std::min<size_t>(n, 4099);
  std::vector<Slice> slices = {Slice(state, 0, len),
                               Slice(state, n / 2, len / 2),
                               Slice(state, n - len, len)};
  if (absl::Status status = state.Step(isa, 0, n); !status.ok()) {
    bench.SkipWithError(std::string(status.message()).c_str());
    return;
  }
  for (Slice& slice : slices) {
    if (std::string error = slice.CheckAgainstScalar(state); !error.empty()) {
      bench.SkipWithError(error.c_str());
      return;
    }
  }
  state.RestoreGrad(threads != 1);

  double step_seconds = 0, memcpy_seconds = 0;
  for (auto _ : bench) {
    const auto t0 = Clock::now();
    const absl::Status status = state.Step(isa, 0, n);
    benchmark::ClobberMemory();
    const auto t1 = Clock::now();
    state.RestoreGrad(threads != 1);  // Untimed.
    const auto t2 = Clock::now();
    unsigned char* out = state.copy.data.get();
    for (const auto& [array, bytes] : state.Arrays()) {
      ParallelMemcpy(out, array, bytes, threads != 1, size_t{1} << 19);
      out += bytes;
    }
    benchmark::ClobberMemory();
    const auto t3 = Clock::now();
    if (!status.ok()) {
      bench.SkipWithError(std::string(status.message()).c_str());
      break;
    }
    const double seconds = std::chrono::duration<double>(t1 - t0).count();
    bench.SetIterationTime(seconds);
    step_seconds += seconds;
    memcpy_seconds += std::chrono::duration<double>(t3 - t2).count();
  }
  const double params = static_cast<double>(n) * bench.iterations();
  const double gbps = kAdamBytesPerParam * params / step_seconds / 1e9;
  const double memcpy_gbps = 28.0 * params / memcpy_seconds / 1e9;
  bench.counters["params/s"] = params / step_seconds;
  bench.counters["GB/s"] = gbps;
  bench.counters["memcpy_GB/s"] = memcpy_gbps;
  bench.counters["vs_memcpy"] = gbps / memcpy_gbps;
  bench.SetLabel(std::string(KernelIsaName(isa)));
  SetParallelThreadsForTesting(0);
}

// params: 1M (28 MB of traffic, fits the last-level cache of large CPUs)
// and 64M (1.8 GB: memory-bound); threads: 1 and 2.
void Sizes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"params", "threads"});
  for (int threads : {1, 2}) {
    for (int64_t params : {int64_t{1} << 20, int64_t{1} << 26}) {
      b->Args({params, threads});
    }
  }
  b->UseManualTime();
}

BENCHMARK(BM_FusedAdam)->Apply(Sizes);

}  // namespace
}  // namespace chunkzero
