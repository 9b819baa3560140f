// launch [--grace_period_s=S] NPROC BINARY [ARGS...]
//
// Runs a job as NPROC processes of BINARY on this machine, one rank each,
// and exits with the job's status; see launcher.h for what it passes to each
// rank and how it stops them. tools/train/launch.sh runs the train job with
// it. Exit status: the job's (launcher.h, RunJob), 2 after a usage error, 1
// when the launcher itself failed.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/launch/launcher.h"

int main(int argc, char** argv) {
  namespace launch = chunkzero::launch;
  const std::vector<std::string> args(argv + 1, argv + argc);
  const absl::StatusOr<launch::LaunchOptions> options =
      launch::ParseLaunchArgs(args);
  if (!options.ok()) {
    std::fprintf(stderr, "launch: %s\n%s",
                 std::string(options.status().message()).c_str(),
                 launch::kUsage);
    return 2;
  }
  const absl::StatusOr<int> exit_code = launch::RunJob(*options);
  if (!exit_code.ok()) {
    std::fprintf(stderr, "launch: %s\n",
                 std::string(exit_code.status().message()).c_str());
    return 1;
  }
  return *exit_code;
}
