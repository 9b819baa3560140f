// tools/train/launch.sh (through the launcher, //tools/launch:launch): the
// train binary as one process per rank over Gloo gives the run that the
// ranks as threads give, bit for bit, and its checkpoint is whole.
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "comm/testing/redis_server.h"
#include "gtest/gtest.h"
#include "tools/train/trainer.h"

namespace chunkzero {
namespace {

std::string Runfile(const std::string& path) {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/chunkzero/", path);
}

// The environment that makes launch.sh use the binaries built for this test
// instead of building its own.
std::string Binaries() {
  return absl::StrCat("CHUNKZERO_TRAIN_BIN=", Runfile("tools/train/train"),
                      " CHUNKZERO_LAUNCH_BIN=", Runfile("tools/launch/launch"));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
}

// The "loss" of every line of a metrics file. Losses are f32 values written
// with 9 significant digits, which read back to the same float.
std::vector<float> Losses(const std::string& path) {
  std::vector<float> losses;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t at = line.find("\"loss\":");
    if (at == std::string::npos) continue;
    const size_t begin = at + 7;
    const size_t end = line.find(',', begin);
    double loss = 0;
    EXPECT_TRUE(absl::SimpleAtod(line.substr(begin, end - begin), &loss));
    losses.push_back(static_cast<float>(loss));
  }
  return losses;
}

TEST(Launch, ProcessesEqualThreadsBitForBit) {
  for (ModelFamily family : {ModelFamily::kGpt2, ModelFamily::kLlama}) {
    SCOPED_TRACE(ModelFamilyName(family));
    const std::string dir =
        absl::StrCat(std::getenv("TEST_TMPDIR"), "/", ModelFamilyName(family));
    const std::string metrics = dir + "/metrics.jsonl";
    const std::string save = dir + "/ckpt";
    const std::string flags = absl::StrCat(
        "--model=", ModelFamilyName(family),
        " --steps=3 --layers=1 --d_model=32 --heads=2 --seq_len=16 --batch=2 "
        "--chunk_size=8192");
    const std::string command =
        absl::StrCat("mkdir -p ", dir, " && ", Binaries(), " bash ",
                     Runfile("tools/train/launch.sh"), " 2 ", flags,
                     " --metrics_out=", metrics, " --save=", save, " > ", dir,
                     "/out.txt 2>&1");
    ASSERT_EQ(std::system(command.c_str()), 0) << command;

    TrainOptions o;
    o.model_family = family;
    o.world_size = 2;
    o.backend = Backend::kGloo;
    o.steps = 3;
    o.model.layers = 1;
    o.model.d_model = 32;
    o.model.heads = 2;
    o.model.seq_len = 16;
    o.batch = 2;
    o.chunk_size = 8192;
    absl::StatusOr<TrainResult> threads = RunTraining(o, nullptr);
    ASSERT_TRUE(threads.ok()) << threads.status();
    std::vector<float> want;
    for (const StepMetrics& m : threads->steps) {
      want.push_back(static_cast<float>(m.loss));
    }
    EXPECT_EQ(Losses(metrics), want);

    absl::StatusOr<Checkpoint> ckpt = ReadCheckpoint(save);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    EXPECT_EQ(ckpt->meta.step, 3);
    EXPECT_EQ(ckpt->meta.world_size, 2);
    EXPECT_FALSE(ckpt->state.pieces.empty());
    EXPECT_EQ(ckpt->meta.config.at("model"), ModelFamilyName(family));
  }
}

// On a shared Redis server, each rank deletes its rendezvous keys once all
// have met: a second job under the same prefix meets as the first did, and
// the server holds no keys after either.
TEST(Launch, JobsOnASharedRedisServerCanReuseAPrefix) {
  absl::StatusOr<std::unique_ptr<comm_testing::RedisServer>> redis =
      comm_testing::RedisServer::Start();
  if (absl::IsNotFound(redis.status())) GTEST_SKIP() << redis.status();
  ASSERT_TRUE(redis.ok()) << redis.status();
  const std::string dir = std::getenv("TEST_TMPDIR");
  for (int job = 0; job < 2; ++job) {
    const std::string out = absl::StrCat(dir, "/redis_job", job, ".txt");
    const std::string command = absl::StrCat(
        Binaries(), " bash ", Runfile("tools/train/launch.sh"),
        " --rendezvous=redis://127.0.0.1:", (*redis)->port(), "/nightly",
        " 2 --steps=1 --layers=1 --d_model=32 --heads=2 --seq_len=16 "
        "--batch=2 > ",
        out, " 2>&1");
    EXPECT_EQ(std::system(command.c_str()), 0) << "job " << job << ":\n"
                                               << ReadFile(out);
    EXPECT_EQ((*redis)->KeyCount(), 0) << "job " << job;
  }
}

TEST(Launch, AFailingRankFailsTheJob) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  const std::string command = absl::StrCat(
      Binaries(), " bash ", Runfile("tools/train/launch.sh"),
      " 2 --steps=1 --layers=1 --d_model=32 --heads=2 --seq_len=16 "
      "--storage=bogus > ",
      dir, "/fail.txt 2>&1");
  EXPECT_NE(std::system(command.c_str()), 0);
  const std::string out = ReadFile(dir + "/fail.txt");
  EXPECT_NE(out.find("--storage"), std::string::npos) << out;
}

}  // namespace
}  // namespace chunkzero
