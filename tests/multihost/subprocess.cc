#include "tests/multihost/subprocess.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace chunkzero {
namespace multihost {

absl::StatusOr<Child> Child::Start(const std::vector<std::string>& argv,
                                   const std::string& log_path) {
  if (argv.empty()) return absl::InvalidArgumentError("no command to start");
  SpawnOptions options;
  options.argv = argv;
  options.stdout_to = Stdio::File(log_path, /*append=*/true);
  options.stderr_to = Stdio::SameAsStdout();
  options.new_process_group = true;
  // Dies with this process even if it is SIGKILLed.
  options.parent_death_signal = SIGKILL;
  absl::StatusOr<Subprocess> process = Subprocess::Spawn(options);
  if (!process.ok()) return absl::UnavailableError(process.status().message());
  return Child(*std::move(process));
}

absl::StatusOr<int> Child::Wait(absl::Duration timeout) {
  if (!running()) return absl::FailedPreconditionError("already waited for");
  // Whatever it started in its group goes with it (Subprocess::Reap).
  absl::StatusOr<ExitStatus> end = process_.Wait(timeout);
  if (absl::IsDeadlineExceeded(end.status())) {
    return absl::DeadlineExceededError(
        absl::StrCat("still running after ", absl::FormatDuration(timeout)));
  }
  if (!end.ok()) return end.status();
  return end->ShellCode();
}

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<std::string> RunCommand(const std::vector<std::string>& argv,
                                       absl::Duration timeout) {
  char log[] = "/tmp/cz-multihost-cmd.XXXXXX";
  const int fd = mkstemp(log);
  if (fd < 0) return absl::UnavailableError("mkstemp");
  close(fd);
  absl::StatusOr<Child> child = Child::Start(argv, log);
  if (!child.ok()) {
    unlink(log);
    return child.status();
  }
  absl::StatusOr<int> code = child->Wait(timeout);
  std::string output = ReadFileOrEmpty(log);
  unlink(log);
  const std::string command = absl::StrJoin(argv, " ");
  if (!code.ok()) {
    return absl::Status(code.status().code(),
                        absl::StrCat(command, ": ", code.status().message()));
  }
  if (*code != 0) {
    return absl::UnavailableError(
        absl::StrCat(command, " exited ", *code, ": ", output));
  }
  return output;
}

}  // namespace multihost
}  // namespace chunkzero
