// The train job with --offload=nvme: the masters and optimizer states on
// disk change no bit of the run, in every layout and 16-bit precision,
// with accumulated micro-batches and across save and resume (with or
// without the tier); the scratch files leave nothing behind; what cannot
// hold them is refused before step 1, naming the flag and the bytes.
#include <sys/statfs.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/system_memory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/train/report.h"
#include "tools/train/train_flags.h"
#include "tools/train/train_plan.h"
#include "tools/train/trainer.h"

namespace chunkzero {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/nvme_train_test/", name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TrainOptions Tiny() {
  TrainOptions o;
  o.model.layers = 2;
  o.model.d_model = 32;
  o.model.heads = 2;
  o.model.seq_len = 16;
  o.model.vocab = 256;
  o.world_size = 2;
  o.batch = 2;
  o.steps = 4;
  o.warmup = 1;
  o.chunk_size = 8192;  // wte alone, then the blocks.
  return o;
}

// 8 x 256, vocab 512, bf16, 2 steps of one row per rank: big enough for
// chunks of 512 KiB (c_fc's weight, --chunk_size=262144) to make 25.
TrainOptions EightLayers() {
  TrainOptions o = Tiny();
  o.model.layers = 8;
  o.model.d_model = 256;
  o.model.heads = 4;
  o.model.vocab = 512;
  o.batch = 1;
  o.steps = 2;
  o.precision = DType::kBF16;
  o.chunk_size = 262144;
  return o;
}

TrainResult Train(const TrainOptions& o) {
  absl::StatusOr<TrainResult> r = RunTraining(o, nullptr);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : TrainResult();
}

std::vector<double> Losses(const TrainResult& r) {
  std::vector<double> out;
  for (const StepMetrics& m : r.steps) out.push_back(m.loss);
  return out;
}

TEST(NvmeTrain, EqualsOptimizerOffloadBitForBit) {
  // Pieces of 1024 or 3072 elements split the chunks (4096 or 8192 held
  // per rank) into several, the last one short.
  struct Case {
    ChunkLayout layout;
    DType precision;
    int grad_accum;
    int64_t piece;
  };
  for (const Case& c :
       {Case{ChunkLayout::kSharded, DType::kF16, 1, 0},
        Case{ChunkLayout::kSharded, DType::kBF16, 2, 1024},
        Case{ChunkLayout::kOwner, DType::kF16, 2, 3072},
        Case{ChunkLayout::kReplicated, DType::kBF16, 1, 3072}}) {
    TrainOptions host = Tiny();
    host.storage = c.layout;
    host.precision = c.precision;
    host.grad_accum = c.grad_accum;
    host.offload = OffloadPolicy::kOptimizer;
    SCOPED_TRACE(absl::StrCat(ChunkLayoutName(c.layout), " ",
                              DTypeName(c.precision), " accum ", c.grad_accum));
    const TrainResult want = Train(host);
    TrainOptions nvme = host;
    nvme.offload = OffloadPolicy::kNvme;
    nvme.nvme_path = TestDir("equal");
    nvme.nvme_piece_elements = c.piece;
    const TrainResult got = Train(nvme);
    ASSERT_EQ(got.steps.size(), 4u);
    EXPECT_EQ(Losses(got), Losses(want));
    // At rest, host memory keeps the 16-bit chunks (and the accumulation);
    // the masters and states (12 bytes per held element) went to disk. A
    // step writes the used part of each, in whole 4 KiB blocks, and reads
    // the same; with two micro-batches the first one's weights are also
    // restored from the masters, read whole.
    const int64_t moved = want.at_rest_bytes[0] - got.at_rest_bytes[0];
    ASSERT_GT(moved, 0);
    const RankStepMetrics& r = got.steps.back().ranks[0];
    EXPECT_TRUE(r.disk);
    EXPECT_GT(r.disk_written_bytes, moved / 2);
    EXPECT_LE(r.disk_written_bytes, moved + 3 * 4096 * 8);
    const int64_t extra = r.disk_read_bytes - r.disk_written_bytes;
    if (c.grad_accum == 1) {
      EXPECT_EQ(extra, 0);
    } else {
      EXPECT_GE(extra, moved / 3);
      EXPECT_LE(extra, moved / 3 + 4096 * 8);
    }
    // The disk worked while bytes moved; what it did beyond the rank's
    // wait was hidden behind compute, and the step holds all of it.
    EXPECT_GT(r.disk_busy_s, 0);
    EXPECT_EQ(r.disk_hidden_s(), std::max(0.0, r.disk_busy_s - r.disk_wait_s));
    EXPECT_LE(r.disk_hidden_s(), got.steps.back().step_time_s);
    EXPECT_TRUE(fs::is_empty(nvme.nvme_path));
    const std::string summary = FormatSummary(nvme, got);
    EXPECT_THAT(summary, HasSubstr("NVMe tier (" + nvme.nvme_path));
    EXPECT_THAT(summary,
                HasSubstr(absl::StrFormat(
                    "per step there; the disk works %.3f s of the step, %.3f "
                    "s of it hidden behind compute, and the rank waits %.3f s",
                    r.disk_busy_s, r.disk_hidden_s(), r.disk_wait_s)));
    EXPECT_THAT(summary, HasSubstr("masters and optimizer states rest on "
                                   "disk"));
    EXPECT_THAT(got.disk_io,
                ::testing::AnyOf(HasSubstr("io_uring"), HasSubstr("threads")));
  }
}

// A checkpoint is a checkpoint: saved with the tier, resumed without it,
// and the other way round, each continuing the uninterrupted run.
TEST(NvmeTrain, SavesAndResumesWithOrWithoutTheTier) {
  TrainOptions plain = Tiny();
  plain.precision = DType::kF16;
  plain.warmup = 0;
  plain.min_lr = plain.lr;  // A constant rate: 2 + 2 steps are 4 steps.
  plain.offload = OffloadPolicy::kOptimizer;
  const TrainResult whole = Train(plain);
  for (bool nvme_first : {true, false}) {
    SCOPED_TRACE(nvme_first ? "nvme, then host" : "host, then nvme");
    TrainOptions first = plain;
    first.steps = 2;
    first.save = TestDir(nvme_first ? "save_nvme" : "save_host");
    TrainOptions second = plain;
    second.resume = first.save;
    TrainOptions& with_tier = nvme_first ? first : second;
    with_tier.offload = OffloadPolicy::kNvme;
    with_tier.nvme_path = TestDir("resume_scratch");
    ASSERT_EQ(Train(first).steps.size(), 2u);
    const TrainResult rest = Train(second);
    ASSERT_EQ(rest.steps.size(), 2u);
    EXPECT_EQ(rest.steps[0].loss, whole.steps[2].loss);
    EXPECT_EQ(rest.steps[1].loss, whole.steps[3].loss);
    EXPECT_TRUE(fs::is_empty(with_tier.nvme_path));
  }
}

// Under --host_memory_limit the parameter chunks that do not fit go to
// disk and come back ahead of use: the same losses, a rank's host memory
// within the limit, and their reads on top of the optimizer's.
TEST(NvmeTrain, AHostLimitSendsParameterChunksToDiskAndChangesNoBit) {
  TrainOptions o = EightLayers();
  o.offload = OffloadPolicy::kNvme;
  o.nvme_path = TestDir("host_limit");
  const TrainResult free_run = Train(o);
  TrainOptions capped = o;
  capped.host_memory_limit = 19660000;  // Just above what a rank must hold.
  const TrainResult capped_run = Train(capped);
  ASSERT_EQ(capped_run.steps.size(), 2u);
  EXPECT_EQ(Losses(capped_run), Losses(free_run));
  const RankStepMetrics& with = capped_run.steps.back().ranks[0];
  const RankStepMetrics& without = free_run.steps.back().ranks[0];
  for (const StepMetrics& m : capped_run.steps) {
    for (const RankStepMetrics& r : m.ranks) {
      EXPECT_LE(r.peak_host_bytes, capped.host_memory_limit);
    }
  }
  EXPECT_GT(with.disk_read_bytes, without.disk_read_bytes);
  EXPECT_TRUE(fs::is_empty(o.nvme_path));
  EXPECT_THAT(FormatSummary(capped, capped_run),
              HasSubstr("of its 18.75 MiB limit (--host_memory_limit)"));

  // A limit a rank cannot work within is refused before step 1, naming
  // it; so is one without the tier.
  capped.host_memory_limit = 1 << 20;
  absl::Status s = PlanTraining(capped).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(),
              HasSubstr("--host_memory_limit=1.00 MiB is less than the "));
  EXPECT_THAT(s.message(), HasSubstr("with every parameter chunk on disk"));
  capped.offload = OffloadPolicy::kOptimizer;
  capped.nvme_path.clear();
  EXPECT_THAT(PlanTraining(capped).status().message(),
              HasSubstr("--host_memory_limit=1048576: is for --offload=nvme"));
}

// The refusal of a host limit adds up its parts: the larger of
// registering the model and a step without the parameter chunks at rest,
// plus the chunks being read (a buffer and a payload each). Computing on a
// device, the parts are the host's alone (no activations).
TEST(NvmeTrain, AHostLimitBelowTheFloorNamesItsParts) {
  for (const bool on_device : {false, true}) {
    SCOPED_TRACE(on_device ? "sim:0" : "cpu");
    TrainOptions o = EightLayers();
    o.offload = OffloadPolicy::kNvme;
    o.nvme_path = TestDir("floor");
    // The estimate is the same with or without the limits.
    const absl::StatusOr<TrainPlan> free_plan = PlanTraining(o);
    ASSERT_TRUE(free_plan.ok()) << free_plan.status();
    const TrainMemoryEstimate& e = free_plan->memory;
    const double host = on_device
                            ? e.HostBytesPerRank(OffloadPolicy::kAuto, false)
                            : e.per_rank();
    const double stepping = host - e.model_init - e.chunks_at_rest;
    const double reading = 3 * 2 * (e.rest_per_chunk + 4096);
    ASSERT_LT(reading, e.chunks_at_rest);  // More than 3 chunks at rest.
    if (on_device) o.device_memory_limit = 10 << 20;
    o.host_memory_limit = 1 << 20;
    const absl::Status s = PlanTraining(o).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(
        s.message(),
        HasSubstr(absl::StrCat(
            "--host_memory_limit=1.00 MiB is less than the ",
            FormatBytes(std::max(e.model_init, stepping) + reading),
            " a rank needs in host memory with every parameter chunk on disk "
            "(the larger of registering the model (",
            FormatBytes(e.model_init),
            ") and a step without its parameter chunks at rest (",
            FormatBytes(stepping), "), plus ", FormatBytes(reading),
            " for the 3 chunks read from disk at once; from ",
            on_device ? e.DescribeHost(OffloadPolicy::kAuto, false)
                      : e.Describe(),
            ")")));
    EXPECT_EQ(s.message().find("activations") == absl::string_view::npos,
              on_device);
  }
}

// The plan printed before step 1 adds the disk: the masters and states,
// and the parameter chunks when the host limit may send them there; the
// host line names the limit and the least a rank can work in.
TEST(NvmeTrain, ThePlanShowsDeviceHostAndDiskBytes) {
  TrainOptions o = EightLayers();
  o.offload = OffloadPolicy::kNvme;
  o.nvme_path = TestDir("plan");
  absl::StatusOr<TrainPlan> plan = PlanTraining(o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const TrainMemoryEstimate e = plan->memory;
  const std::string header = "plan (what each rank will hold, estimated):\n";
  EXPECT_EQ(FormatPlan(*plan),
            absl::StrCat(header, "  host: ", e.Describe(),
                         "\n  disk (--nvme_path=", o.nvme_path,
                         "): masters and optimizer states ",
                         FormatBytes(e.disk), " per rank\n"));

  o.device_memory_limit = 10 << 20;
  o.host_memory_limit = 12 << 20;
  plan = PlanTraining(o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(
      FormatPlan(*plan),
      absl::StrCat(
          header, "  device: ",
          FormatBytes(DeviceMemoryNeeded(e, OffloadPolicy::kAuto)),
          " per rank on sim:0 (chunks ",
          FormatBytes(e.in_flight + e.in_flight_shards), ", activations ",
          FormatBytes(e.activations),
          "); --device_memory_limit=10.00 MiB\n  host: ",
          e.DescribeHost(OffloadPolicy::kAuto, false),
          "; --host_memory_limit=12.00 MiB (at least ",
          FormatBytes(e.HostBytesPerRank(OffloadPolicy::kAuto, false) -
                      e.model_init - e.chunks_at_rest +
                      3 * 2 * (e.rest_per_chunk + 4096)),
          " with every parameter chunk on disk): parameter chunks go to disk "
          "as it demands\n  disk (--nvme_path=",
          o.nvme_path, "): masters and optimizer states ", FormatBytes(e.disk),
          " per rank, and parameter chunks up to ",
          FormatBytes(e.chunks_at_rest), "\n"));
}

// Computing on a device (sim:0 under --device_memory_limit), the host
// limit gives the parameter chunks three tiers: the device while its
// limit leaves room, host memory, disk. In every layout and 16-bit
// precision, with accumulated micro-batches too, each memory stays within
// its limit, parameter chunks travel to the device and to disk, and no
// bit changes against the same job on the host with nothing limited; a
// checkpoint saved there resumes on the host.
TEST(NvmeTrain, ThreeTiersOnADeviceChangeNoBit) {
  struct Case {
    ChunkLayout layout;
    DType precision;
    int grad_accum;
    int64_t host_limit;  // Accumulating keeps an f32 copy of the grads.
  };
  for (const Case& c :
       {Case{ChunkLayout::kSharded, DType::kBF16, 1, 12 << 20},
        Case{ChunkLayout::kOwner, DType::kF16, 2, 38 << 20},
        Case{ChunkLayout::kReplicated, DType::kF16, 1, 16 << 20}}) {
    SCOPED_TRACE(absl::StrCat(ChunkLayoutName(c.layout), " ",
                              DTypeName(c.precision), " accum ", c.grad_accum));
    TrainOptions o = EightLayers();
    o.storage = c.layout;
    o.precision = c.precision;
    o.grad_accum = c.grad_accum;
    o.offload = OffloadPolicy::kNvme;
    o.nvme_path = TestDir("three_tiers");
    const TrainResult free_run = Train(o);
    TrainOptions tiers = o;
    tiers.device_memory_limit = 10 << 20;
    tiers.host_memory_limit = c.host_limit;
    const TrainResult tiered = Train(tiers);
    ASSERT_EQ(tiered.steps.size(), 2u);
    EXPECT_EQ(Losses(tiered), Losses(free_run));
    for (const StepMetrics& m : tiered.steps) {
      for (const RankStepMetrics& r : m.ranks) {
        EXPECT_LE(r.peak_device_bytes, tiers.device_memory_limit);
        EXPECT_LE(r.peak_host_bytes, tiers.host_memory_limit);
        EXPECT_GT(r.h2d_bytes, 0);  // Chunks come to the device to compute.
      }
    }
    // Parameter chunks read from disk on top of the masters and states.
    EXPECT_GT(tiered.steps.back().ranks[0].disk_read_bytes,
              free_run.steps.back().ranks[0].disk_read_bytes);
    EXPECT_TRUE(fs::is_empty(o.nvme_path));
    const std::string summary = FormatSummary(tiers, tiered);
    EXPECT_THAT(summary, HasSubstr("of its 10.00 MiB limit on rank 0"));
    EXPECT_THAT(summary, HasSubstr("else in host memory, and on disk beyond "
                                   "--host_memory_limit"));
  }

  // A checkpoint saved on three tiers resumes on the host alone, and
  // continues the uninterrupted run.
  TrainOptions whole = EightLayers();
  whole.steps = 4;
  whole.warmup = 0;
  whole.min_lr = whole.lr;  // A constant rate: 2 + 2 steps are 4 steps.
  const TrainResult uninterrupted = Train(whole);
  TrainOptions first = whole;
  first.steps = 2;
  first.offload = OffloadPolicy::kNvme;
  first.nvme_path = TestDir("three_tiers");
  first.device_memory_limit = 10 << 20;
  first.host_memory_limit = 12 << 20;
  first.save = TestDir("three_tiers_save");
  ASSERT_EQ(Train(first).steps.size(), 2u);
  TrainOptions second = whole;
  second.resume = first.save;
  const TrainResult rest = Train(second);
  ASSERT_EQ(rest.steps.size(), 2u);
  EXPECT_EQ(rest.steps[0].loss, uninterrupted.steps[2].loss);
  EXPECT_EQ(rest.steps[1].loss, uninterrupted.steps[3].loss);

  // The plan counts the device as --offload=auto's: a cap below even the
  // chunks in use and the activations is refused before step 1.
  TrainOptions tiers = EightLayers();
  tiers.offload = OffloadPolicy::kNvme;
  tiers.nvme_path = TestDir("three_tiers");
  tiers.host_memory_limit = 12 << 20;
  tiers.device_memory_limit = 2 << 20;
  const absl::Status s = PlanTraining(tiers).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("--offload=nvme needs about"));
  EXPECT_THAT(s.message(), HasSubstr("--device_memory_limit is 2.00 MiB"));
}

TEST(NvmeTrain, RefusesWhatCannotHoldTheStatesBeforeStepOne) {
  TrainOptions o = Tiny();
  o.offload = OffloadPolicy::kNvme;
  EXPECT_THAT(PlanTraining(o).status().message(),
              HasSubstr("--offload=nvme: needs --nvme_path"));
  o.nvme_path = TestDir("refusals") + "/missing";
  absl::Status s = PlanTraining(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("--nvme_path=" + o.nvme_path + ": " +
                                     o.nvme_path + ": no such directory"));
  TrainOptions not_nvme = Tiny();
  not_nvme.nvme_path = TestDir("refusals");
  EXPECT_THAT(PlanTraining(not_nvme).status().message(),
              HasSubstr("--nvme_path=" + not_nvme.nvme_path +
                        ": is for --offload=nvme (this run has "
                        "--offload=none)"));
  struct statfs info;
  if (::statfs("/dev/shm", &info) == 0 && info.f_type == 0x01021994) {
    o.nvme_path = "/dev/shm";
    EXPECT_THAT(PlanTraining(o).status().message(),
                HasSubstr("--nvme_path=/dev/shm: /dev/shm is on a tmpfs"));
  }
  // 80 billion parameters' masters and states do not fit this disk (the
  // host's memory is taken as plenty, so the disk is what refuses).
  TrainOptions huge = Tiny();
  huge.model.layers = 400;
  huge.model.d_model = 4096;
  huge.model.heads = 32;
  huge.world_size = 1;
  huge.batch = 1;
  huge.chunk_size = -1;
  huge.memory_limit_bytes = int64_t{1} << 50;
  huge.offload = OffloadPolicy::kNvme;
  huge.nvme_path = TestDir("refusals");
  s = PlanTraining(huge).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(),
              HasSubstr("--nvme_path=" + huge.nvme_path + " has "));
  EXPECT_THAT(s.message(), HasSubstr(" free, but the masters and optimizer "
                                     "states of 1 rank need about"));
}

}  // namespace
}  // namespace chunkzero
