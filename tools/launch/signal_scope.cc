#include "tools/launch/signal_scope.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "base/subprocess.h"

namespace chunkzero {
namespace launch {
namespace {

// Written by OnSignal, read by the poll loop; volatile sig_atomic_t is what
// a handler may write.
volatile sig_atomic_t g_wake_fd = -1;
volatile sig_atomic_t g_pending[NSIG] = {};

// The self-pipe trick: a signal only records itself and wakes poll(), and
// everything else happens in the loop, outside the handler.
void OnSignal(int sig) {
  const int saved_errno = errno;
  g_pending[sig] = 1;
  const int fd = g_wake_fd;
  if (fd >= 0) {
    const char byte = 0;
    // The pipe is non-blocking; when it is full a wake-up is pending anyway.
    const ssize_t ignored = write(fd, &byte, 1);
    (void)ignored;
  }
  errno = saved_errno;
}

}  // namespace

SignalScope::~SignalScope() {
  for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
    sigaction(it->first, &it->second, nullptr);
  }
  g_wake_fd = -1;
  if (wake_read_ >= 0) close(wake_read_);
  if (wake_write_ >= 0) close(wake_write_);
}

absl::Status SignalScope::Install() {
  // Close-on-exec: the launcher's own fds must not leak into ranks.
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::ErrnoToStatus(errno, "pipe for the launcher's signals");
  }
  wake_read_ = fds[0];
  wake_write_ = fds[1];
  g_wake_fd = wake_write_;
  for (const int sig : kHandled) {
    g_pending[sig] = 0;
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) != 0) {
      return absl::ErrnoToStatus(errno,
                                 absl::StrCat("sigaction ", SignalName(sig)));
    }
    const bool ignored =
        !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_IGN;
    ignored_on_entry_[sig] = ignored;
    // SIGCHLD is needed even if ignored: ignoring it would reap the ranks
    // behind the launcher's back. So is SIGCONT: without it ranks stopped
    // with the launcher would stay stopped when it is resumed.
    if (ignored && sig != SIGCHLD && sig != SIGCONT) continue;
    struct sigaction action {};
    action.sa_handler = OnSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = sig == SIGCHLD ? SA_NOCLDSTOP : 0;
    if (sigaction(sig, &action, nullptr) != 0) {
      return absl::ErrnoToStatus(errno,
                                 absl::StrCat("sigaction ", SignalName(sig)));
    }
    saved_.emplace_back(sig, old);
  }
  return absl::OkStatus();
}

void SignalScope::DrainWakeFd() const {
  char buffer[64];
  while (read(wake_read_, buffer, sizeof(buffer)) > 0) {
  }
}

bool SignalScope::Take(int sig) {
  if (!g_pending[sig]) return false;
  g_pending[sig] = 0;
  return true;
}

}  // namespace launch
}  // namespace chunkzero
