// Runs the train binary (//tools/train:train, a data dependency of the test)
// as a separate process, the way a user or a launcher would, with a
// deadline: tests of what the binary prints, exits with and leaves on disk.
//
//   TrainRun run;
//   run.args = {"--steps=1", "--export=" + dir};
//   run.file_size_limit = 4096;           // as `ulimit -f`, in bytes
//   const TrainOutcome out = RunTrainBinary(run);
//   EXPECT_EQ(out.exit_code, 1);
//   EXPECT_THAT(out.err, HasSubstr("File too large"));
//
// Several runs at once (the ranks of one job) with RunTrainBinaries.
#ifndef CHUNKZERO_TOOLS_TRAIN_TESTING_RUN_TRAIN_H_
#define CHUNKZERO_TOOLS_TRAIN_TESTING_RUN_TRAIN_H_

#include <cstdint>
#include <string>
#include <vector>

namespace chunkzero {
namespace train_testing {

struct TrainRun {
  std::vector<std::string> args;  // After the binary's name.
  // "NAME=value", added to this process's environment.
  std::vector<std::string> env;
  std::string cwd;  // Empty: this process's.
  // RLIMIT_FSIZE for the child (0: this process's). Only the limit is set,
  // never the SIGXFSZ disposition: the binary must cope with the signal
  // itself.
  int64_t file_size_limit = 0;
  int deadline_s = 180;  // Killed after it, and the test fails.
};

struct TrainOutcome {
  int exit_code = -1;  // 128 + the signal for a process a signal ended.
  std::string err;     // Its standard error (standard output is dropped).
};

// The path of the train binary in the test's runfiles.
std::string TrainBinary();

TrainOutcome RunTrainBinary(const TrainRun& run);

// Starts every run at once and waits for all.
std::vector<TrainOutcome> RunTrainBinaries(const std::vector<TrainRun>& runs);

}  // namespace train_testing
}  // namespace chunkzero

#endif  // CHUNKZERO_TOOLS_TRAIN_TESTING_RUN_TRAIN_H_
