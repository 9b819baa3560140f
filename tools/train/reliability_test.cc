// The train binary against a hostile user, a full disk and a flaky cluster,
// fourth round: what each case must print, exit with and leave on disk.
// Ranks of one job run as processes (--rank, Gloo, a directory
// rendezvous), the way launch.sh starts them.
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "base/system_memory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/pretrained/pretrained_export.h"
#include "io/safetensors/safetensors.h"
#include "models/gpt2/gpt_checkpoint.h"
#include "nlohmann/json.hpp"
#include "tools/train/testing/run_train.h"
#include "tools/train/train_plan.h"
#include "tools/train/trainer.h"

// Whether this is a ThreadSanitizer build (the binary under test is one
// too).
#if defined(__SANITIZE_THREAD__)
#define CZ_RELIABILITY_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CZ_RELIABILITY_TSAN 1
#endif
#endif

namespace chunkzero {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using train_testing::RunTrainBinaries;
using train_testing::RunTrainBinary;
using train_testing::TrainOutcome;
using train_testing::TrainRun;

const std::vector<std::string> kSmall = {
    "--layers=1", "--d_model=32", "--heads=2",      "--seq_len=16",
    "--steps=1",  "--batch=1",    "--world_size=1", "--chunk_size=8192"};

std::string TestDir(const std::string& name) {
  const std::string dir = absl::StrCat(
      std::getenv("TEST_TMPDIR"), "/reliability_test/",
      ::testing::UnitTest::GetInstance()->current_test_info()->name(), "/",
      name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::vector<std::string> With(std::vector<std::string> args,
                              const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TrainOutcome Train(const std::vector<std::string>& more,
                   int64_t file_size_limit = 0) {
  TrainRun run;
  run.args = With(kSmall, more);
  run.file_size_limit = file_size_limit;
  return RunTrainBinary(run);
}

std::set<std::string> Entries(const std::string& dir) {
  std::set<std::string> names;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    names.insert(entry.path().filename().string());
  }
  return names;
}

std::string Bytes(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFileToString(path);
  return bytes.ok() ? *bytes : "";
}

// The small model's parameters, values from `seed`.
std::map<std::string, Tensor> SmallGptState(float seed) {
  GptConfig config;
  config.layers = 1;
  config.d_model = 32;
  config.heads = 2;
  config.seq_len = 16;
  config.vocab = 256;
  std::map<std::string, Tensor> state;
  for (const auto& [param, shape] : GptParameterShapes(config)) {
    Tensor t = *Tensor::Zeros(shape, DType::kF32);
    for (int64_t i = 0; i < t.numel(); ++i) {
      t.data<float>()[i] = 0.01f * seed * static_cast<float>(i % 7);
    }
    state[param] = std::move(t);
  }
  return state;
}

// A GPT-2 directory of the small model.
std::string GptDirectory(const std::string& dir, float seed,
                         int64_t shard_bytes = 5'000'000'000) {
  EXPECT_TRUE(WriteGptDirectory(dir, SmallGptState(seed), 2, shard_bytes).ok());
  return dir;
}

// The two ranks of one job as processes, rank r with `args[r]` in
// `cwd[r]` (empty: this process's).
std::vector<TrainOutcome> TwoRanks(
    const std::vector<std::vector<std::string>>& args,
    const std::vector<std::string>& cwd = {"", ""}) {
  const std::string rendezvous = TestDir("rendezvous");
  std::vector<TrainRun> runs(2);
  for (int r = 0; r < 2; ++r) {
    runs[r].args = With(
        kSmall, {"--world_size=2", "--backend=gloo", absl::StrCat("--rank=", r),
                 "--rendezvous=" + rendezvous, "--comm_timeout_s=60"});
    runs[r].args = With(runs[r].args, args[r]);
    runs[r].cwd = cwd[r];
  }
  return RunTrainBinaries(runs);
}

// 1. Nesting 100,000 deep anywhere in config.json: refused, quoting little.
TEST(Reliability, DeepNestingInConfigJsonIsRefusedShortly) {
  const std::string base = GptDirectory(TestDir("hf"), 1);
  const std::string config = Bytes(base + "/config.json");
  for (const std::string key : {"model_type", "n_layer", "rope_scaling"}) {
    SCOPED_TRACE(key);
    nlohmann::json j = nlohmann::json::parse(config);
    j.erase(key);
    std::string text = j.dump();
    text.insert(1, "\"" + key + "\": " + std::string(100000, '[') +
                       std::string(100000, ']') + ", ");
    const std::string dir = TestDir(key);
    fs::copy(
        base, dir,
        fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    ASSERT_TRUE(
        WriteFileAtomically(dir + "/config.json", [&](int fd,
                                                      const std::string& p) {
          return WriteAll(fd, text.data(), text.size(), p);
        }).ok());
    const TrainOutcome out = Train({"--init=" + dir});
    EXPECT_EQ(out.exit_code, 1) << out.err;
    EXPECT_THAT(out.err, HasSubstr("nested too deeply"));
    EXPECT_LT(out.err.size(), 1000u);
  }
  // A 60 MB model_type is quoted in a few dozen bytes.
  const std::string dir = TestDir("long");
  fs::copy(base, dir,
           fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  nlohmann::json j = nlohmann::json::parse(config);
  j["model_type"] = std::string(60'000'000, 'x');
  const std::string text = j.dump();
  ASSERT_TRUE(
      WriteFileAtomically(dir + "/config.json", [&](int fd,
                                                    const std::string& p) {
        return WriteAll(fd, text.data(), text.size(), p);
      }).ok());
  const TrainOutcome out = Train({"--init=" + dir});
  EXPECT_EQ(out.exit_code, 1);
  EXPECT_THAT(out.err,
              HasSubstr("(a string of 60000000 bytes), want \"gpt2\""));
  EXPECT_LT(out.err.size(), 1000u);
}

// 4. Ranks whose --init files differ in content (the same relative name in
// each rank's working directory, as on two hosts) fail at the rendezvous.
TEST(Reliability, RanksAgreeOnTheContentOfTheirInputFiles) {
  const std::string a = TestDir("host_a"), b = TestDir("host_b");
  GptDirectory(a + "/model", 1);
  GptDirectory(b + "/model", 2);
  const std::vector<TrainOutcome> out =
      TwoRanks({{"--init=model"}, {"--init=model"}}, {a, b});
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(out[r].exit_code, 1) << out[r].err;
    EXPECT_THAT(out[r].err,
                HasSubstr("was started with another configuration"));
    EXPECT_THAT(out[r].err,
                HasSubstr("init content: model/model.safetensors is "));
    EXPECT_THAT(out[r].err, Not(HasSubstr("step 1/")));
  }
  // The same content trains.
  fs::remove_all(b + "/model");
  GptDirectory(b + "/model", 1);
  const std::vector<TrainOutcome> same =
      TwoRanks({{"--init=model"}, {"--init=model"}}, {a, b});
  EXPECT_EQ(same[0].exit_code, 0) << same[0].err;
  EXPECT_EQ(same[1].exit_code, 0) << same[1].err;
}

// 11. An --export given to rank 0 only is found at the rendezvous, before
// training, and nothing is written.
TEST(Reliability, AFileFlagGivenToOneRankFailsAtTheRendezvous) {
  const std::string dir = TestDir("out");
  const std::vector<TrainOutcome> out =
      TwoRanks({{"--export=" + dir + "/export"}, {}});
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(out[r].exit_code, 1) << out[r].err;
    EXPECT_THAT(out[r].err, HasSubstr("export is "));
    EXPECT_THAT(out[r].err, Not(HasSubstr("step 1/")));
  }
  EXPECT_TRUE(Entries(dir).empty());
  // Likewise the train tool's own --tensorboard_dir.
  const std::vector<TrainOutcome> tb =
      TwoRanks({{}, {"--tensorboard_dir=" + dir + "/tb"}});
  EXPECT_THAT(tb[0].err, HasSubstr("tensorboard_dir is "));
  EXPECT_EQ(tb[1].exit_code, 1);
  EXPECT_TRUE(Entries(dir).empty());
}

// 10. A --save mismatch across ranks, or a job refused before step 1,
// leaves no directory holding only a lock, and no event file.
TEST(Reliability, RefusedRunsLeaveNothing) {
  const std::string dir = TestDir("out");
  const std::vector<TrainOutcome> mismatch =
      TwoRanks({{"--save=" + dir + "/ckpt", "--steps=1"},
                {"--save=" + dir + "/ckpt", "--steps=2"}});
  EXPECT_EQ(mismatch[0].exit_code, 1) << mismatch[0].err;
  EXPECT_THAT(mismatch[0].err, HasSubstr("steps is "));
  EXPECT_TRUE(Entries(dir).empty()) << *Entries(dir).begin();
  for (const std::string flag :
       {"--save=", "--tensorboard_dir=", "--export="}) {
    SCOPED_TRACE(flag);
    const TrainOutcome refused = Train({flag + dir + "/x", "--batch=0"});
    EXPECT_EQ(refused.exit_code, 1);
    EXPECT_TRUE(Entries(dir).empty());
  }
  // An existing save directory keeps what it had, and gets no lock file.
  fs::create_directories(dir + "/kept");
  const TrainOutcome refused =
      TwoRanks({{"--save=" + dir + "/kept"}, {"--save=" + dir + "/other"}})[0];
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_EQ(Entries(dir), std::set<std::string>{"kept"});
  EXPECT_TRUE(Entries(dir + "/kept").empty());
}

// 8. Past `ulimit -f` every writer fails with EFBIG, named, and cleans up:
// no SIGXFSZ (exit 153), no staging, no temporaries. The test sets only the
// limit, never the signal's disposition.
TEST(Reliability, AFileSizeLimitIsAnErrorThatLeavesNothing) {
#ifdef CZ_RELIABILITY_TSAN
  // Under a 16 KiB file size limit ThreadSanitizer's runtime itself faults
  // (SIGBUS before main's first line runs); the plain and asan builds run
  // this test.
  GTEST_SKIP() << "ThreadSanitizer's runtime cannot start under this limit";
#endif
  const std::string dir = TestDir("out");
  const std::string hf = GptDirectory(TestDir("hf"), 1);
  const std::string old = dir + "/old_export";
  fs::copy(hf, old, fs::copy_options::recursive);
  const std::string before = Bytes(old + "/model.safetensors");
  struct Case {
    const char* what;
    std::vector<std::string> flags;
    std::string left;  // A directory that must hold what it held before.
    // Too small for 32 KiB of wte (or, for the event file, its first
    // record).
    int64_t limit = 16384;
  };
  const Case cases[] = {
      {"a new export directory", {"--export=" + dir + "/new"}, dir},
      {"over an export", {"--export=" + old}, old},
      {"one file", {"--export=" + dir + "/w.safetensors"}, dir},
      {"a save", {"--save=" + dir + "/ckpt"}, dir},
      {"nvme", {"--offload=nvme", "--nvme_path=" + dir}, dir},
      {"tensorboard", {"--tensorboard_dir=" + dir + "/tb"}, dir, 16},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::set<std::string> was = Entries(c.left);
    const TrainOutcome out = Train(c.flags, c.limit);
    EXPECT_EQ(out.exit_code, 1) << out.err;
    EXPECT_THAT(out.err, HasSubstr("File too large"));
    EXPECT_EQ(Entries(c.left), was);
  }
  EXPECT_EQ(Bytes(old + "/model.safetensors"), before);
}

// 5. A directory where the export puts a shard: refused before step 1, and
// the earlier export stays loadable.
TEST(Reliability, AnExportThatCannotCompleteIsRefusedBeforeTraining) {
  const std::string hf = GptDirectory(TestDir("hf"), 1);
  const std::string ex = TestDir("ex") + "/export";
  fs::copy(hf, ex, fs::copy_options::recursive);
  fs::create_directories(ex + "/model-00001-of-00002.safetensors");
  const std::string before = Bytes(ex + "/model.safetensors");
  const TrainOutcome out =
      Train({"--init=" + hf, "--export=" + ex, "--export_shard_size=50K"});
  EXPECT_EQ(out.exit_code, 1);
  EXPECT_THAT(out.err, HasSubstr("model-00001-of-00002.safetensors is a "
                                 "directory, not a regular file"));
  EXPECT_THAT(out.err, Not(HasSubstr("step 1/")));
  EXPECT_EQ(Bytes(ex + "/model.safetensors"), before);
  // Without the obstacle: two shards replace the one file, whole.
  fs::remove(ex + "/model-00001-of-00002.safetensors");
  const TrainOutcome done =
      Train({"--init=" + hf, "--export=" + ex, "--export_shard_size=50K"});
  ASSERT_EQ(done.exit_code, 0) << done.err;
  EXPECT_EQ(Entries(ex), (std::set<std::string>{
                             "config.json", "model-00001-of-00002.safetensors",
                             "model-00002-of-00002.safetensors",
                             "model.safetensors.index.json"}));
}

// 6. A file the user may not replace (immutable here, as root; a foreign
// file in a sticky directory for other users, base/file_test) is refused
// before step 1.
TEST(Reliability, AnExportItMayNotReplaceIsRefusedBeforeTraining) {
  const std::string ex = GptDirectory(TestDir("ex") + "/export", 1);
  const std::string file = ex + "/model.safetensors";
  const int fd = ::open(file.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  int flags = 0;
  const bool set =
      ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0 &&
      (flags |= FS_IMMUTABLE_FL, ::ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0);
  if (!set) {
    ::close(fd);
    GTEST_SKIP() << "cannot set the immutable flag here";
  }
  const TrainOutcome out = Train({"--export=" + ex});
  flags &= ~FS_IMMUTABLE_FL;
  ASSERT_EQ(::ioctl(fd, FS_IOC_SETFLAGS, &flags), 0);
  ::close(fd);
  EXPECT_EQ(out.exit_code, 1);
  EXPECT_THAT(out.err, HasSubstr("PERMISSION_DENIED: --export=" + ex +
                                 ": cannot replace or remove " + file +
                                 ": it is immutable or append-only"));
  EXPECT_THAT(out.err, Not(HasSubstr("step 1/")));
}

// 9. What a killed export left (its staging, which nobody holds) goes with
// the next export.
TEST(Reliability, ALaterExportRemovesAKilledOnesStaging) {
  const std::string ex = GptDirectory(TestDir("ex") + "/export", 1);
  const std::string stale =
      absl::StrCat(ex, "/", kExportStagingPrefix, "killed");
  fs::create_directories(stale);
  ASSERT_TRUE(WriteFileAtomically(stale + "/model.safetensors",
                                  [](int fd, const std::string& p) {
                                    return WriteAll(fd, "x", 1, p);
                                  })
                  .ok());
  const TrainOutcome out = Train({"--export=" + ex});
  ASSERT_EQ(out.exit_code, 0) << out.err;
  EXPECT_EQ(Entries(ex),
            (std::set<std::string>{"config.json", "model.safetensors"}));
}

// 13. Nothing a rank holds grows with --grad_accum (each micro-batch's
// tokens are filled just before its forward).
TEST(Reliability, AHugeGradAccumPlansAndHoldsWhatOneDoes) {
  TrainOptions o;
  o.model.layers = 1;
  o.model.d_model = 32;
  o.model.heads = 2;
  o.model.seq_len = 16;
  o.world_size = 1;
  o.batch = 1;
  o.steps = 0;
  o.chunk_size = 8192;
  o.grad_accum = 2;
  absl::StatusOr<TrainPlan> two = PlanTraining(o);
  ASSERT_TRUE(two.ok()) << two.status();
  o.grad_accum = 2147483647;
  absl::StatusOr<TrainPlan> huge = PlanTraining(o);
  ASSERT_TRUE(huge.ok()) << huge.status();
  EXPECT_EQ(huge->memory.per_rank(), two->memory.per_rank());
  // It starts (it used to run out of memory making 2^31 token buffers).
  EXPECT_TRUE(RunTraining(o, nullptr).ok());
}

// 14, 18. The memory check counts the shards the index names, whatever
// their names, and reads nothing else in the directory.
TEST(Reliability, TheInitSizeIsWhatTheIndexNames) {
  const std::string hf = GptDirectory(TestDir("hf"), 1, 50'000);
  // The shards renamed *.bin, as another writer might.
  nlohmann::json index =
      nlohmann::json::parse(Bytes(hf + "/model.safetensors.index.json"));
  for (auto& [name, shard] : index["weight_map"].items()) {
    const std::string old = shard.get<std::string>();
    const std::string renamed = old.substr(0, old.size() - 12) + ".bin";
    if (fs::exists(hf + "/" + old))
      fs::rename(hf + "/" + old, hf + "/" + renamed);
    shard = renamed;
  }
  const std::string text = index.dump();
  int64_t bytes =
      static_cast<int64_t>(Bytes(hf + "/config.json").size() + text.size());
  for (const std::string shard :
       {"model-00001-of-00002.bin", "model-00002-of-00002.bin"}) {
    bytes += static_cast<int64_t>(fs::file_size(hf + "/" + shard));
  }
  ASSERT_TRUE(WriteFileAtomically(hf + "/model.safetensors.index.json",
                                  [&](int fd, const std::string& p) {
                                    return WriteAll(fd, text.data(),
                                                    text.size(), p);
                                  })
                  .ok());
  // Unrelated entries that opening would block on or fail at.
  ASSERT_EQ(::mkfifo((hf + "/old.safetensors").c_str(), 0644), 0);
  fs::create_directories(hf + "/backup.safetensors");
  TrainOptions o;
  o.init = hf;
  o.world_size = 1;
  o.batch = 1;
  o.steps = 1;
  o.chunk_size = 8192;
  ASSERT_TRUE(PlanTraining(o).ok()) << PlanTraining(o).status();
  o.memory_limit_bytes = 2 * bytes - 1;
  const absl::Status refused = PlanTraining(o).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.message()),
              HasSubstr(absl::StrCat("--init=", hf, " has ",
                                     FormatBytes(static_cast<double>(bytes)))));
}

}  // namespace
}  // namespace chunkzero
