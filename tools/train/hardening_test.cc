// The train job against absurd flags, damaged or hostile inputs, diverging
// runs, failing saves and competing jobs: each case fails with a clear
// error before doing work it cannot finish, and never loses the last good
// checkpoint.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file_lock.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint.pb.h"
#include "checkpoint/testing/edit_manifest.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/safetensors/safetensors.h"
#include "tensor/tensor.h"
#include "tools/train/train_flags.h"
#include "tools/train/train_plan.h"
#include "tools/train/trainer.h"

namespace chunkzero {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

TrainOptions Tiny() {
  TrainOptions o;
  o.model.layers = 1;
  o.model.d_model = 32;
  o.model.heads = 2;
  o.model.seq_len = 16;
  o.model.vocab = 256;
  o.world_size = 2;
  o.batch = 2;
  o.steps = 2;
  o.warmup = 0;
  o.chunk_size = 8192;
  return o;
}

std::string TestDir(const std::string& name) {
  const std::string dir = absl::StrCat(
      std::getenv("TEST_TMPDIR"), "/hardening_test/",
      ::testing::UnitTest::GetInstance()->current_test_info()->name(), "/",
      name);
  fs::remove_all(dir);
  fs::create_directories(fs::path(dir).parent_path());
  return dir;
}

std::set<std::string> FileNames(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    names.insert(entry.path().filename().string());
  }
  return names;
}

// Runs `o`, counting the steps it reports.
absl::Status RunJob(const TrainOptions& o, int* steps = nullptr) {
  int seen = 0;
  absl::StatusOr<TrainResult> r =
      RunTraining(o, [&](const StepMetrics&) -> absl::Status {
        ++seen;
        return absl::OkStatus();
      });
  if (steps != nullptr) *steps = seen;
  return r.status();
}

// ---- Sizes: refused before anything is allocated ----

TEST(Hardening, HugeShapesAreRefusedNamingTheFlagsAndBytes) {
  struct Case {
    const char* name;
    void (*set)(TrainOptions&);
    absl::StatusCode code;
    const char* says;
  };
  const Case cases[] = {
      {"vocab", [](TrainOptions& o) { o.model.vocab = 2000000000; },
       absl::StatusCode::kResourceExhausted, "--vocab"},
      {"d_model", [](TrainOptions& o) { o.model.d_model = 1000000; },
       absl::StatusCode::kResourceExhausted, "--d_model"},
      {"layers", [](TrainOptions& o) { o.model.layers = 1000000; },
       absl::StatusCode::kResourceExhausted, "--layers"},
      {"chunk_size",
       [](TrainOptions& o) { o.chunk_size = 9223372036854775807; },
       absl::StatusCode::kResourceExhausted, "--chunk_size"},
      {"batch", [](TrainOptions& o) { o.batch = 2000000000; },
       absl::StatusCode::kInvalidArgument, "--batch x --seq_len"},
      {"d_model 2e9", [](TrainOptions& o) { o.model.d_model = 2000000000; },
       absl::StatusCode::kInvalidArgument, "--d_model"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TrainOptions o = Tiny();
    c.set(o);
    int steps = -1;
    const absl::Status status = RunJob(o, &steps);
    EXPECT_EQ(status.code(), c.code) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.says));
    EXPECT_EQ(steps, 0);
  }
}

TEST(Hardening, MemoryBeyondTheLimitIsResourceExhaustedWithTheNumbers) {
  TrainOptions o = Tiny();
  o.memory_limit_bytes = 1 << 20;
  const absl::Status status = RunJob(o);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(status.message()),
              StartsWith("this job needs about "));
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("but 1.00 MiB is its limit; the largest part grows "
                        "with "));
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("; the 2 ranks run as threads of this process "
                        "(--world_size)"));
}

TEST(Hardening, TooManyRanksAsThreadsIsRefused) {
  TrainOptions o = Tiny();
  o.world_size = kMaxRanksAsThreads + 1;
  const absl::Status status = RunJob(o);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("--world_size=1025: at most 1024 ranks run as "
                        "threads of one process"));
}

// Ranks over Gloo as threads hold world_size * (world_size - 1) sockets.
TEST(Hardening, GlooRanksAsThreadsMustFitTheFileDescriptorLimit) {
  TrainOptions o = Tiny();
  o.backend = Backend::kGloo;
  o.world_size = 100;
  EXPECT_EQ(FileDescriptorsNeeded(o), 100 * 99 + 800 + 64);
  EXPECT_TRUE(CheckFileDescriptorLimit(o, 10764).ok());
  const absl::Status status = CheckFileDescriptorLimit(o, 10763);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(status.message(),
            "--world_size=100 over --backend=gloo needs about 10764 file "
            "descriptors in this process (a socket per pair of ranks), but "
            "the limit is 10763 (ulimit -n); raise it, or run one process "
            "per rank (tools/train/launch.sh)");
  o.rank = 3;  // One rank per process: one socket per peer.
  o.rendezvous = "/tmp/r";
  EXPECT_EQ(FileDescriptorsNeeded(o), 99 + 8 + 64);
}

// ---- Input files ----

TEST(Hardening, ADirectoryAsAnInputFileIsAnErrorNamingIt) {
  const std::string dir = TestDir("a_directory");
  fs::create_directories(dir);
  for (const char* flag : {"data", "tokens"}) {
    SCOPED_TRACE(flag);
    TrainOptions o = Tiny();
    if (std::string(flag) == "data") o.data = dir;
    if (std::string(flag) == "tokens") o.tokens = dir;
    const absl::Status status = RunJob(o);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(status.message(), absl::StrCat("--", flag, "=", dir,
                                             " is a directory, not a file"));
  }
  // --init takes a Hugging Face directory: this one has no config.json.
  TrainOptions o = Tiny();
  o.init = dir;
  const absl::Status status = RunJob(o);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()),
              ::testing::HasSubstr(
                  absl::StrCat("--init: cannot open ", dir, "/config.json")));
}

// A GPT-2 file of `positions` positions (C 32, V 256, 1 layer); `poison`
// puts a NaN into h.0.mlp.c_fc.weight.
std::string WriteInitFile(const std::string& path, int positions, bool poison) {
  GptConfig config = Tiny().model;
  config.seq_len = positions;
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, shape] : GptParameterShapes(config)) {
    Tensor t = *Tensor::Zeros(shape, DType::kF32);
    for (int64_t i = 0; i < t.numel(); ++i) {
      t.data<float>()[i] = 0.01f * static_cast<float>((i * 7 + 3) % 11) - 0.05f;
    }
    if (poison && name == "h.0.mlp.c_fc.weight") {
      t.data<float>()[5] = std::numeric_limits<float>::quiet_NaN();
    }
    tensors.emplace_back("transformer." + name, std::move(t));
  }
  EXPECT_TRUE(WriteSafetensors(path, tensors).ok());
  return path;
}

TEST(Hardening, AnInitFileHoldingNaNIsRefused) {
  TrainOptions o = Tiny();
  o.init = WriteInitFile(TestDir("nan.safetensors"), 16, /*poison=*/true);
  const absl::Status status = RunJob(o);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            absl::StrCat("--init=", o.init,
                         ": tensor 'h.0.mlp.c_fc.weight' holds Inf or NaN; "
                         "training from it could only produce NaN"));
}

// ---- Diverging runs: an error, never a saved NaN ----

TEST(Hardening, NonFiniteHyperParametersAreRefused) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct Case {
    double TrainOptions::*field;
    double value;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {&TrainOptions::lr, inf, "--lr=inf: want a finite number"},
           {&TrainOptions::min_lr, nan, "--min_lr=nan: want a finite number"},
           {&TrainOptions::weight_decay, inf,
            "--weight_decay=inf: want a finite number"},
           {&TrainOptions::weight_decay, nan,
            "--weight_decay=nan: want a finite number"},
           {&TrainOptions::clip, -1, "--clip=-1: want >= 0"},
           {&TrainOptions::lr, -1, "--lr=-1: want >= 0"},
           {&TrainOptions::comm_timeout_s, 0,
            "--comm_timeout_s=0: want a positive number of seconds, from "
            "0.001 to 86400"},
           // A positive number that is a timeout of 0 once in milliseconds.
           {&TrainOptions::comm_timeout_s, 1e-320,
            "--comm_timeout_s=9.99989e-321: want a positive number of "
            "seconds, from 0.001 to 86400"},
           {&TrainOptions::comm_timeout_s, inf,
            "--comm_timeout_s=inf: want a positive number of seconds, from "
            "0.001 to 86400"},
           {&TrainOptions::comm_timeout_s, nan,
            "--comm_timeout_s=nan: want a positive number of seconds, from "
            "0.001 to 86400"},
       }) {
    SCOPED_TRACE(c.says);
    TrainOptions o = Tiny();
    o.*c.field = c.value;
    const absl::Status status = RunJob(o);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(status.message(), c.says);
  }
}

// --lr=1e30 is finite (in f32 too) but makes every weight Inf within a
// step or two (--lr=1e308 is refused: it is Inf in f32, the update's
// dtype; so is a weight decay whose factor 1 - lr x wd is <= -1). In fp32
// the next grads are not finite and the step fails; in fp16 the loss
// scaler cannot help either (the loss itself is NaN). Either way the run
// fails, and the good checkpoint in --save stays as it was.
TEST(Hardening, ADivergingRunFailsAndKeepsTheGoodCheckpoint) {
  for (const std::string precision : {"fp32", "fp16", "bf16"}) {
    SCOPED_TRACE(precision);
    TrainOptions good = Tiny();
    good.precision = *ParsePrecisionFlag(precision);
    good.save = TestDir("ckpt_" + precision);
    ASSERT_TRUE(RunJob(good).ok());
    const std::set<std::string> files = FileNames(good.save);

    TrainOptions bad = good;
    bad.resume = good.save;
    bad.steps = 6;
    // Step 3's update makes the weights garbage and step 4 fails, before
    // its save.
    bad.save_every = 2;
    bad.lr = bad.min_lr = 1e30;
    bad.weight_decay = 0;
    int steps = 0;
    const absl::Status status = RunJob(bad, &steps);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
    EXPECT_THAT(std::string(status.message()),
                ::testing::AnyOf(HasSubstr("the grads are not finite"),
                                 HasSubstr("holds Inf or NaN"),
                                 HasSubstr("the loss is nan")));
    EXPECT_LT(steps, 4);
    EXPECT_EQ(FileNames(good.save), files);
    absl::StatusOr<CheckpointMeta> meta = ReadCheckpointMeta(good.save);
    ASSERT_TRUE(meta.ok()) << meta.status();
    EXPECT_EQ(meta->step, 2);
    EXPECT_TRUE(ReadCheckpoint(good.save).ok());
  }
}

// ---- The callback and the destinations ----

TEST(Hardening, AFailingReportEndsTheRunOnEveryRank) {
  TrainOptions o = Tiny();
  o.steps = 5;
  int calls = 0;
  absl::StatusOr<TrainResult> r =
      RunTraining(o, [&](const StepMetrics&) -> absl::Status {
        ++calls;
        return absl::ResourceExhaustedError(
            "--metrics_out: cannot write /dev/full: No space left on device");
      });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("No space left on device"));
}

TEST(Hardening, DestinationsAreCheckedBeforeStepOne) {
  const std::string file = TestDir("plain_file");
  std::ofstream(file) << "x";
  struct Case {
    std::string TrainOptions::*field;
    std::string value;
    absl::StatusCode code;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {&TrainOptions::export_path, "/nonexistent_dir/x.safetensors",
            absl::StatusCode::kNotFound,
            "--export=/nonexistent_dir/x.safetensors: cannot write into the "
            "directory /nonexistent_dir: No such file or directory"},
           {&TrainOptions::export_path, file + "/x.safetensors",
            absl::StatusCode::kFailedPrecondition,
            absl::StrCat("--export=", file, "/x.safetensors: ", file,
                         " is not a directory, so ", file,
                         "/x.safetensors cannot be created")},
           {&TrainOptions::save, file + "/ckpt",
            absl::StatusCode::kFailedPrecondition,
            absl::StrCat("--save=", file, "/ckpt: cannot create directory ",
                         file,
                         "/ckpt: it or one of its parents exists and "
                         "is not a directory")},
       }) {
    SCOPED_TRACE(c.value);
    TrainOptions o = Tiny();
    o.*c.field = c.value;
    int steps = -1;
    const absl::Status status = RunJob(o, &steps);
    EXPECT_EQ(status.code(), c.code);
    EXPECT_EQ(status.message(), c.says);
    EXPECT_EQ(steps, 0);
  }
}

// A destination that is a link: the link stays, its target gets the
// weights and the checkpoint's manifest, and a link to something that is
// not a file is refused before step 1, leaving both untouched.
TEST(Hardening, DestinationsThroughLinksReachTheirTargets) {
  const std::string dir = TestDir("links");
  fs::create_directories(dir + "/real/ckpt");
  TrainOptions o = Tiny();
  o.export_path = dir + "/weights.safetensors";
  ASSERT_EQ(::symlink("real/w.safetensors", o.export_path.c_str()), 0);
  o.save = dir + "/ckpt";
  ASSERT_EQ(::symlink("real/ckpt", o.save.c_str()), 0);
  ASSERT_EQ(RunJob(o), absl::OkStatus());
  EXPECT_TRUE(fs::is_symlink(o.export_path));
  EXPECT_TRUE(fs::is_regular_file(dir + "/real/w.safetensors"));
  EXPECT_TRUE(SafetensorsFile::Read(dir + "/real/w.safetensors").ok());
  EXPECT_TRUE(fs::is_symlink(o.save));
  EXPECT_TRUE(ReadCheckpointMeta(dir + "/real/ckpt").ok());

  TrainOptions to_device = Tiny();
  to_device.export_path = dir + "/to_null";
  ASSERT_EQ(::symlink("/dev/null", to_device.export_path.c_str()), 0);
  int steps = -1;
  const absl::Status status = RunJob(to_device, &steps);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(),
            absl::StrCat("--export=", to_device.export_path,
                         ": /dev/null is a character device (where the link ",
                         to_device.export_path,
                         " leads), not a regular file; refusing to replace or "
                         "write it"));
  EXPECT_EQ(steps, 0);
  EXPECT_TRUE(fs::is_symlink(to_device.export_path));
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
}

TEST(Hardening, ASecondJobSavingToTheSameDirectoryIsRefused) {
  TrainOptions o = Tiny();
  o.save = TestDir("shared");
  fs::create_directories(o.save);
  absl::StatusOr<std::unique_ptr<FileLock>> other =
      FileLock::TryAcquire(o.save + "/lock");
  ASSERT_TRUE(other.ok());
  int steps = -1;
  const absl::Status status = RunJob(o, &steps);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(),
            absl::StrCat("--save=", o.save,
                         " is in use by another training job: ", o.save,
                         "/lock is locked by another process (pid ", getpid(),
                         "); wait for it to finish or save elsewhere"));
  EXPECT_EQ(steps, 0);
  other->reset();
  EXPECT_TRUE(RunJob(o).ok());
}

// A save that fails on one rank (here rank 1's shard cannot be created) or
// at the commit removes what it wrote: the directory holds the previous
// checkpoint, whole, and nothing else.
TEST(Hardening, AFailedSaveLeavesNoOrphanShards) {
  for (const std::string blocker :
       {"shard-4-1-of-2.bin.tmp", "manifest.pb.tmp"}) {
    SCOPED_TRACE(blocker);
    TrainOptions o = Tiny();
    o.save = TestDir("ckpt");
    ASSERT_TRUE(RunJob(o).ok());  // Step 2.
    // The temporary the file is written through: a directory there is
    // not the writer's to remove, so the write fails.
    fs::create_directories(o.save + "/" + blocker);
    const std::set<std::string> before = FileNames(o.save);
    TrainOptions more = o;
    more.resume = o.save;
    more.steps = 4;
    const absl::Status status = RunJob(more);
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(std::string(status.message()),
                HasSubstr(absl::StrCat(o.save, "/", blocker,
                                       " is a directory, not a regular file; "
                                       "it is where")));
    EXPECT_EQ(FileNames(o.save), before);
    absl::StatusOr<Checkpoint> ckpt = ReadCheckpoint(o.save);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    EXPECT_EQ(ckpt->meta.step, 2);
  }
}

// A save whose writes fail half-way (here every file is limited to 16 KiB,
// as a full disk would stop it) fails the run on every rank, removes its
// partial files, and leaves the previous checkpoint whole.
TEST(Hardening, ASaveCutShortByTheFileSystemLeavesThePreviousCheckpoint) {
  TrainOptions o = Tiny();
  o.save = TestDir("ckpt");
  ASSERT_TRUE(RunJob(o).ok());  // Step 2: shards of about 128 KiB each.
  const std::set<std::string> before = FileNames(o.save);
  TrainOptions more = o;
  more.resume = o.save;
  more.steps = 4;
  // Writes past the limit fail with EFBIG (and SIGXFSZ, ignored here).
  struct rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  const sighandler_t old_handler = signal(SIGXFSZ, SIG_IGN);
  struct rlimit limit = saved;
  limit.rlim_cur = 16 << 10;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
  const absl::Status status = RunJob(more);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &saved), 0);
  signal(SIGXFSZ, old_handler);
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("File too large"));
  EXPECT_EQ(FileNames(o.save), before);
  absl::StatusOr<Checkpoint> ckpt = ReadCheckpoint(o.save);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ(ckpt->meta.step, 2);
}

// ---- Flags that contradict each other ----

TEST(Hardening, ContradictoryFlagsAreRefused) {
  struct Case {
    void (*set)(TrainOptions&);
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {[](TrainOptions& o) { o.rank = -2; },
            "--rank=-2: want -1 (every rank as a thread of this process) or "
            "this process's rank in [0, world_size)"},
           {[](TrainOptions& o) { o.save_every = 5; },
            "--save_every=5: is for --save, the directory to save to"},
           {[](TrainOptions& o) { o.rendezvous = "/tmp/r"; },
            "--rendezvous=/tmp/r: a rendezvous is for one rank per process: "
            "give --rank too (tools/train/launch.sh does)"},
           {[](TrainOptions& o) {
              o.init = "/tmp/a.safetensors";
              o.resume = "/tmp/ckpt";
            },
            "--init=/tmp/a.safetensors and --resume=/tmp/ckpt both say where "
            "the weights come from; give one (a resumed run continues from "
            "its checkpoint's weights)"},
           {[](TrainOptions& o) { o.model.d_model = 33; },
            "--d_model=33: must be a multiple of --heads=2"},
       }) {
    TrainOptions o = Tiny();
    c.set(o);
    const absl::Status status = RunJob(o);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(status.message(), c.says);
  }
}

// ---- Context length from an --init file ----

// A file with 32 positions trains at --seq_len=16 (the first 16 positions),
// by default at all 32, and refuses 64; the export keeps all 32 rows.
// With --init the shape comes from the file: a shape flag given as well
// must agree (before, --init=base.st --layers=3 trained the file's 1 layer).
TEST(Hardening, InitShapeFlagsGivenMustAgreeWithTheFile) {
  const std::string init =
      WriteInitFile(TestDir("shape.safetensors"), 16, /*poison=*/false);
  struct Case {
    const char* flag;
    int GptConfig::*field;
    int value;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {"layers", &GptConfig::layers, 3, "number of layers is 1"},
           {"d_model", &GptConfig::d_model, 64, "width d_model is 32"},
           {"vocab", &GptConfig::vocab, 512, "vocabulary is 256"}}) {
    SCOPED_TRACE(c.flag);
    TrainOptions o = Tiny();
    o.init = init;
    o.model.*c.field = c.value;
    o.given_flags = {c.flag};
    int steps = -1;
    const absl::Status status = RunJob(o, &steps);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(status.message(),
              absl::StrCat("--", c.flag, "=", c.value,
                           " disagrees with --init=", init, ", whose ", c.says,
                           ": the shape comes from the file; drop --", c.flag,
                           " or give --", c.flag, "=", Tiny().model.*c.field));
    EXPECT_EQ(steps, 0);
    // Not given (a default): the file's shape, as before.
    o.given_flags.clear();
    absl::StatusOr<TrainResult> r = RunTraining(o, nullptr);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->model.*c.field, Tiny().model.*c.field);
    // Given and agreeing.
    o.model.*c.field = Tiny().model.*c.field;
    o.given_flags = {c.flag};
    EXPECT_EQ(RunJob(o), absl::OkStatus());
  }
}

// A model whose tensors do not divide the chunk size (69% of each chunk
// used): the parameters pack into 8 chunks where their elements fill 5.6.
TrainOptions PaddedChunks() {
  TrainOptions o = Tiny();
  o.model.layers = 3;
  o.model.d_model = 64;
  o.model.heads = 4;
  o.model.vocab = 512;
  o.batch = 1;
  o.steps = 2;
  o.chunk_size = 32768;
  return o;
}

// The planner refuses a layout whose device estimate passes the limit, so
// a run capped at its estimate must never need more: before, with
// --max_prefetch=3 the estimate counted 6 chunks in flight where 8 were,
// and one chunk of padding where the packing had 2.4, and accepted a cap
// that step 1 then exceeded. (Under auto the chunks at rest fill what the
// cap leaves, so only a capped run shows its need.)
TEST(Hardening, TheDeviceEstimateIsNeverBelowThePeak) {
  for (OffloadPolicy offload :
       {OffloadPolicy::kParams, OffloadPolicy::kAuto, OffloadPolicy::kNone}) {
    for (int prefetch : {0, 1, 3}) {
      SCOPED_TRACE(
          absl::StrCat(OffloadFlagValue(offload), " prefetch ", prefetch));
      TrainOptions o = PaddedChunks();
      o.offload = offload;
      o.max_prefetch = prefetch;
      o.device_memory_limit = int64_t{1} << 30;
      absl::StatusOr<TrainPlan> plan = PlanTraining(o);
      ASSERT_TRUE(plan.ok()) << plan.status();
      o.device_memory_limit = static_cast<int64_t>(
          std::ceil(DeviceMemoryNeeded(plan->memory, offload)));
      absl::StatusOr<TrainResult> r = RunTraining(o, nullptr);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_FALSE(r->auto_rests_on_host);
      EXPECT_GT(DevicePeak(*r), 0);
      EXPECT_LE(DevicePeak(*r), o.device_memory_limit);
    }
  }
}

// auto may always place chunks as params does, so it accepts every limit
// params accepts; where the shards it would keep on the device while their
// chunks are in use do not fit, it runs as params.
TEST(Hardening, AutoAcceptsWhatParamsAccepts) {
  TrainOptions o = PaddedChunks();
  o.max_prefetch = 3;
  o.offload = OffloadPolicy::kParams;
  o.device_memory_limit = int64_t{1} << 30;
  absl::StatusOr<TrainPlan> plan = PlanTraining(o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const double params =
      DeviceMemoryNeeded(plan->memory, OffloadPolicy::kParams);
  const double automatic =
      DeviceMemoryNeeded(plan->memory, OffloadPolicy::kAuto);
  ASSERT_LT(params, automatic);
  o.device_memory_limit = static_cast<int64_t>(params);
  o.offload = OffloadPolicy::kAuto;
  absl::StatusOr<TrainResult> r = RunTraining(o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->auto_rests_on_host);
  EXPECT_LE(DevicePeak(*r), o.device_memory_limit);
  o.offload = OffloadPolicy::kParams;
  absl::StatusOr<TrainResult> as_params = RunTraining(o, nullptr);
  ASSERT_TRUE(as_params.ok()) << as_params.status();
  ASSERT_EQ(r->steps.size(), as_params->steps.size());
  for (size_t i = 0; i < r->steps.size(); ++i) {
    EXPECT_EQ(r->steps[i].loss, as_params->steps[i].loss);
  }
  // With room for auto's own estimate, chunks rest on the device.
  o.offload = OffloadPolicy::kAuto;
  o.device_memory_limit = static_cast<int64_t>(automatic) + 1;
  r = RunTraining(o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->auto_rests_on_host);
}

TEST(Hardening, InitContextMayBeShorterThanTheFilePositions) {
  const std::string init =
      WriteInitFile(TestDir("p32.safetensors"), 32, /*poison=*/false);
  TrainOptions o = Tiny();
  o.init = init;
  o.seq_len = 16;
  o.export_path = TestDir("out.safetensors");
  absl::StatusOr<TrainResult> r = RunTraining(o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->seq_len, 16);
  EXPECT_EQ(r->model.seq_len, 32);
  absl::StatusOr<SafetensorsFile> out = SafetensorsFile::Read(o.export_path);
  ASSERT_TRUE(out.ok());
  absl::StatusOr<Tensor> wpe = out->Get("transformer.wpe.weight");
  ASSERT_TRUE(wpe.ok());
  EXPECT_EQ(wpe->shape(), Shape({32, 32}));

  o.seq_len = 0;
  o.export_path.clear();
  r = RunTraining(o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->seq_len, 32);

  o.seq_len = 64;
  const absl::Status status = RunJob(o);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      status.message(),
      absl::StrCat("--seq_len=64 is longer than the 32 positions of "
                   "--init=",
                   init, " (wpe.weight has 32 rows); give --seq_len <= 32"));
}

// ---- Resuming: the manifest's fields, and another job saving meanwhile ----

// PlanTraining reads the manifest's meta first, so a corrupt counter stops
// the job there: nothing is created, nothing trains.
TEST(Hardening, AResumedManifestWithNegativeIterationsFailsBeforeStepOne) {
  TrainOptions o = Tiny();
  o.save = TestDir("ckpt");
  ASSERT_EQ(RunJob(o), absl::OkStatus());
  ASSERT_EQ(checkpoint_testing::EditManifest(
                o.save, [](CheckpointManifest& m) { m.set_iterations(-100); }),
            absl::OkStatus());
  TrainOptions resumed = Tiny();
  resumed.resume = o.save;
  resumed.steps = 4;
  int steps = -1;
  const absl::Status status = RunJob(resumed, &steps);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_EQ(status.message(),
            absl::StrCat("--resume: checkpoint ", o.save,
                         ": manifest field iterations = -100 is negative"));
  EXPECT_EQ(steps, 0);
}

// A loss scale of 0 is what an f32 or bf16 run saves; an fp16 run's
// checkpoint always has one, so its absence means damage, not a fresh scale.
TEST(Hardening, AnFp16ResumeFromACheckpointWithoutALossScaleIsRefused) {
  TrainOptions o = Tiny();
  o.world_size = 1;
  o.save = TestDir("ckpt");
  ASSERT_EQ(RunJob(o), absl::OkStatus());
  ASSERT_EQ(checkpoint_testing::EditManifest(o.save,
                                             [](CheckpointManifest& m) {
                                               m.set_loss_scale(0);
                                               m.set_growth_tracker(0);
                                               m.set_hysteresis_left(0);
                                             }),
            absl::OkStatus());
  TrainOptions resumed = o;
  resumed.save.clear();
  resumed.resume = o.save;
  resumed.steps = 4;
  int steps = -1;
  const absl::Status status = RunJob(resumed, &steps);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_EQ(status.message(),
            absl::StrCat("rank 0: --resume=", o.save, ": checkpoint ", o.save,
                         ": manifest field loss_scale = 0 says no loss "
                         "scaler saved it, but an f16 run keeps one"));
  EXPECT_EQ(steps, 0);
}

// The manifest-read hook (checkpoint.h), set for the object's lifetime.
class ScopedReadHook {
 public:
  explicit ScopedReadHook(checkpoint_internal::ManifestReadHook hook) {
    checkpoint_internal::SetManifestReadHookForTesting(std::move(hook));
  }
  ~ScopedReadHook() {
    checkpoint_internal::SetManifestReadHookForTesting(nullptr);
  }
};
using checkpoint_internal::ManifestReadPoint;

// Copies of one run's checkpoints after steps 2 and 4 (of 6), and its
// losses: what a job resuming from a directory another job saves into can
// find there.
struct Saved {
  std::string step2, step4;
  std::vector<double> losses;
};

Saved SaveSteps2And4(TrainOptions o) {
  o.steps = 6;
  o.save = TestDir("running");
  o.save_every = 2;
  Saved saved{TestDir("step2"), TestDir("step4"), {}};
  const absl::StatusOr<TrainResult> r =
      RunTraining(o, [&](const StepMetrics& m) {
        // The save of the step before has committed on every rank.
        if (m.step == 3) fs::copy(o.save, saved.step2);
        if (m.step == 5) fs::copy(o.save, saved.step4);
        return absl::OkStatus();
      });
  EXPECT_TRUE(r.ok()) << r.status();
  if (r.ok()) {
    for (const StepMetrics& m : r->steps) saved.losses.push_back(m.loss);
  }
  return saved;
}

// Commits the checkpoint in `from` into `dir` as a saver that finds a
// reader there does: its shards beside the others (none replaced), then
// its manifest renamed over `dir`'s.
void CommitInto(const std::string& from, const std::string& dir) {
  for (const auto& entry : fs::directory_iterator(from)) {
    const std::string name = entry.path().filename().string();
    if (absl::StartsWith(name, "shard-") && !fs::exists(dir + "/" + name)) {
      fs::copy_file(entry.path(), dir + "/" + name);
    }
  }
  fs::copy_file(from + "/manifest.pb", dir + "/manifest.pb.new");
  fs::rename(dir + "/manifest.pb.new", dir + "/manifest.pb");
}

// Another job commits step 4 after PlanTraining has read step 2's manifest
// and before the ranks load: the ranks load step 4, whole, and the run goes
// on from there as the uninterrupted run did.
TEST(Hardening, AResumeLoadsTheCheckpointCommittedAfterThePlanReadIt) {
  const Saved saved = SaveSteps2And4(Tiny());
  ASSERT_EQ(saved.losses.size(), 6u);
  TrainOptions o = Tiny();
  o.steps = 6;
  o.resume = saved.step2;
  // The ranks read on threads of their own.
  std::atomic<int> reads{0};
  ScopedReadHook hook([&](ManifestReadPoint point, const std::string&) {
    if (point == ManifestReadPoint::kAfter && reads.fetch_add(1) == 0) {
      CommitInto(saved.step4, saved.step2);
    }
  });
  const absl::StatusOr<TrainResult> r = RunTraining(o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(reads.load(), 3);  // The plan, then each rank once.
  EXPECT_EQ(r->first_step, 4);
  ASSERT_EQ(r->steps.size(), 2u);
  EXPECT_EQ(r->steps[0].step, 5);
  EXPECT_EQ(r->steps[0].loss, saved.losses[4]);
  EXPECT_EQ(r->steps[1].loss, saved.losses[5]);
}

// Forces the ranks of a resume (2 ranks) to read different checkpoints in
// its first `splits` attempts: the first rank to read a manifest commits
// `next(attempt)` into `dir` right after, and the other rank reads only
// then.
class SplitReads {
 public:
  SplitReads(std::string dir, int splits, std::function<std::string(int)> next)
      : dir_(std::move(dir)), splits_(splits), next_(std::move(next)) {}

  void operator()(ManifestReadPoint point) {
    std::unique_lock<std::mutex> lock(mu_);
    // Read 0 is the plan's; reads 2k - 1 and 2k are attempt k's.
    if (point == ManifestReadPoint::kBefore) {
      const int read = befores_++;
      const int attempt = (read + 1) / 2;
      if (read > 0 && read % 2 == 0 && attempt <= splits_) {
        ASSERT_TRUE(changed_.wait_for(lock, std::chrono::seconds(60),
                                      [&] { return commits_ >= attempt; }));
      }
      return;
    }
    const int read = afters_++;
    const int attempt = (read + 1) / 2;
    if (read % 2 == 1 && attempt <= splits_) {
      CommitInto(next_(attempt), dir_);
      ++commits_;
      changed_.notify_all();
    }
  }
  int attempts() {
    std::lock_guard<std::mutex> lock(mu_);
    return befores_ / 2;
  }

 private:
  const std::string dir_;
  const int splits_;
  const std::function<std::string(int)> next_;
  std::mutex mu_;
  std::condition_variable changed_;
  int befores_ = 0, afters_ = 0, commits_ = 0;
};

// One rank reads step 2, the other step 4 (committed in between): every
// rank reads again, and they go on from step 4 together.
TEST(Hardening, RanksThatReadDifferentCheckpointsReadAgain) {
  const Saved saved = SaveSteps2And4(Tiny());
  ASSERT_EQ(saved.losses.size(), 6u);
  TrainOptions o = Tiny();
  o.steps = 6;
  o.resume = saved.step2;
  SplitReads split(saved.step2, 1, [&](int) { return saved.step4; });
  ScopedReadHook hook(
      [&](ManifestReadPoint point, const std::string&) { split(point); });
  const absl::StatusOr<TrainResult> r = RunTraining(o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(split.attempts(), 2);
  EXPECT_EQ(r->first_step, 4);
  ASSERT_EQ(r->steps.size(), 2u);
  EXPECT_EQ(r->steps[0].loss, saved.losses[4]);
  EXPECT_EQ(r->steps[1].loss, saved.losses[5]);
}

// A directory whose checkpoint changes under every read: the job gives up
// after three, training nothing.
TEST(Hardening, ResumingFromACheckpointThatKeepsChangingGivesUp) {
  const Saved saved = SaveSteps2And4(Tiny());
  const std::string dir = TestDir("changing");
  fs::copy(saved.step2, dir);
  TrainOptions o = Tiny();
  o.steps = 6;
  o.resume = dir;
  SplitReads split(dir, 3, [&](int attempt) {
    return attempt % 2 == 1 ? saved.step4 : saved.step2;
  });
  ScopedReadHook hook(
      [&](ManifestReadPoint point, const std::string&) { split(point); });
  int steps = -1;
  const absl::Status status = RunJob(o, &steps);
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr(absl::StrCat(
                  "--resume=", dir,
                  ": the ranks read different checkpoints 3 times in a row ")));
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("another job keeps committing into it; resume from a "
                        "copy of it"));
  EXPECT_EQ(split.attempts(), 3);
  EXPECT_EQ(steps, 0);
}

// The checkpoint committed between the plan and the load was saved with
// another configuration: refused as the plan would have refused it.
TEST(Hardening, ACheckpointCommittedAfterThePlanIsCheckedAsThePlanChecks) {
  TrainOptions first = Tiny();
  first.world_size = 1;
  first.save = TestDir("fp16");
  ASSERT_EQ(RunJob(first), absl::OkStatus());  // Step 2.
  TrainOptions other = first;
  other.precision = DType::kF32;
  other.steps = 3;
  other.save = TestDir("fp32");
  ASSERT_EQ(RunJob(other), absl::OkStatus());
  TrainOptions o = first;
  o.save.clear();
  o.resume = first.save;
  o.steps = 4;
  // The ranks read on threads of their own.
  std::atomic<int> reads{0};
  ScopedReadHook hook([&](ManifestReadPoint point, const std::string&) {
    if (point == ManifestReadPoint::kAfter && reads.fetch_add(1) == 0) {
      CommitInto(other.save, first.save);
    }
  });
  int steps = -1;
  const absl::Status status = RunJob(o, &steps);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_EQ(status.message(),
            absl::StrCat("rank 0: --resume=", first.save,
                         " was saved with precision=fp32, this run has "
                         "precision=fp16"));
  EXPECT_EQ(steps, 0);
}

}  // namespace
}  // namespace chunkzero
