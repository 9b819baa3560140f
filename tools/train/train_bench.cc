// The train job's speed targets, each against a baseline measured
// in the same iteration of the same binary:
//
//   bazel run --config=opt //tools/train:train_bench
//
// BM_ShardedVsReplicated: GPT-2 4 x 256, 4 heads, seq 128, batch 4, fp16,
//   world size 2. Each iteration trains the same steps with replicated and
//   with sharded storage (RunTraining, built-in data) and compares the mean
//   step time over the steps after the first (which builds the optimizer
//   states). Counter sharded_vs_replicated: target <= 1.15.
// BM_ModelVsSgemm: a replicated f32 step at d_model 512 (4 layers, 8 heads,
//   seq 256, vocab 8192, batch 4, world size 1: ZeroDdp and the optimizer
//   included) in model FLOP/s (GptModelFlopsPerStep) beside OpenBLAS sgemm
//   (M = N = K = 1024) timed right after it. Counter model_flops_vs_sgemm:
//   target >= 0.50.
#include <cblas.h>

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "models/gpt2/gpt_model.h"
#include "tools/train/trainer.h"

namespace chunkzero {
namespace {

using Clock = std::chrono::steady_clock;

// Mean step time after the first step, or a negative value with the error
// reported to `state`.
double MeanStepSeconds(benchmark::State& state, const TrainOptions& o) {
  absl::StatusOr<TrainResult> r = RunTraining(o, nullptr);
  if (!r.ok()) {
    state.SkipWithError(r.status().ToString().c_str());
    return -1;
  }
  for (const StepMetrics& m : r->steps) {
    if (!std::isfinite(m.loss) || m.skipped) {
      state.SkipWithError("a step overflowed or its loss is not finite");
      return -1;
    }
  }
  if (r->steps.size() < 2) {
    state.SkipWithError("need two steps or more");
    return -1;
  }
  double total = 0;
  for (size_t i = 1; i < r->steps.size(); ++i) {
    total += r->steps[i].step_time_s;
  }
  return total / static_cast<double>(r->steps.size() - 1);
}

void BM_ShardedVsReplicated(benchmark::State& state) {
  TrainOptions o;
  o.world_size = 2;
  o.model.layers = 4;
  o.model.d_model = 256;
  o.model.heads = 4;
  o.model.seq_len = 128;
  o.batch = 4;
  o.steps = 6;
  o.precision = DType::kF16;
  double replicated = 0, sharded = 0;
  for (auto _ : state) {
    o.storage = ChunkLayout::kReplicated;
    const double r = MeanStepSeconds(state, o);
    o.storage = ChunkLayout::kSharded;
    const double s = MeanStepSeconds(state, o);
    if (r < 0 || s < 0) return;
    replicated += r;
    sharded += s;
    state.SetIterationTime(r + s);
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["replicated_step_s"] = replicated / n;
  state.counters["sharded_step_s"] = sharded / n;
  state.counters["sharded_vs_replicated"] = sharded / replicated;
}
BENCHMARK(BM_ShardedVsReplicated)
    ->UseManualTime()
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond);

void BM_ModelVsSgemm(benchmark::State& state) {
  TrainOptions o;
  o.world_size = 1;
  o.storage = ChunkLayout::kReplicated;
  o.precision = DType::kF32;
  o.model.layers = 4;
  o.model.d_model = 512;
  o.model.heads = 8;
  o.model.seq_len = 256;
  o.model.vocab = 8192;
  o.batch = 4;
  o.steps = 4;
  o.chunk_size = 0;
  // Byte data (vocab 256 < 8192) is fine: ids index the larger vocabulary.
  constexpr int kN = 1024, kSgemmReps = 8;
  std::vector<float> a(kN * kN, 0.5f), b(kN * kN, 0.25f), c(kN * kN);
  double step = 0, sgemm = 0;
  for (auto _ : state) {
    const double s = MeanStepSeconds(state, o);
    if (s < 0) return;
    const auto t0 = Clock::now();
    for (int i = 0; i < kSgemmReps; ++i) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kN, kN, kN, 1.0f,
                  a.data(), kN, b.data(), kN, 0.0f, c.data(), kN);
    }
    benchmark::DoNotOptimize(c.data());
    sgemm +=
        std::chrono::duration<double>(Clock::now() - t0).count() / kSgemmReps;
    step += s;
    state.SetIterationTime(s);
  }
  if (c[0] != 0.5f * 0.25f * kN) {
    state.SkipWithError("sgemm result is wrong");
    return;
  }
  const double n = static_cast<double>(state.iterations());
  const double tokens = static_cast<double>(o.batch) * o.model.seq_len;
  const double model_flops =
      GptModelFlopsPerStep(o.model, static_cast<int64_t>(tokens)) / (step / n);
  const double sgemm_flops = 2.0 * kN * kN * kN / (sgemm / n);
  state.counters["model_GFLOP/s"] = model_flops / 1e9;
  state.counters["sgemm_GFLOP/s"] = sgemm_flops / 1e9;
  state.counters["model_flops_vs_sgemm"] = model_flops / sgemm_flops;
}
BENCHMARK(BM_ModelVsSgemm)
    ->UseManualTime()
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace chunkzero
