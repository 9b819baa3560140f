// The train binary's output files and lines around planning: the plan goes
// to standard error before step 1, and --metrics_out is created only once
// the job is planned, so a job refused before that leaves an earlier run's
// file as it was.
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "base/file.h"
#include "base/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

struct TrainRun {
  int exit_code = -1;
  std::string err;
};

TrainRun Train(const std::vector<std::string>& flags) {
  const std::string err_path =
      JoinPath(std::getenv("TEST_TMPDIR"), "metrics_out_stderr");
  SpawnOptions options;
  options.argv = {
      absl::StrCat(std::getenv("TEST_SRCDIR"), "/chunkzero/tools/train/train"),
      "--layers=1",
      "--d_model=32",
      "--heads=2",
      "--seq_len=16",
      "--world_size=1",
      "--batch=1"};
  options.argv.insert(options.argv.end(), flags.begin(), flags.end());
  options.stdout_to = Stdio::Null();
  options.stderr_to = Stdio::File(err_path);
  TrainRun run;
  absl::StatusOr<ExitStatus> end = RunSubprocess(options, absl::Seconds(120));
  EXPECT_TRUE(end.ok()) << end.status();
  if (end.ok() && end->exited()) run.exit_code = end->exit_code();
  run.err = ReadFileToString(err_path).value_or("");
  return run;
}

TEST(MetricsOut, ARefusedJobLeavesAnEarlierFileAsItWas) {
  const std::string path = JoinPath(std::getenv("TEST_TMPDIR"), "m.jsonl");
  {
    std::ofstream earlier(path);
    earlier << "{\"step\":1}\n";
  }
  const TrainRun refused = Train({"--metrics_out=" + path, "--batch=0"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr("error: INVALID_ARGUMENT: --batch=0"));
  EXPECT_EQ(ReadFileToString(path).value_or(""), "{\"step\":1}\n");
}

TEST(MetricsOut, ThePlanComesBeforeStepOneAndEachStepAddsALine) {
  const std::string path = JoinPath(std::getenv("TEST_TMPDIR"), "m2.jsonl");
  const TrainRun run = Train({"--metrics_out=" + path, "--steps=2"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.err,
              StartsWith("plan (what each rank will hold, estimated):\n"
                         "  host: 1 rank x "));
  EXPECT_LT(run.err.find("  host: "), run.err.find("step 1/2"));
  const std::vector<std::string> lines = absl::StrSplit(
      ReadFileToString(path).value_or(""), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_THAT(lines[0], StartsWith("{\"step\":1,"));
  EXPECT_THAT(lines[1], StartsWith("{\"step\":2,"));
}

}  // namespace
}  // namespace chunkzero
