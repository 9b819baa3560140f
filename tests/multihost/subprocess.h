// Child processes for the multi-host tests: started with their output in a
// file, waited for with a deadline, killed (with their process group) when
// the test ends, and killed when the test dies. A thin layer over
// base/subprocess.h.
//
//   absl::StatusOr<Child> child = Child::Start({"ip", "netns", "list"}, log);
//   absl::StatusOr<int> code = child->Wait(absl::Seconds(30));
//   absl::StatusOr<std::string> out = RunCommand({"ip", "-br", "addr"});
#ifndef CHUNKZERO_TESTS_MULTIHOST_SUBPROCESS_H_
#define CHUNKZERO_TESTS_MULTIHOST_SUBPROCESS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/subprocess.h"

namespace chunkzero {
namespace multihost {

class Child {
 public:
  // Runs argv (argv[0] looked up in $PATH) in a process group of its own,
  // stdout and stderr appended to `log_path`. Unavailable naming argv[0] (or
  // the log) and the errno if it cannot be started. The child gets
  // PR_SET_PDEATHSIG=SIGKILL: it dies with the thread that started it even if
  // this process is SIGKILLed (what it starts in turn must see to its own, as
  // the launcher does), so start it from a thread that outlives it.
  static absl::StatusOr<Child> Start(const std::vector<std::string>& argv,
                                     const std::string& log_path);

  Child(Child&& other) noexcept = default;
  Child& operator=(Child&&) = delete;
  // Kills the process group (SIGKILL) if it still runs, and reaps it.
  ~Child() = default;

  // The exit code (128 + the signal for a killed child) once it has ended;
  // DeadlineExceeded (the child still runs) after `timeout`.
  absl::StatusOr<int> Wait(absl::Duration timeout);
  bool running() const { return process_.running(); }

 private:
  explicit Child(Subprocess process) : process_(std::move(process)) {}
  Subprocess process_;
};

// Runs argv to its end (at most `timeout`) and returns its output; an
// error naming the command and quoting its output if it exits non-zero.
absl::StatusOr<std::string> RunCommand(
    const std::vector<std::string>& argv,
    absl::Duration timeout = absl::Seconds(30));

// The whole file, or "" if it cannot be read.
std::string ReadFileOrEmpty(const std::string& path);

}  // namespace multihost
}  // namespace chunkzero

#endif  // CHUNKZERO_TESTS_MULTIHOST_SUBPROCESS_H_
