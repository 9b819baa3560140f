// The train job with --model=llama: it trains from scratch on the built-in
// text through the same engine as GPT-2, with the same bits in every
// layout, placement and recomputation, resumes at another world size, and
// plans its memory as exactly as GPT-2's.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/pretrained/pretrained_directory.h"
#include "tools/train/memory_estimate.h"
#include "tools/train/report.h"
#include "tools/train/train_flags.h"
#include "tools/train/train_plan.h"
#include "tools/train/trainer.h"

namespace chunkzero {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

TrainOptions TinyLlama() {
  TrainOptions o;
  o.model_family = ModelFamily::kLlama;
  o.model.layers = 2;
  o.model.d_model = 32;
  o.model.heads = 4;
  o.model.seq_len = 16;
  o.model.vocab = 256;
  o.llama.kv_heads = 2;
  o.llama.ffn = 64;
  o.llama.rope_theta = 500000;
  o.world_size = 2;
  o.batch = 2;
  o.steps = 6;
  o.warmup = 1;
  o.precision = DType::kF32;
  return o;
}

std::vector<double> Losses(const TrainOptions& o) {
  absl::StatusOr<TrainResult> r = RunTraining(o, nullptr);
  EXPECT_TRUE(r.ok()) << r.status();
  std::vector<double> losses;
  if (!r.ok()) return losses;
  for (const StepMetrics& m : r->steps) losses.push_back(m.loss);
  return losses;
}

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/llama_train_test/", name);
  fs::remove_all(dir);
  fs::create_directories(fs::path(dir).parent_path());
  return dir;
}

TEST(LlamaTrain, LearnsTheBuiltInTextAndSaysWhatItTrained) {
  TrainOptions o = TinyLlama();
  o.steps = 30;
  o.lr = 3e-3;
  absl::StatusOr<TrainResult> r = RunTraining(o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->steps.size(), 30u);
  EXPECT_LT(r->steps.back().loss, r->steps.front().loss - 1.0);
  // 256 x 32 twice, 2 layers of 2*32*32 + 2*16*32 + 3*64*32 + 2*32, norm.
  EXPECT_EQ(r->parameters, 2 * 8192 + 2 * 9280 + 32);
  const std::string summary = FormatSummary(o, *r);
  EXPECT_THAT(summary, HasSubstr("Llama: 2 layers x 32, 4 heads (2 kv, "
                                 "head_dim 8), ffn 64, rope_theta 500000, "
                                 "context 16, vocab 256: Psi = 34976"));
  EXPECT_THAT(summary, ::testing::Not(HasSubstr("tied")));
}

TEST(LlamaTrain, SameBitsInEveryLayoutPlacementAndRecomputation) {
  const std::vector<double> base = Losses(TinyLlama());
  ASSERT_EQ(base.size(), 6u);
  struct Variant {
    const char* name;
    ChunkLayout layout;
    OffloadPolicy offload;
    int every;
  };
  for (const Variant& v :
       {Variant{"replicated", ChunkLayout::kReplicated, OffloadPolicy::kNone,
                0},
        Variant{"owner", ChunkLayout::kOwner, OffloadPolicy::kNone, 0},
        Variant{"layers", ChunkLayout::kSharded, OffloadPolicy::kNone, 1},
        Variant{"params", ChunkLayout::kSharded, OffloadPolicy::kParams, 0},
        Variant{"owner optimizer every:2", ChunkLayout::kOwner,
                OffloadPolicy::kOptimizer, 2}}) {
    SCOPED_TRACE(v.name);
    TrainOptions o = TinyLlama();
    o.storage = v.layout;
    o.offload = v.offload;
    o.activation_checkpointing.every = v.every;
    EXPECT_EQ(Losses(o), base);
  }
  // 16-bit: recomputation changes no bit either.
  for (DType precision : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(precision));
    TrainOptions o = TinyLlama();
    o.precision = precision;
    const std::vector<double> plain = Losses(o);
    o.activation_checkpointing.every = 1;
    EXPECT_EQ(Losses(o), plain);
    ASSERT_EQ(plain.size(), 6u);
    EXPECT_NEAR(plain.back(), base.back(), 2e-2 * base.back());
  }
}

TEST(LlamaTrain, ResumesAtAnotherWorldSizeWithTheSameLosses) {
  TrainOptions o = TinyLlama();
  o.steps = 6;
  // A constant rate, so that a 3-step run is the first half of a 6-step one.
  o.warmup = 0;
  o.min_lr = o.lr;
  const std::vector<double> plain = Losses(o);
  const std::string dir = TestDir("resume");
  TrainOptions first = o;
  first.steps = 3;
  first.save = dir;
  ASSERT_EQ(Losses(first).size(), 3u);
  TrainOptions resumed = o;
  resumed.world_size = 1;
  resumed.batch = 4;
  resumed.storage = ChunkLayout::kReplicated;
  resumed.resume = dir;
  const std::vector<double> rest = Losses(resumed);
  ASSERT_EQ(rest.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(rest[i], plain[3 + i], 1e-5 * plain[3 + i]) << "step " << 4 + i;
  }
  // A GPT-2 run cannot resume it: the record says llama.
  TrainOptions gpt = resumed;
  gpt.model_family = ModelFamily::kGpt2;
  gpt.given_flags.clear();
  absl::StatusOr<TrainResult> refused = RunTraining(gpt, nullptr);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("was saved with model=llama, this run has model=gpt2"));
  // A checkpoint from before the Llama model records no "model": it is
  // GPT-2's, and a Llama of the same sizes cannot resume it.
  const std::map<std::string, std::string> old_gpt = {{"layers", "2"},
                                                      {"vocab", "256"}};
  const std::map<std::string, std::string> llama = {
      {"model", "llama"}, {"layers", "2"}, {"vocab", "256"}};
  EXPECT_THAT(CheckSavedConfig(old_gpt, llama, "old").message(),
              HasSubstr("--resume=old was saved with model=gpt2, this run "
                        "has model=llama"));
  std::map<std::string, std::string> gpt_now = llama;
  gpt_now["model"] = "gpt2";
  EXPECT_TRUE(CheckSavedConfig(old_gpt, gpt_now, "old").ok());
  gpt_now["vocab"] = "512";
  EXPECT_THAT(CheckSavedConfig(old_gpt, gpt_now, "old").message(),
              HasSubstr("was saved with vocab=256, this run has vocab=512"));
}

std::map<std::string, std::vector<float>> DirectoryTensors(
    const std::string& dir) {
  absl::StatusOr<PretrainedDirectory> read = PretrainedDirectory::Read(dir);
  EXPECT_TRUE(read.ok()) << read.status();
  std::map<std::string, std::vector<float>> out;
  if (!read.ok()) return out;
  for (const std::string& name : read->names()) {
    out[name] = *read->Get(name)->ToFloats();
  }
  return out;
}

TEST(LlamaTrain, ExportsAHuggingFaceDirectoryAndStartsFromIt) {
  TrainOptions o = TinyLlama();
  o.steps = 3;
  const std::string first = TestDir("export_first");
  o.export_path = first;
  o.export_shard_size = 40000;  // Sharded: the embedding alone is 32 KiB.
  ASSERT_EQ(Losses(o).size(), 3u);
  EXPECT_TRUE(fs::exists(first + "/model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(first + "/config.json"));

  // From the directory: the architecture comes from config.json (no
  // --model), and zero steps export the same weights again.
  TrainOptions again;
  again.world_size = 2;
  again.batch = 2;
  again.steps = 0;
  again.precision = DType::kF32;
  again.init = first;
  const std::string second = TestDir("export_second");
  again.export_path = second + "/";  // A new directory, slash and all.
  absl::StatusOr<TrainResult> r = RunTraining(again, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->spec.family, ModelFamily::kLlama);
  EXPECT_EQ(r->spec.llama.kv_heads, 2);
  EXPECT_EQ(r->spec.llama.rope_theta, 500000);
  EXPECT_EQ(r->parameters, 34976);
  const auto a = DirectoryTensors(first), b = DirectoryTensors(second);
  ASSERT_EQ(a.size(), 21u);
  EXPECT_EQ(a, b);

  // The family is the directory's without --model: a Llama exports a
  // directory, not a file, and is refused before step 1 ...
  TrainOptions to_file = again;
  to_file.steps = 1;
  to_file.export_path = TestDir("again.safetensors");
  EXPECT_THAT(RunTraining(to_file, nullptr).status().message(),
              HasSubstr("--export=" + to_file.export_path +
                        ": a Llama exports a Hugging Face directory"));
  EXPECT_FALSE(fs::exists(to_file.export_path));
  // ... with what only GPT-2 has (planned as if with a GPU of 80 GiB,
  // where the Llama itself plans) ...
  const GpuMemoryProbe gpu = {
      [] { return 1; },
      [](int) -> absl::StatusOr<int64_t> { return int64_t{80} << 30; }};
  to_file.export_path.clear();
  to_file.device = ComputeDevice::kCuda;
  to_file.world_size = 1;
  EXPECT_TRUE(PlanTraining(to_file, gpu).ok())
      << PlanTraining(to_file, gpu).status();
  to_file.fused_attention = true;
  EXPECT_THAT(PlanTraining(to_file, gpu).status().message(),
              HasSubstr("--fused_attention=true: the Llama model has only"));
  // ... and --kv_heads is checked against the directory's heads, not
  // --heads' default.
  to_file = again;
  to_file.model_family = ModelFamily::kLlama;
  to_file.given_flags = {"model", "kv_heads"};
  to_file.model.heads = 5;
  to_file.llama.kv_heads = 2;
  EXPECT_TRUE(PlanTraining(to_file).ok()) << PlanTraining(to_file).status();
  to_file.given_flags.insert("heads");
  EXPECT_THAT(PlanTraining(to_file).status().message(),
              HasSubstr("--kv_heads=2: must divide --heads=5"));

  // Planning counts the bytes the reader takes in, not the other files a
  // model directory holds (here a sparse 64 MiB pytorch_model.bin) ...
  fs::resize_file((std::ofstream(first + "/pytorch_model.bin"),
                   first + "/pytorch_model.bin"),
                  int64_t{64} << 20);
  TrainOptions tight = again;
  tight.export_path.clear();
  tight.memory_limit_bytes = int64_t{64} << 20;
  EXPECT_TRUE(PlanTraining(tight).ok()) << PlanTraining(tight).status();
  // ... and refuses a directory twice the size of what may be held.
  tight.memory_limit_bytes = 200000;
  EXPECT_THAT(std::string(PlanTraining(tight).status().message()),
              HasSubstr(" has 141.09 KiB; reading it needs about twice that, "
                        "but 195.31 KiB "
                        "is available"));
  fs::remove(first + "/pytorch_model.bin");

  // Trained on from there, it goes on learning.
  again.steps = 3;
  again.export_path.clear();
  again.given_flags = {"model"};
  again.model_family = ModelFamily::kLlama;
  const std::vector<double> more = Losses(again);
  ASSERT_EQ(more.size(), 3u);

  // What contradicts the directory is refused, naming both.
  TrainOptions gpt = again;
  gpt.model_family = ModelFamily::kGpt2;
  EXPECT_THAT(PlanTraining(gpt).status().message(),
              HasSubstr("--model=gpt2 disagrees with --init=" + first +
                        ", whose config.json says \"llama\""));
  TrainOptions kv = again;
  kv.llama.kv_heads = 4;
  kv.given_flags = {"kv_heads"};
  EXPECT_THAT(PlanTraining(kv).status().message(),
              HasSubstr("--kv_heads=4 disagrees with --init=" + first +
                        ", whose number of key/value heads is 2"));
  TrainOptions file = TinyLlama();
  file.export_path = TestDir("x.safetensors");
  EXPECT_THAT(RunTraining(file, nullptr).status().message(),
              HasSubstr("a Llama exports a Hugging Face directory"));
  file.export_path.clear();
  file.init = first + "/config.json";
  EXPECT_THAT(PlanTraining(file).status().message(),
              HasSubstr("a Llama starts from a Hugging Face directory"));
}

TEST(LlamaTrain, ADefaultFfnPastIntIsRefusedNamingDModel) {
  TrainOptions o = TinyLlama();
  o.llama.ffn = 0;
  o.model.d_model = 1 << 30;
  EXPECT_EQ(DefaultLlamaFfn(1 << 30), 2863311552);
  EXPECT_THAT(PlanTraining(o).status().message(),
              HasSubstr("--d_model=1073741824: gives a default --ffn of "
                        "2863311552, past 2^31 - 1; give --ffn"));
  EXPECT_EQ(DefaultLlamaFfn(768), 2048);
}

TEST(LlamaTrain, GptTwoExportsADirectoryToo) {
  TrainOptions o;
  o.model.layers = 1;
  o.model.d_model = 32;
  o.model.heads = 2;
  o.model.seq_len = 16;
  o.world_size = 2;
  o.batch = 2;
  o.steps = 2;
  o.precision = DType::kF32;
  const std::string dir = TestDir("gpt_dir");
  o.export_path = dir;
  ASSERT_EQ(Losses(o).size(), 2u);
  EXPECT_TRUE(fs::exists(dir + "/model.safetensors"));
  TrainOptions from = o;
  from.init = dir;
  from.model.heads = 1;  // Not given: config.json's n_head wins.
  from.steps = 0;
  const std::string second = TestDir("gpt_dir_again");
  from.export_path = second;
  absl::StatusOr<TrainResult> r = RunTraining(from, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->spec.gpt.heads, 2);
  EXPECT_EQ(DirectoryTensors(dir), DirectoryTensors(second));
}

TEST(LlamaTrain, TrainsOnUint32TokensPastSixteenBits) {
  const std::string path = TestDir("ids.u32");
  std::string bytes;
  for (uint32_t i = 0; i < 4000; ++i) {
    const uint32_t id = (i * 7919u) % 70000u;  // Up to 69999.
    for (int b = 0; b < 4; ++b) bytes.push_back(static_cast<char>(id >> 8 * b));
  }
  std::ofstream(path, std::ios::binary) << bytes;
  TrainOptions o = TinyLlama();
  o.model.vocab = 70000;
  o.tokens = path;
  o.token_dtype = TokenDType::kU32;
  o.steps = 2;
  const std::vector<double> losses = Losses(o);
  ASSERT_EQ(losses.size(), 2u);
  EXPECT_NEAR(losses[0], std::log(70000.0), 0.1);  // Uniform at the start.
  o.model.vocab = 60000;
  EXPECT_THAT(PlanTraining(o).status().message(),
              HasSubstr(": token 8 (byte offset 32) is 63352, outside the "
                        "vocabulary of 60000"));
}

// The estimate before step 1 bounds the measured device peak and stays
// within 1.15 x it, as for GPT-2 (estimate_bound_test).
TEST(LlamaTrain, TheDeviceEstimateIsTight) {
  for (ChunkLayout layout : {ChunkLayout::kSharded, ChunkLayout::kOwner}) {
    for (OffloadPolicy offload :
         {OffloadPolicy::kNone, OffloadPolicy::kOptimizer,
          OffloadPolicy::kParams}) {
      for (int every : {0, 1}) {
        for (DType precision : {DType::kF32, DType::kBF16, DType::kF16}) {
          TrainOptions o = TinyLlama();
          o.steps = 2;
          o.storage = layout;
          o.offload = offload;
          o.activation_checkpointing.every = every;
          o.precision = precision;
          o.device_memory_limit = int64_t{1} << 40;
          SCOPED_TRACE(absl::StrCat(ChunkLayoutName(layout), " ",
                                    OffloadFlagValue(offload), " every ", every,
                                    " ", DTypeName(precision)));
          absl::StatusOr<TrainPlan> plan = PlanTraining(o);
          ASSERT_TRUE(plan.ok()) << plan.status();
          const double estimate = DeviceMemoryNeeded(plan->memory, o.offload);
          absl::StatusOr<TrainResult> r = RunTraining(o, nullptr);
          ASSERT_TRUE(r.ok()) << r.status();
          const double peak = static_cast<double>(DevicePeak(*r));
          ASSERT_GT(peak, 0);
          EXPECT_GE(estimate, peak);
          EXPECT_LE(estimate, 1.15 * peak);
        }
      }
    }
  }
}

// On a GPU the attention backward keeps every head's T x T grads at once
// and a dqkv of its own (LayerBackend's CUDA layers), where the CPU keeps a
// T x T block and a head's dq, dk, dv per thread.
TEST(LlamaTrain, OnAGpuTheEstimateCountsTheGpuAttentionScratch) {
  TrainMemoryInput in;
  LlamaConfig m;
  m.layers = 2;
  m.d_model = 64;
  m.heads = 4;
  m.kv_heads = 2;
  m.ffn = 96;
  m.vocab = 100;
  m.seq_len = 32;
  in.llama = m;
  in.seq_len = 32;
  in.batch = 3;
  in.threads_per_rank = 2;
  absl::StatusOr<TrainMemoryEstimate> cpu = EstimateTrainMemory(in);
  in.gpu = true;
  absl::StatusOr<TrainMemoryEstimate> gpu = EstimateTrainMemory(in);
  ASSERT_TRUE(cpu.ok() && gpu.ok());
  // B NH T^2 + N 3 Ch on the GPU; min(2 threads, B NH) (T^2 + 3 T hd) on
  // the CPU; 4 bytes each.
  const double N = 3 * 32, ch = 64;
  const double on_gpu = 3 * 4 * 32 * 32 + N * 3 * ch;
  const double on_cpu = 2 * (32 * 32 + 3 * 32 * 16);
  EXPECT_EQ(gpu->activations - cpu->activations, 4 * (on_gpu - on_cpu));
}

TEST(LlamaTrain, RefusesGptOnlyAndBadLlamaFlags) {
  TrainOptions o = TinyLlama();
  o.llama.kv_heads = 3;
  EXPECT_THAT(PlanTraining(o).status().message(),
              HasSubstr("--kv_heads=3: must divide --heads=4"));
  o = TinyLlama();
  o.model_family = ModelFamily::kGpt2;
  o.given_flags = {"ffn"};
  EXPECT_THAT(PlanTraining(o).status().message(),
              HasSubstr("--ffn=64: is for --model=llama"));
}

}  // namespace
}  // namespace chunkzero
