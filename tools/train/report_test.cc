#include "tools/train/report.h"

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/train/train_flags.h"
#include "tools/train/trainer.h"

namespace chunkzero {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;

TrainOptions Options(const std::string& precision, const std::string& optimizer,
                     int grad_accum = 1) {
  TrainOptions o;
  o.precision = *ParsePrecisionFlag(precision);
  o.optimizer = *ParseOptimizerFlag(optimizer);
  o.grad_accum = grad_accum;
  return o;
}

TEST(ModelBytesPerParameterTest, ComputeMasterAndStates) {
  // Compute-dtype chunk (grads reuse it) + fp32 master + fp32 states.
  EXPECT_EQ(ModelBytesPerParameter(Options("fp16", "adamw")), 2 + 4 + 8);
  EXPECT_EQ(ModelBytesPerParameter(Options("bf16", "adam")), 2 + 4 + 8);
  EXPECT_EQ(ModelBytesPerParameter(Options("fp32", "adamw")), 4 + 4 + 8);
  // The fp32 accumulation buffer with grad_accum > 1.
  EXPECT_EQ(ModelBytesPerParameter(Options("fp16", "adamw", 2)), 2 + 4 + 8 + 4);
  EXPECT_EQ(ModelBytesPerParameter(Options("fp32", "adam", 4)), 4 + 4 + 8 + 4);
}

// The train job runs SGD without momentum (TrainOptions has no momentum and
// the trainer leaves ZeroOptimizerOptions::momentum at 0), so SGD keeps no
// optimizer state: compute dtype + master only.
TEST(ModelBytesPerParameterTest, SgdWithoutMomentumKeepsNoState) {
  EXPECT_EQ(ModelBytesPerParameter(Options("fp16", "sgd")), 2 + 4);
  EXPECT_EQ(ModelBytesPerParameter(Options("fp32", "sgd")), 4 + 4);
}

TEST(ReplicatedBytesPerParameterTest, AddsASeparateGrad) {
  EXPECT_EQ(ReplicatedBytesPerParameter(Options("fp16", "adamw")), 16);
  EXPECT_EQ(ReplicatedBytesPerParameter(Options("fp32", "adamw")), 20);
  EXPECT_EQ(ReplicatedBytesPerParameter(Options("fp16", "adamw", 2)), 20);
}

TEST(ExpectedCommBytesPerStepTest, EachLayout) {
  TrainOptions o = Options("fp16", "adamw");
  o.world_size = 4;
  constexpr int64_t kPsi = 1000;
  o.storage = ChunkLayout::kReplicated;
  EXPECT_DOUBLE_EQ(ExpectedCommBytesPerStep(o, kPsi), 2 * 2 * 1000 * 3 / 4.0);
  o.storage = ChunkLayout::kSharded;
  EXPECT_DOUBLE_EQ(ExpectedCommBytesPerStep(o, kPsi), 3 * 2 * 1000 * 3 / 4.0);
  o.storage = ChunkLayout::kOwner;
  EXPECT_DOUBLE_EQ(ExpectedCommBytesPerStep(o, kPsi), 3 * 2 * 1000);
  // Times the micro-batches.
  o.grad_accum = 3;
  EXPECT_DOUBLE_EQ(ExpectedCommBytesPerStep(o, kPsi), 3 * 3 * 2 * 1000);
  o.storage = ChunkLayout::kSharded;
  EXPECT_DOUBLE_EQ(ExpectedCommBytesPerStep(o, kPsi),
                   3 * 3 * 2 * 1000 * 3 / 4.0);
  // fp32 moves 4 bytes per element.
  o.grad_accum = 1;
  o.precision = DType::kF32;
  o.world_size = 2;
  EXPECT_DOUBLE_EQ(ExpectedCommBytesPerStep(o, kPsi), 3 * 4 * 1000 / 2.0);
  // One rank moves nothing in any layout.
  o.world_size = 1;
  for (const std::string storage : {"replicated", "owner", "sharded"}) {
    o.storage = *ParseStorageFlag(storage);
    EXPECT_EQ(ExpectedCommBytesPerStep(o, kPsi), 0) << storage;
  }
}

// A synthetic two-rank result: Ψ = 1000, 14 bytes per parameter, so
// K Ψ / N = 7000.
TrainResult Synthetic(int64_t peak, int64_t at_rest) {
  TrainResult r;
  r.model.layers = 1;
  r.model.d_model = 8;
  r.model.heads = 2;
  r.model.seq_len = 4;
  r.model.vocab = 16;
  r.parameters = 1000;
  r.chunk_size = 512;
  r.chunk_utilisation = 0.5;
  r.chunk_bytes = 1024;
  for (int step = 1; step <= 3; ++step) {
    StepMetrics m;
    m.step = step;
    m.steps = 3;
    m.loss = 4 - step;
    m.step_time_s = 0.5;
    m.tokens_per_s = 100;
    m.activation_kept_bytes = 3 << 20;
    m.activation_recomputed_bytes = 5 << 20;
    m.recompute_accesses = 4;
    m.ranks.resize(2);
    m.ranks[0].peak_total_bytes = peak - 10;
    m.ranks[1].peak_total_bytes = peak;
    // Step 1 is left out of the mean: give it something absurd.
    m.ranks[0].comm_bytes = {{"all_gather", step == 1 ? 1000000 : 2000},
                             {"reduce_scatter", 1000}};
    r.steps.push_back(m);
  }
  r.at_rest_bytes = {at_rest - 10, at_rest};
  r.threads_per_rank = 2;
  r.gemm_kernel = "onednn 9.9.9 matmul brg:avx9";
  r.comm_transport = "gloo, shared memory for collectives from 1 MiB";
  return r;
}

TrainOptions TwoRanks() {
  TrainOptions o = Options("fp16", "adamw");
  o.world_size = 2;
  o.storage = ChunkLayout::kSharded;
  o.batch = 1;
  return o;
}

TEST(CheckMemoryTest, TakesTheRankWithTheLargestPeak) {
  const MemoryCheck check = CheckMemory(TwoRanks(), Synthetic(9000, 8000));
  EXPECT_EQ(check.rank, 1);
  EXPECT_EQ(check.peak, 9000);
  EXPECT_EQ(check.at_rest, 8000);
  EXPECT_DOUBLE_EQ(check.sharded_bytes, 7000);
  EXPECT_DOUBLE_EQ(check.in_flight_bytes, 1000);
  EXPECT_DOUBLE_EQ(check.ratio, 9000.0 / 8000);

  TrainOptions replicated = TwoRanks();
  replicated.storage = ChunkLayout::kReplicated;
  EXPECT_DOUBLE_EQ(CheckMemory(replicated, Synthetic(9000, 8000)).sharded_bytes,
                   14000);
}

TEST(FormatSummaryTest, TargetMet) {
  // At rest exactly K Ψ / N: the ratio is 1.
  const std::string s = FormatSummary(TwoRanks(), Synthetic(9000, 7000));
  EXPECT_THAT(s, HasSubstr("Psi = 1000 parameters"));
  EXPECT_THAT(s, HasSubstr("2 ranks, sharded storage, fp16, adamw"));
  EXPECT_THAT(s, HasSubstr("chunks of 512 elements (50.0% used)\n"
                           "matmuls: f32 on onednn 9.9.9 matmul brg:avx9, "
                           "2 threads per rank\n"));
  EXPECT_THAT(s, HasSubstr("loss 3.0000 (step 1) -> 1.0000 (step 3)"));
  EXPECT_THAT(s, HasSubstr("1.000, met\n"));
  EXPECT_THAT(s, Not(HasSubstr("NOT MET")));
  // 2000 + 1000 bus bytes in steps 2 and 3; 3 x 2 x 1000 x 1/2 expected.
  EXPECT_THAT(s, HasSubstr("Comm per step, rank 0 (bus bytes, gloo, shared "
                           "memory for collectives from 1 MiB): 2.9 KiB;"));
  EXPECT_THAT(s, HasSubstr("(ratio 1.000:"));
  EXPECT_THAT(s, HasSubstr("Speed: 0.500 s per step, 100 tokens/s"));
  EXPECT_THAT(s, HasSubstr("  activations per micro-batch: 3.00 MiB kept for "
                           "backward\n"));
  EXPECT_EQ(s.back(), '\n');
}

TEST(FormatSummaryTest, ShowsActivationsKeptAndRecomputed) {
  TrainOptions o = TwoRanks();
  o.activation_checkpointing.every = 2;
  EXPECT_THAT(
      FormatSummary(o, Synthetic(9000, 7000)),
      HasSubstr("  activations per micro-batch: 3.00 MiB kept, 5.00 MiB "
                "recomputed in backward "
                "(--activation_checkpointing=every:2; rank 0 "
                "materialised 4 chunks again for it in the last "
                "step)\n"));
}

TEST(FormatSummaryTest, NamesBf16Matmuls) {
  TrainOptions o = TwoRanks();
  o.precision = DType::kBF16;
  EXPECT_THAT(
      FormatSummary(o, Synthetic(9000, 7000)),
      HasSubstr("matmuls: bf16 (inputs rounded to bf16, f32 "
                "accumulation) on onednn 9.9.9 matmul brg:avx9, 2 threads "
                "per rank\n"));
  EXPECT_EQ(MatmulPrecision(DType::kBF16), gemm::Precision::kBf16);
  EXPECT_EQ(MatmulPrecision(DType::kF16), gemm::Precision::kF32);
  EXPECT_EQ(MatmulPrecision(DType::kF32), gemm::Precision::kF32);
}

TEST(FormatSummaryTest, TargetNotMet) {
  // 1000 bytes at rest beyond K Ψ / N: 9000 / 8000.
  const std::string s = FormatSummary(TwoRanks(), Synthetic(9000, 8000));
  EXPECT_THAT(s, HasSubstr("1.125, NOT MET\n"));
  // Just inside the target: 1.05 exactly is met.
  const std::string edge = FormatSummary(TwoRanks(), Synthetic(21000, 8000));
  EXPECT_THAT(edge, HasSubstr("1.050, met\n"));
}

TEST(FormatSummaryTest, NoSteps) {
  TrainResult r = Synthetic(9000, 7000);
  r.steps.clear();
  r.threads_per_rank = 1;
  r.gemm_kernel.clear();
  const std::string s = FormatSummary(TwoRanks(), r);
  EXPECT_THAT(s, HasSubstr("matmuls: f32 on ?, 1 thread per rank\n"));
  EXPECT_THAT(s, HasSubstr("no steps run\n"));
  EXPECT_THAT(s, Not(HasSubstr("target peak")));
}

StepMetrics Step(int64_t step, int64_t steps, double loss, bool skipped) {
  StepMetrics m;
  m.step = step;
  m.steps = steps;
  m.loss = loss;
  m.skipped = skipped;
  m.tokens_per_s = 1234.4;
  m.ranks.resize(2);
  m.ranks[0].peak_total_bytes = 2048;
  m.ranks[1].peak_total_bytes = 3 << 20;
  return m;
}

// Everything a printer writes to a file for `steps` and Finish.
std::string Printed(bool terminal, const std::vector<StepMetrics>& steps) {
  std::FILE* f = std::tmpfile();
  EXPECT_NE(f, nullptr);
  if (f == nullptr) return "";
  ProgressPrinter printer(f, terminal);
  for (const StepMetrics& m : steps) printer.OnStep(m);
  printer.Finish();
  std::rewind(f);
  std::string s;
  char buffer[256];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), f)) > 0) {
    s.append(buffer, n);
  }
  std::fclose(f);
  return s;
}

TEST(ProgressPrinterTest, PlainLinesWhenNotATerminal) {
  const std::string s = Printed(
      /*terminal=*/false, {Step(1, 12, 5.25, false), Step(2, 12, 5.125, true),
                           Step(12, 12, 4.0, false)});
  EXPECT_THAT(s, Not(HasSubstr("\r")));
  EXPECT_THAT(s, Not(HasSubstr("\033")));
  EXPECT_THAT(
      s, MatchesRegex("step  1/12  loss 5\\.2500  1234 tokens/s  ETA "
                      "[0-9]+:[0-9][0-9]  peak/rank 2\\.0 KiB, 3\\.00 MiB\n"
                      "step  2/12  loss 5\\.1250  \\(skipped: overflow\\)  "
                      "1234 tokens/s  ETA [0-9]+:[0-9][0-9]  peak/rank "
                      "2\\.0 KiB, 3\\.00 MiB\n"
                      "step 12/12  loss 4\\.0000  1234 tokens/s  ETA 0:00  "
                      "peak/rank 2\\.0 KiB, 3\\.00 MiB\n"));
}

TEST(ProgressPrinterTest, ManyRanksShowTheSmallestAndLargestPeak) {
  StepMetrics m = Step(1, 1, 1.0, false);
  m.ranks.resize(10);
  for (int r = 0; r < 10; ++r) m.ranks[r].peak_total_bytes = (r + 1) << 20;
  EXPECT_THAT(Printed(/*terminal=*/false, {m}),
              HasSubstr("peak/rank 1.00 MiB .. 10.00 MiB\n"));
}

TEST(ProgressPrinterTest, RewritesOneLineOnATerminal) {
  const std::string s = Printed(
      /*terminal=*/true, {Step(1, 2, 5.25, false), Step(2, 2, 5.0, false)});
  EXPECT_EQ(s.find('\n'), s.size() - 1) << s;
  EXPECT_THAT(s, MatchesRegex("\rstep 1/2  loss 5\\.2500 .*\033\\[K"
                              "\rstep 2/2  loss 5\\.0000 .*\033\\[K\n"));
}

}  // namespace
}  // namespace chunkzero
