// The launcher's signals (launcher.h, "Stopping"): for the duration of a
// job, SIGCHLD and the signals the launcher passes on only record their
// arrival and wake the supervision loop's poll() through a pipe (the
// self-pipe trick); everything else happens in the loop, outside the
// handler.
//
//   SignalScope signals;
//   CZ_RETURN_IF_ERROR(signals.Install());
//   poll() on signals.wake_fd(), then signals.DrainWakeFd() and
//   if (SignalScope::Take(SIGINT)) ...
#ifndef CHUNKZERO_TOOLS_LAUNCH_SIGNAL_SCOPE_H_
#define CHUNKZERO_TOOLS_LAUNCH_SIGNAL_SCOPE_H_

#include <signal.h>

#include <array>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace chunkzero {
namespace launch {

// The signals the launcher passes on to the ranks.
inline constexpr std::array<int, 3> kPassedOn = {SIGINT, SIGTERM, SIGHUP};
// Every signal whose disposition RunJob changes. SIGTSTP (Ctrl-Z) and the
// SIGCONT that resumes the launcher are passed on too: the terminal sends
// them to the launcher's process group, and each rank leads its own.
inline constexpr std::array<int, 6> kHandled = {SIGCHLD, SIGINT,  SIGTERM,
                                                SIGHUP,  SIGTSTP, SIGCONT};

// Routes kHandled to the handler for its lifetime, and restores the
// dispositions it found when destroyed. A passed-on signal that was ignored
// on entry (nohup, a background job of a non-interactive shell) stays
// ignored, in the launcher and in the ranks.
//
// REQUIRES: one SignalScope in the process at a time (the handler's state
// is global).
class SignalScope {
 public:
  SignalScope() = default;
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;
  ~SignalScope();

  absl::Status Install();

  // Readable when a signal has arrived.
  int wake_fd() const { return wake_read_; }
  void DrainWakeFd() const;

  // Whether `sig` has arrived since the last call.
  static bool Take(int sig);

  bool IgnoredOnEntry(int sig) const { return ignored_on_entry_[sig]; }

 private:
  int wake_read_ = -1;
  int wake_write_ = -1;
  std::vector<std::pair<int, struct sigaction>> saved_;
  std::array<bool, NSIG> ignored_on_entry_{};
};

}  // namespace launch
}  // namespace chunkzero

#endif  // CHUNKZERO_TOOLS_LAUNCH_SIGNAL_SCOPE_H_
