#include "tools/train/tensorboard_report.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/tensorboard/event_file.h"
#include "tools/train/trainer.h"

namespace chunkzero {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp",
                                       "/tensorboard_report_test/", name);
  fs::remove_all(dir);
  return dir;
}

TEST(TensorBoardReport, ScalarsOfASyntheticStepExactly) {
  StepMetrics m;
  m.step = 3;
  m.loss = 2.5;
  m.lr = 1e-3;
  m.grad_norm = 0.75;
  m.loss_scale = 65536;
  m.tokens_per_s = 1000;
  m.step_time_s = 0.125;
  m.ranks.resize(2);
  m.ranks[0].peak_device_bytes = 100;
  m.ranks[1].peak_device_bytes = 300;
  m.ranks[0].peak_host_bytes = 50;
  m.ranks[0].h2d_bytes = 7;
  m.ranks[1].h2d_bytes = 8;
  m.ranks[1].d2h_bytes = 9;
  EXPECT_THAT(
      TensorBoardScalars(m),
      ::testing::ElementsAre(
          std::pair<std::string, float>("train/loss", 2.5f),
          std::pair<std::string, float>("train/lr", 1e-3f),
          std::pair<std::string, float>("train/grad_norm", 0.75f),
          std::pair<std::string, float>("train/loss_scale", 65536.0f),
          std::pair<std::string, float>("train/tokens_per_s", 1000.0f),
          std::pair<std::string, float>("train/step_time_s", 0.125f),
          std::pair<std::string, float>("memory/device_peak_bytes", 300.0f),
          std::pair<std::string, float>("memory/host_peak_bytes", 50.0f),
          std::pair<std::string, float>("copies/h2d_bytes", 15.0f),
          std::pair<std::string, float>("copies/d2h_bytes", 9.0f)));
}

// A GPT-2 and a Llama run, offloaded so that every figure moves: every
// step's every scalar is in the file, exactly.
TEST(TensorBoardReport, EveryStepOfARunComesBack) {
  for (ModelFamily family : {ModelFamily::kGpt2, ModelFamily::kLlama}) {
    SCOPED_TRACE(ModelFamilyName(family));
    TrainOptions o;
    o.model_family = family;
    o.model.layers = 1;
    o.model.d_model = 32;
    o.model.heads = 2;
    o.model.seq_len = 16;
    o.world_size = 2;
    o.batch = 2;
    o.steps = 3;
    o.offload = OffloadPolicy::kParams;
    o.device_memory_limit = int64_t{1} << 30;
    const std::string dir = TestDir(std::string(ModelFamilyName(family)));
    auto report = TensorBoardReport::Create(dir);
    ASSERT_TRUE(report.ok()) << report.status();
    std::vector<StepMetrics> seen;
    absl::StatusOr<TrainResult> r =
        RunTraining(o, [&](const StepMetrics& m) -> absl::Status {
          seen.push_back(m);
          return (*report)->OnStep(m);
        });
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE((*report)->Close().ok());
    auto events = ReadScalarEvents((*report)->path());
    ASSERT_TRUE(events.ok()) << events.status();
    ASSERT_EQ(events->size(), 4u);  // The version, then 3 steps.
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ((*events)[i + 1].step, i + 1);
      EXPECT_EQ((*events)[i + 1].values, TensorBoardScalars(seen[i]));
    }
    EXPECT_GT((*events)[1].values[8].second, 0);  // Copies to the device.
  }
}

TEST(TensorBoardReport, AnUnwritableDirectoryIsNamed) {
  const std::string file = TestDir("a_file");
  fs::create_directories(fs::path(file).parent_path());
  { std::ofstream(file) << "x"; }
  auto report = TensorBoardReport::Create(file + "/runs");
  EXPECT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(report.status().message(),
              HasSubstr(absl::StrCat("--tensorboard_dir=", file, "/runs: ")));
}

}  // namespace
}  // namespace chunkzero
