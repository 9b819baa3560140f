// One GPT-2 training step (forward + backward, f32, LocalHooks) on the CPU,
// beside Gemm (kernels/gemm.h) measured in the same run.
//
//   bazel run --config=opt //models/gpt2:gpt_bench
//
// BM_GptStep: 4 layers, d_model 512, 8 heads, seq 256, vocab 8192, batch 4
// (17.0M parameters, 1024 tokens a step). Each iteration runs one step and
// then 8 Gemms of M = N = K = 1024 (square, where the library is at its
// best; ~15% of the step's time), so both see the same machine state; only
// the step's time is the row's time. Counters:
//   model_GFLOP/s         GptModelFlopsPerStep / step time (1e9).
//   gemm_GFLOP/s          2 M N K / Gemm time.
//   model_flops_vs_gemm   their ratio: the share of the machine's matmul
//                         rate the whole step achieves (target: >= 0.50).
// Threads: every core, on ParallelFor's pool; CHUNKZERO_NUM_THREADS
// overrides.
#include <chrono>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "ddp/local_hooks.h"
#include "kernels/gemm.h"
#include "models/gpt2/gpt_model.h"

namespace chunkzero {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void BM_GptStep(benchmark::State& state) {
  GptConfig cfg;
  cfg.layers = 4;
  cfg.d_model = 512;
  cfg.heads = 8;
  cfg.seq_len = 256;
  cfg.vocab = 8192;
  const int B = 4, T = cfg.seq_len;
  absl::StatusOr<std::unique_ptr<GptModel>> model = GptModel::Create(cfg, 1);
  if (!model.ok()) {
    state.SkipWithError(model.status().ToString().c_str());
    return;
  }
  std::mt19937 rng(3);
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % cfg.vocab);
  for (int32_t& t : targets) t = static_cast<int32_t>(rng() % cfg.vocab);

  constexpr int kM = 1024, kN = 1024, kK = 1024, kGemmReps = 8;
  std::vector<float> a(kM * kK, 0.5f), b(kK * kN, 0.25f), c(kM * kN);

  LocalHooks hooks;
  auto step = [&]() -> absl::Status {
    absl::StatusOr<float> loss =
        (*model)->Forward(hooks, B, T, tokens, targets);
    if (!loss.ok()) return loss.status();
    // A fresh model predicts about uniformly: loss ~ log V.
    if (std::abs(*loss - std::log(static_cast<float>(cfg.vocab))) > 0.5f) {
      return absl::InternalError("loss far from log(vocab)");
    }
    absl::Status s = (*model)->Backward(hooks);
    if (!s.ok()) return s;
    return hooks.EndStep();
  };
  // Warm-up (allocations, page faults) outside the timing.
  if (absl::Status s = step(); !s.ok()) {
    state.SkipWithError(s.ToString().c_str());
    return;
  }
  double step_seconds = 0, gemm_seconds = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    if (absl::Status s = step(); !s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      return;
    }
    const auto t1 = Clock::now();
    for (int i = 0; i < kGemmReps; ++i) {
      gemm::Gemm(gemm::Transpose::kNo, gemm::Transpose::kNo, kM, kN, kK, 1.0f,
                 a.data(), kK, b.data(), kN, 0.0f, c.data(), kN);
      benchmark::ClobberMemory();
    }
    const auto t2 = Clock::now();
    state.SetIterationTime(Seconds(t0, t1));
    step_seconds += Seconds(t0, t1);
    gemm_seconds += Seconds(t1, t2);
  }
  const double n = static_cast<double>(state.iterations());
  const double model_rate =
      GptModelFlopsPerStep(cfg, int64_t{B} * T) * n / step_seconds / 1e9;
  const double gemm_rate =
      2.0 * kM * kN * kK * kGemmReps * n / gemm_seconds / 1e9;
  state.counters["model_GFLOP/s"] = model_rate;
  state.counters["gemm_GFLOP/s"] = gemm_rate;
  state.counters["model_flops_vs_gemm"] = model_rate / gemm_rate;
  state.counters["tokens/s"] = B * T * n / step_seconds;
}
BENCHMARK(BM_GptStep)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace chunkzero

BENCHMARK_MAIN();
