// The supervision loop of RunJob (launcher.h): starts this host's ranks,
// then polls the signal pipe and the ranks' output pipes until every rank
// has been reaped, stopping them all at the first failure or signal.
//
//   Job job(options, rendezvous, signals);
//   absl::Status status = job.Start();
//   if (!status.ok()) job.Abort();
//   const absl::Status waited = job.Wait();
//   ... job.exit_code() ...
#ifndef CHUNKZERO_TOOLS_LAUNCH_JOB_H_
#define CHUNKZERO_TOOLS_LAUNCH_JOB_H_

#include <array>
#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "base/subprocess.h"
#include "tools/launch/launch_options.h"
#include "tools/launch/signal_scope.h"

namespace chunkzero {
namespace launch {

class Job {
 public:
  // `options` and `signals` (installed) must outlive the job.
  Job(const LaunchOptions& options, std::string rendezvous,
      const SignalScope& signals);
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  // Starts rank 0, 1, ... in turn. Stops early (and OK) when a rank fails
  // or the launcher gets a signal meanwhile: the loop then stops the rest.
  absl::Status Start();

  // Stops every running rank because the launcher itself failed.
  void Abort();

  // Runs until every started rank has been reaped. On a poll() failure the
  // ranks are SIGKILLed and reaped before the error is returned.
  absl::Status Wait();

  // What RunJob returns: 0, the first failed rank's ShellCode, or 128 + the
  // signal the launcher got.
  int exit_code() const { return exit_code_; }

 private:
  using Clock = std::chrono::steady_clock;

  struct Rank {
    // Leads a process group of its own, which every signal goes to; until
    // it is reaped nobody else can have its pid or group id. Its stdout
    // pipe (stdout and stderr; none for the job's rank 0, and closed at
    // EOF) is non-blocking.
    Subprocess process;
    // The end of its output; trimmed to kKeptOutputBytes when it reaches
    // twice that, so that appending stays cheap.
    std::string kept;
    size_t dropped = 0;
  };

  // The job's rank of this host's rank r.
  int GlobalRank(size_t r) const;
  absl::Status StartRank(int r);
  // One turn of the loop: wait for a signal, output or the kill deadline,
  // then act on what happened.
  absl::Status Step(int timeout_ms);
  int PollTimeoutMs() const;
  void Reap();
  void OnRankExit(size_t r, ExitStatus end);
  void OnLauncherSignal(int sig);
  void Suspend();
  void Resume();
  // Sends `sig` and SIGCONT (a stopped rank acts on nothing else) to every
  // running rank, and arms the SIGKILL deadline.
  void StopRanks(int sig);
  bool AnyRunning() const;
  void KillAndReapAll();
  bool ReadOutput(Rank& rank);
  void DrainOutput(Rank& rank);
  void Report(absl::string_view text) const;

  const LaunchOptions& options_;
  const std::string rendezvous_;
  const SignalScope& signals_;
  std::vector<Rank> ranks_;
  // Set by the first failure or signal; from then on the job only ends.
  bool stopping_ = false;
  // Between Suspend and Resume.
  bool suspended_ = false;
  int stop_signal_ = SIGTERM;
  int exit_code_ = 0;
  // When the ranks still running get SIGKILL.
  std::optional<Clock::time_point> kill_at_;
  // What every rank's environment gets on top of the launcher's
  // (CHUNKZERO_NUM_THREADS), and the signals every rank starts ignoring.
  std::vector<std::string> environment_;
  std::vector<int> ignored_signals_;
  std::array<char, 64 * 1024> buffer_;
};

}  // namespace launch
}  // namespace chunkzero

#endif  // CHUNKZERO_TOOLS_LAUNCH_JOB_H_
