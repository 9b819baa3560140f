#include "tools/launch/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/file.h"
#include "base/parallel_for.h"
#include "base/status_macros.h"
#include "base/tcp_probe.h"

namespace chunkzero {
namespace launch {
namespace {

using Clock = std::chrono::steady_clock;

// The signals the launcher passes on to the ranks.
constexpr std::array<int, 3> kPassedOn = {SIGINT, SIGTERM, SIGHUP};
// Every signal whose disposition RunJob changes. SIGTSTP (Ctrl-Z) and the
// SIGCONT that resumes the launcher are passed on too: the terminal sends
// them to the launcher's process group, and each rank leads its own.
constexpr std::array<int, 6> kHandled = {SIGCHLD, SIGINT,  SIGTERM,
                                         SIGHUP,  SIGTSTP, SIGCONT};

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  if (abbrev == nullptr) return absl::StrCat("signal ", sig);
  return absl::StrCat("SIG", abbrev);
}

// "5s", "0.5s".
std::string Seconds(std::chrono::milliseconds d) {
  return absl::StrCat(d.count() / 1000.0, "s");
}

// Owns a file descriptor.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  ~UniqueFd() { Reset(); }

  int get() const { return fd_; }
  void Reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// A close-on-exec pipe (the launcher's own fds must not leak into ranks).
absl::Status MakePipe(absl::string_view what, UniqueFd* read_end,
                      UniqueFd* write_end) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("pipe for ", what));
  }
  *read_end = UniqueFd(fds[0]);
  *write_end = UniqueFd(fds[1]);
  return absl::OkStatus();
}

absl::Status SetNonBlocking(int fd, absl::string_view what) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("fcntl O_NONBLOCK on ", what));
  }
  return absl::OkStatus();
}

// The launcher's own messages. Errors are dropped: there is nowhere left to
// report them.
void WriteAll(int fd, absl::string_view text) {
  while (!text.empty()) {
    const ssize_t n = write(fd, text.data(), text.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    text.remove_prefix(static_cast<size_t>(n));
  }
}

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

// Routes SIGCHLD and the passed-on signals to OnSignal for its lifetime, and
// restores the dispositions it found when destroyed. A passed-on signal that
// was ignored on entry (nohup, a background job of a non-interactive shell)
// stays ignored, in the launcher and in the ranks.
class SignalScope {
 public:
  SignalScope() = default;
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;
  ~SignalScope() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      sigaction(it->first, &it->second, nullptr);
    }
    g_wake_fd = -1;
  }

  absl::Status Install() {
    UniqueFd write_end;
    CZ_RETURN_IF_ERROR(MakePipe("the launcher's signals", &wake_, &write_end));
    CZ_RETURN_IF_ERROR(SetNonBlocking(wake_.get(), "the signal pipe"));
    CZ_RETURN_IF_ERROR(SetNonBlocking(write_end.get(), "the signal pipe"));
    wake_write_ = std::move(write_end);
    g_wake_fd = wake_write_.get();
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

  // Readable when a signal has arrived.
  int wake_fd() const { return wake_.get(); }

  void DrainWakeFd() const {
    char buffer[64];
    while (read(wake_.get(), buffer, sizeof(buffer)) > 0) {
    }
  }

  // Whether `sig` has arrived since the last call.
  static bool Take(int sig) {
    if (!g_pending[sig]) return false;
    g_pending[sig] = 0;
    return true;
  }

  bool IgnoredOnEntry(int sig) const { return ignored_on_entry_[sig]; }

 private:
  UniqueFd wake_;
  UniqueFd wake_write_;
  std::vector<std::pair<int, struct sigaction>> saved_;
  std::array<bool, NSIG> ignored_on_entry_{};
};

// What a forked child needs to become a rank; prepared before fork() so
// that the child only makes async-signal-safe calls.
struct ChildPlan {
  char* const* argv;
  // The rank's environment: the launcher's, plus its thread share.
  char* const* envp;
  // The write end of the rank's output pipe; -1 keeps the launcher's stdout
  // and stderr (rank 0).
  int output_fd;
  // /dev/null, for stdin: a rank outside the terminal's foreground process
  // group that read from it would be stopped (SIGTTIN).
  int stdin_fd;
  // Where the child reports a ChildFailure if it cannot exec.
  int status_fd;
  pid_t launcher;
  sigset_t mask;
  std::array<bool, NSIG> ignore{};
};

enum class ChildStage : int { kPdeathsig, kSetpgid, kDup2, kExec };

struct ChildFailure {
  ChildStage stage;
  int error;
};

// True if `pid` is in the stopped state ('T' or 't' in /proc/PID/stat) now.
bool IsStoppedNow(pid_t pid) {
  absl::StatusOr<std::string> stat =
      ReadFileToString(absl::StrCat("/proc/", pid, "/stat"), 4096);
  if (!stat.ok()) return false;
  // "PID (COMM) STATE ...": COMM may hold spaces and parentheses.
  const size_t paren = stat->rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat->size()) return false;
  const char state = (*stat)[paren + 2];
  return state == 'T' || state == 't';
}

// True if `pid` is stopped and still is 50 ms later. A rank stopped by
// SIGSTOP or held by a debugger stays stopped; a process watched by a
// ptrace-based monitor (some CI sandboxes) passes through 't' for
// microseconds at each system call, also while it exits, and must not be
// named as the reason its peers failed.
bool StaysStopped(pid_t pid) {
  for (int sample = 0; sample < 6; ++sample) {
    if (!IsStoppedNow(pid)) return false;
    if (sample < 5) absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

[[noreturn]] void FailChild(const ChildPlan& plan, ChildStage stage,
                            int error) {
  const ChildFailure failure{stage, error};
  const ssize_t ignored = write(plan.status_fd, &failure, sizeof(failure));
  (void)ignored;
  _exit(127);
}

[[noreturn]] void RunChild(const ChildPlan& plan) {
  // The dispositions the launcher found; then the signals blocked around
  // fork() are let through again.
  for (const int sig : kHandled) {
    struct sigaction action {};
    action.sa_handler = plan.ignore[sig] ? SIG_IGN : SIG_DFL;
    sigemptyset(&action.sa_mask);
    sigaction(sig, &action, nullptr);
  }
  sigprocmask(SIG_SETMASK, &plan.mask, nullptr);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
    FailChild(plan, ChildStage::kPdeathsig, errno);
  }
  // The launcher may have died between fork() and prctl(), before the
  // death signal was armed; then nobody would stop this rank.
  if (getppid() != plan.launcher) _exit(1);
  // A process group of its own, which the launcher signals as a whole: what
  // the child starts (a wrapper script's own children) goes with it. The
  // launcher makes the same call, so that the group exists whichever of
  // the two runs first.
  if (setpgid(0, 0) != 0) FailChild(plan, ChildStage::kSetpgid, errno);
  // Outside the terminal's foreground group, writing to it (rank 0 shares
  // the launcher's stdout) would stop the child under `stty tostop`.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGTTOU, &ignore, nullptr);
  if (dup2(plan.stdin_fd, STDIN_FILENO) < 0 ||
      (plan.output_fd >= 0 && (dup2(plan.output_fd, STDOUT_FILENO) < 0 ||
                               dup2(plan.output_fd, STDERR_FILENO) < 0))) {
    FailChild(plan, ChildStage::kDup2, errno);
  }
  execvpe(plan.argv[0], plan.argv, plan.envp);
  FailChild(plan, ChildStage::kExec, errno);
}

// Forks a child that becomes plan.argv (RunChild) in a process group of its
// own (its pid is the group's id), with the launcher's signals blocked
// around fork(): until the child has reset its dispositions, a signal would
// run OnSignal there and write into the launcher's signal pipe. `plan.mask`
// is filled here. Returns the pid.
absl::StatusOr<pid_t> ForkChild(ChildPlan& plan, const SignalScope& signals,
                                absl::string_view what) {
  plan.launcher = getpid();
  for (const int sig : kHandled) plan.ignore[sig] = signals.IgnoredOnEntry(sig);
  sigset_t handled;
  sigemptyset(&handled);
  for (const int sig : kHandled) sigaddset(&handled, sig);
  if (sigprocmask(SIG_BLOCK, &handled, &plan.mask) != 0) {
    return absl::ErrnoToStatus(errno, "sigprocmask");
  }
  const pid_t pid = fork();
  if (pid == 0) RunChild(plan);
  const int fork_errno = errno;
  // As the child does: whichever runs first makes the group, so that it
  // exists before the launcher signals it. EACCES (the child has exec'd,
  // so it made it) and ESRCH (it has exited) are fine.
  if (pid > 0) setpgid(pid, pid);
  sigprocmask(SIG_SETMASK, &plan.mask, nullptr);
  if (pid < 0) {
    return absl::ErrnoToStatus(fork_errno, absl::StrCat("fork for ", what));
  }
  return pid;
}

// Reads up to `size` bytes, retrying after EINTR, until EOF.
ssize_t ReadFully(int fd, void* data, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = read(fd, static_cast<char*>(data) + done, size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

struct Rank {
  // Also the id of the rank's process group, which every signal goes to.
  // Until the rank is reaped nobody else can have this pid or group id.
  pid_t pid = -1;
  // Started and not yet reaped.
  bool running = false;
  // The read end of the rank's stdout+stderr pipe (non-blocking); none for
  // rank 0, and closed at EOF.
  UniqueFd output;
  // The end of its output; trimmed to kKeptOutputBytes when it reaches
  // twice that, so that appending stays cheap.
  std::string kept;
  size_t dropped = 0;
};

// The launcher's environment, with CHUNKZERO_NUM_THREADS set to the ranks'
// share of the cores (ParallelThreadsShare) unless the user set it, and
// without LOCAL_RANK and LOCAL_WORLD_SIZE, which each rank gets its own of.
std::vector<std::string> RankEnvironment(int nproc) {
  std::vector<std::string> env;
  bool has_threads = false;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    has_threads |= absl::StartsWith(*entry, "CHUNKZERO_NUM_THREADS=");
    if (absl::StartsWith(*entry, "LOCAL_RANK=") ||
        absl::StartsWith(*entry, "LOCAL_WORLD_SIZE=")) {
      continue;
    }
    env.emplace_back(*entry);
  }
  if (!has_threads) {
    env.push_back(
        absl::StrCat("CHUNKZERO_NUM_THREADS=", ParallelThreadsShare(nproc)));
  }
  return env;
}

// `text` with `prefix` before each of its lines, each ending in a newline
// (the last one too); "" stays "".
std::string PrefixLines(absl::string_view prefix, absl::string_view text) {
  std::string out;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    absl::StrAppend(&out, prefix, text.substr(0, end), "\n");
    if (end == absl::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return out;
}

// One job: starts the ranks, then runs the poll loop over the signal pipe
// and the ranks' output pipes until every rank has been reaped.
class Job {
 public:
  Job(const LaunchOptions& options, std::string rendezvous,
      const SignalScope& signals)
      : options_(options),
        rendezvous_(std::move(rendezvous)),
        signals_(signals),
        ranks_(options.nproc),
        environment_(RankEnvironment(options.nproc)) {
    for (std::string& entry : environment_) envp_.push_back(entry.data());
    envp_.push_back(nullptr);
  }

  // Starts rank 0, 1, ... in turn. Stops early (and OK) when a rank fails
  // or the launcher gets a signal meanwhile: the loop then stops the rest.
  absl::Status Start() {
    null_ = UniqueFd(open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (null_.get() < 0) return absl::ErrnoToStatus(errno, "open /dev/null");
    for (int r = 0; r < options_.nproc; ++r) {
      CZ_RETURN_IF_ERROR(Step(/*timeout_ms=*/0));
      if (stopping_) break;
      CZ_RETURN_IF_ERROR(StartRank(r));
    }
    return absl::OkStatus();
  }

  // Stops every running rank because the launcher itself failed.
  void Abort() {
    if (!stopping_) StopRanks(SIGTERM);
  }

  // Runs until every started rank has been reaped. On a poll() failure the
  // ranks are SIGKILLed and reaped before the error is returned.
  absl::Status Wait() {
    while (AnyRunning()) {
      const absl::Status status = Step(PollTimeoutMs());
      if (!status.ok()) {
        KillAndReapAll();
        return status;
      }
    }
    return absl::OkStatus();
  }

  int exit_code() const { return exit_code_; }

 private:
  // The job's rank of this host's rank r.
  int GlobalRank(size_t r) const {
    return options_.node_rank * options_.nproc + static_cast<int>(r);
  }

  absl::Status StartRank(int r) {
    Rank& rank = ranks_[r];
    const int g = GlobalRank(r);
    std::vector<std::string> args = {
        options_.binary,
        absl::StrCat("--world_size=", options_.nnodes * options_.nproc),
        "--backend=gloo",
        absl::StrCat("--rank=", g),
        absl::StrCat("--rendezvous=", rendezvous_),
    };
    args.insert(args.end(), options_.args.begin(), options_.args.end());
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    std::string local_rank = absl::StrCat("LOCAL_RANK=", r);
    std::string local_size = absl::StrCat("LOCAL_WORLD_SIZE=", options_.nproc);
    std::vector<char*> envp = envp_;
    envp.insert(envp.end() - 1, {local_rank.data(), local_size.data()});

    UniqueFd output_read, output_write;
    if (g > 0) {
      const std::string what = absl::StrCat("rank ", g, "'s output");
      CZ_RETURN_IF_ERROR(MakePipe(what, &output_read, &output_write));
      CZ_RETURN_IF_ERROR(SetNonBlocking(output_read.get(), what));
    }
    UniqueFd status_read, status_write;
    CZ_RETURN_IF_ERROR(MakePipe(absl::StrCat("rank ", g, "'s exec status"),
                                &status_read, &status_write));

    ChildPlan plan;
    plan.argv = argv.data();
    plan.envp = envp.data();
    plan.output_fd = output_write.get();
    plan.stdin_fd = null_.get();
    plan.status_fd = status_write.get();
    CZ_ASSIGN_OR_RETURN(const pid_t pid,
                        ForkChild(plan, signals_, absl::StrCat("rank ", g)));
    rank.pid = pid;
    rank.running = true;
    rank.output = std::move(output_read);
    output_write.Reset();
    status_write.Reset();

    // EOF: execvp() succeeded and closed the close-on-exec pipe.
    ChildFailure failure{};
    const ssize_t n = ReadFully(status_read.get(), &failure, sizeof(failure));
    if (n < 0) {
      return absl::ErrnoToStatus(
          errno, absl::StrCat("reading rank ", g, "'s exec status"));
    }
    if (n == 0) return absl::OkStatus();
    // The child exits right after reporting.
    int wait_status = 0;
    while (waitpid(pid, &wait_status, 0) < 0 && errno == EINTR) {
    }
    rank.running = false;
    if (n != sizeof(failure)) {
      return absl::InternalError(
          absl::StrCat("rank ", g, " sent a partial exec status"));
    }
    switch (failure.stage) {
      case ChildStage::kPdeathsig:
        return absl::ErrnoToStatus(
            failure.error,
            absl::StrCat("prctl(PR_SET_PDEATHSIG) for rank ", g));
      case ChildStage::kSetpgid:
        return absl::ErrnoToStatus(failure.error,
                                   absl::StrCat("setpgid for rank ", g));
      case ChildStage::kDup2:
        return absl::ErrnoToStatus(failure.error,
                                   absl::StrCat("dup2 for rank ", g));
      case ChildStage::kExec:
        break;
    }
    return absl::ErrnoToStatus(
        failure.error,
        absl::StrCat("cannot execute ", options_.binary, " for rank ", g));
  }

  // One turn of the loop: wait for a signal, output or the kill deadline,
  // then act on what happened.
  absl::Status Step(int timeout_ms) {
    std::vector<pollfd> fds;
    std::vector<Rank*> readers;
    fds.push_back({signals_.wake_fd(), POLLIN, 0});
    for (Rank& rank : ranks_) {
      if (rank.output.get() < 0) continue;
      fds.push_back({rank.output.get(), POLLIN, 0});
      readers.push_back(&rank);
    }
    if (poll(fds.data(), fds.size(), timeout_ms) < 0) {
      if (errno != EINTR) return absl::ErrnoToStatus(errno, "poll");
    } else {
      if (fds[0].revents != 0) signals_.DrainWakeFd();
      for (size_t i = 0; i < readers.size(); ++i) {
        if (fds[i + 1].revents != 0) ReadOutput(*readers[i]);
      }
    }
    // Signals to the launcher first: when Ctrl-C reaches the launcher and
    // the ranks together, the job ends as interrupted, not as failed.
    for (const int sig : kPassedOn) {
      if (SignalScope::Take(sig)) OnLauncherSignal(sig);
    }
    if (SignalScope::Take(SIGTSTP)) Suspend();
    if (SignalScope::Take(SIGCONT)) Resume();
    SignalScope::Take(SIGCHLD);
    Reap();
    if (kill_at_.has_value() && Clock::now() >= *kill_at_) {
      kill_at_.reset();
      for (size_t r = 0; r < ranks_.size(); ++r) {
        if (!ranks_[r].running) continue;
        Report(absl::StrCat("launch: rank ", GlobalRank(r),
                            " did not exit within ",
                            Seconds(options_.grace_period), " of ",
                            SignalName(stop_signal_), "; sending SIGKILL\n"));
        SignalGroup(ranks_[r], SIGKILL);
      }
    }
    return absl::OkStatus();
  }

  int PollTimeoutMs() const {
    if (!kill_at_.has_value()) return -1;
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(*kill_at_ - Clock::now());
    return left.count() < 0 ? 0 : static_cast<int>(left.count());
  }

  void Reap() {
    for (size_t r = 0; r < ranks_.size(); ++r) {
      Rank& rank = ranks_[r];
      if (!rank.running) continue;
      // Seen to have exited, but not reaped yet: its pid, and with it its
      // group's id, cannot have been reused.
      siginfo_t info{};
      const int seen =
          waitid(P_PID, rank.pid, &info, WEXITED | WNOHANG | WNOWAIT);
      if (seen == 0 && info.si_pid == 0) continue;
      int wait_status = 0;
      pid_t pid = -1;
      if (seen == 0) {
        // What the rank started and left behind (a wrapper's children)
        // does not outlive it.
        SignalGroup(rank, SIGKILL);
        while ((pid = waitpid(rank.pid, &wait_status, 0)) < 0 &&
               errno == EINTR) {
        }
      }
      rank.running = false;
      if (pid < 0) {
        // Only if someone else reaped it; its status is lost.
        Report(absl::StrCat("launch: waitpid for rank ", GlobalRank(r), ": ",
                            strerror(errno), "\n"));
        if (!stopping_) {
          exit_code_ = 1;
          StopRanks(SIGTERM);
        }
        continue;
      }
      OnRankExit(r, wait_status);
    }
  }

  void OnRankExit(size_t r, int wait_status) {
    if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0) return;
    if (stopping_) return;
    Rank& rank = ranks_[r];
    // It has exited, so what it wrote is in the pipe already.
    DrainOutput(rank);
    if (rank.kept.size() > kKeptOutputBytes) {
      const size_t extra = rank.kept.size() - kKeptOutputBytes;
      rank.kept.erase(0, extra);
      rank.dropped += extra;
    }
    const int g = GlobalRank(r);
    std::string report = absl::StrCat(
        "launch: rank ", g, " failed (", DescribeWaitStatus(wait_status), ")",
        options_.nnodes > 1 ? absl::StrCat(" on node ", options_.node_rank)
                            : "",
        "\n");
    if (rank.dropped > 0) {
      absl::StrAppend(&report, "launch: the first ", rank.dropped,
                      " bytes of rank ", g, "'s output were dropped\n");
    }
    absl::StrAppend(&report,
                    PrefixLines(absl::StrCat("[rank ", g, "] "), rank.kept));
    // A stopped rank (SIGSTOP, a debugger) is the likely reason its peers
    // timed out, and their messages cannot always name it.
    for (size_t other = 0; other < ranks_.size(); ++other) {
      if (other != r && ranks_[other].running &&
          StaysStopped(ranks_[other].pid)) {
        absl::StrAppend(&report, "launch: rank ", GlobalRank(other),
                        " was stopped (SIGSTOP or a debugger) when rank ", g,
                        " failed\n");
      }
    }
    Report(report);
    exit_code_ = ExitCodeOf(wait_status);
    StopRanks(SIGTERM);
  }

  void OnLauncherSignal(int sig) {
    if (!stopping_) {
      Report(absl::StrCat("launch: got ", SignalName(sig),
                          "; passing it on to the ranks\n"));
      exit_code_ = 128 + sig;
      StopRanks(sig);
      return;
    }
    // Someone is in a hurry: a second Ctrl-C does not wait out the grace
    // period.
    Report(absl::StrCat("launch: got ", SignalName(sig),
                        " while stopping; sending SIGKILL to the ranks\n"));
    kill_at_.reset();
    for (Rank& rank : ranks_) {
      if (rank.running) SignalGroup(rank, SIGKILL);
    }
  }

  // Ctrl-Z: the terminal stops its foreground process group, the
  // launcher's; the ranks lead groups of their own. So the launcher stops
  // them as the terminal would have, then itself; the SIGCONT that resumes
  // it (`fg`, `bg`) resumes them (Resume). Not while the job is ending.
  void Suspend() {
    if (stopping_) return;
    for (Rank& rank : ranks_) {
      if (rank.running) SignalGroup(rank, SIGTSTP);
    }
    suspended_ = true;
    SignalScope::Take(SIGCONT);
    raise(SIGSTOP);
  }

  // Only ranks that Suspend stopped are resumed: a SIGCONT sent to the
  // launcher for another reason leaves a rank stopped in a debugger alone.
  void Resume() {
    if (!suspended_) return;
    suspended_ = false;
    for (Rank& rank : ranks_) {
      if (rank.running) SignalGroup(rank, SIGCONT);
    }
  }

  // `sig` to every process in the rank's process group.
  // REQUIRES: rank.running (the group's id is still the rank's).
  static void SignalGroup(const Rank& rank, int sig) { kill(-rank.pid, sig); }

  // Sends `sig` and SIGCONT (a stopped rank acts on nothing else) to every
  // running rank, and arms the SIGKILL deadline.
  void StopRanks(int sig) {
    stopping_ = true;
    stop_signal_ = sig;
    for (Rank& rank : ranks_) {
      if (!rank.running) continue;
      SignalGroup(rank, sig);
      SignalGroup(rank, SIGCONT);
    }
    kill_at_ = Clock::now() + options_.grace_period;
  }

  bool AnyRunning() const {
    for (const Rank& rank : ranks_) {
      if (rank.running) return true;
    }
    return false;
  }

  void KillAndReapAll() {
    for (Rank& rank : ranks_) {
      if (!rank.running) continue;
      SignalGroup(rank, SIGKILL);
      int wait_status = 0;
      while (waitpid(rank.pid, &wait_status, 0) < 0 && errno == EINTR) {
      }
      rank.running = false;
    }
  }

  // One read; returns false at EOF or on an error (the pipe is then closed)
  // and when nothing is there.
  bool ReadOutput(Rank& rank) {
    const ssize_t n = read(rank.output.get(), buffer_.data(), buffer_.size());
    if (n > 0) {
      rank.kept.append(buffer_.data(), static_cast<size_t>(n));
      if (rank.kept.size() >= 2 * kKeptOutputBytes) {
        const size_t extra = rank.kept.size() - kKeptOutputBytes;
        rank.kept.erase(0, extra);
        rank.dropped += extra;
      }
      return true;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return false;
    rank.output.Reset();
    return false;
  }

  // Reads what is in the pipe now. Does not wait for EOF: a process the
  // rank started may still hold the pipe open.
  void DrainOutput(Rank& rank) {
    while (rank.output.get() >= 0 && ReadOutput(rank)) {
    }
  }

  void Report(absl::string_view text) const {
    WriteAll(options_.report_fd, text);
  }

  const LaunchOptions& options_;
  const std::string rendezvous_;
  const SignalScope& signals_;
  std::vector<Rank> ranks_;
  // Set by the first failure or signal; from then on the job only ends.
  bool stopping_ = false;
  // Between Suspend and Resume.
  bool suspended_ = false;
  // /dev/null, every rank's stdin.
  UniqueFd null_;
  int stop_signal_ = SIGTERM;
  int exit_code_ = 0;
  // When the ranks still running get SIGKILL.
  std::optional<Clock::time_point> kill_at_;
  // Every rank's environment, and the pointers execvpe takes (built before
  // fork(): the child may only make async-signal-safe calls).
  std::vector<std::string> environment_;
  std::vector<char*> envp_;
  std::array<char, 64 * 1024> buffer_;
};

// The Redis server node 0 runs for --store=redis: started (and answering)
// before the ranks, stopped after them, and gone with the launcher
// (PR_SET_PDEATHSIG) if that dies first.
class StoreServerProcess {
 public:
  static absl::StatusOr<StoreServerProcess> StartRedis(
      const LaunchOptions& options, const SignalScope& signals) {
    const std::string port = absl::StrCat(options.master_port);
    // Else the check below would take another server for ours.
    if (AcceptsTcpOnLoopback(options.master_port)) {
      return absl::UnavailableError(absl::StrCat(
          "--store=redis: something already answers on port ", port,
          " (another job's store?); choose another --master_port"));
    }
    // Only on the address the ranks dial (and loopback, for the check
    // below): the store has no password, so it listens no wider than it
    // must. Redis 7 also refuses CONFIG changes to files, DEBUG and MODULE
    // by default.
    const std::string bind_host(
        absl::StripSuffix(absl::StripPrefix(options.master_addr, "["), "]"));
    std::vector<std::string> args = {
        options.redis_server,
        "--port",
        port,
        "--bind",
        bind_host == "127.0.0.1" || bind_host == "localhost"
            ? bind_host
            : absl::StrCat(bind_host, " 127.0.0.1"),
        "--protected-mode",
        "no",
        "--save",
        "",
        "--appendonly",
        "no",
        "--daemonize",
        "no"};
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    UniqueFd null(open("/dev/null", O_RDWR | O_CLOEXEC));
    if (null.get() < 0) return absl::ErrnoToStatus(errno, "open /dev/null");
    UniqueFd status_read, status_write;
    CZ_RETURN_IF_ERROR(
        MakePipe("redis-server's exec status", &status_read, &status_write));
    ChildPlan plan;
    plan.argv = argv.data();
    plan.envp = environ;
    plan.output_fd = null.get();
    plan.stdin_fd = null.get();
    plan.status_fd = status_write.get();
    CZ_ASSIGN_OR_RETURN(const pid_t pid,
                        ForkChild(plan, signals, "redis-server"));
    StoreServerProcess server(pid);
    status_write.Reset();
    ChildFailure failure{};
    if (ReadFully(status_read.get(), &failure, sizeof(failure)) ==
        static_cast<ssize_t>(sizeof(failure))) {
      return absl::UnavailableError(absl::StrCat(
          "--store=redis: cannot execute ", options.redis_server, ": ",
          strerror(failure.error),
          " (Debian's redis-server package; tools/setup.sh installs it)"));
    }
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (!AcceptsTcpOnLoopback(options.master_port)) {
      int wait_status = 0;
      if (waitpid(pid, &wait_status, WNOHANG) == pid) {
        server.pid_ = -1;
        return absl::UnavailableError(
            absl::StrCat("--store=redis: ", options.redis_server, " on port ",
                         port, " exited (", DescribeWaitStatus(wait_status),
                         ") before answering: is the port taken, or is "
                         "--master_addr=",
                         options.master_addr,
                         " not an address of this host (node 0 runs the "
                         "store)?"));
      }
      if (absl::Now() > deadline) {
        return absl::UnavailableError(
            absl::StrCat("--store=redis: ", options.redis_server,
                         " did not answer on port ", port, " within 10s"));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return server;
  }

  StoreServerProcess(StoreServerProcess&& other) noexcept
      : pid_(std::exchange(other.pid_, -1)) {}
  StoreServerProcess& operator=(StoreServerProcess&&) = delete;
  // SIGTERM, and SIGKILL if it has not exited 2 s later, to its process
  // group (ForkChild), reaped only after that.
  ~StoreServerProcess() {
    if (pid_ < 0) return;
    kill(-pid_, SIGTERM);
    const absl::Time deadline = absl::Now() + absl::Seconds(2);
    int wait_status = 0;
    while (waitpid(pid_, &wait_status, WNOHANG) == 0) {
      if (absl::Now() > deadline) {
        kill(-pid_, SIGKILL);
        while (waitpid(pid_, &wait_status, 0) < 0 && errno == EINTR) {
        }
        return;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
  }

 private:
  explicit StoreServerProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_;
};

// What several hosts need, as ParseLaunchArgs documents.
absl::Status CheckHosts(const LaunchOptions& o) {
  if (o.nnodes < 1 || o.node_rank < 0 || o.node_rank >= o.nnodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--node_rank=", o.node_rank,
                     " is not in [0, --nnodes=", o.nnodes, ")"));
  }
  if (!o.master_addr.empty() && !o.rendezvous.empty()) {
    return absl::InvalidArgumentError(
        "--master_addr and --rendezvous both say where the ranks meet: give "
        "one");
  }
  if (o.nnodes > 1 && o.master_addr.empty() && o.rendezvous.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--nnodes=", o.nnodes,
        ": the hosts need a place to meet: give --master_addr (node 0's "
        "address) or --rendezvous"));
  }
  if (o.store == StoreKind::kRedis && o.master_addr.empty()) {
    return absl::InvalidArgumentError(
        "--store=redis: node 0 starts redis-server at --master_addr and "
        "--master_port; give --master_addr");
  }
  if (int64_t{o.nnodes} * o.nproc > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--nnodes=", o.nnodes, " hosts of ", o.nproc,
        " ranks each is more than the 1048576 ranks a job may have"));
  }
  if (o.master_port < 1 || o.master_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--master_port=", o.master_port, " is not in [1, 65535]"));
  }
  return absl::OkStatus();
}

// The rendezvous the ranks get when the options name one; "" for a fresh
// directory.
std::string NamedRendezvous(const LaunchOptions& o) {
  if (!o.rendezvous.empty()) return o.rendezvous;
  if (o.master_addr.empty()) return "";
  const std::string host = absl::StrContains(o.master_addr, ':') &&
                                   !absl::StartsWith(o.master_addr, "[")
                               ? absl::StrCat("[", o.master_addr, "]")
                               : o.master_addr;
  if (o.store == StoreKind::kRedis) {
    return absl::StrCat("redis://", host, ":", o.master_port, "/", o.run_id);
  }
  return absl::StrCat("tcp://", host, ":", o.master_port);
}

// The flags the launcher gives every rank (StartRank): among ARGS they
// would come later and win, and the ranks would not meet.
struct OwnedFlag {
  absl::string_view name;
  absl::string_view refusal;
};
constexpr OwnedFlag kOwnedFlags[] = {
    {"rank",
     "--rank is set by the launcher (--node_rank x NPROC + the local rank); "
     "drop it from the rank arguments"},
    {"world_size",
     "--world_size is set by the launcher (NPROC x --nnodes); drop it from "
     "the rank arguments"},
    {"rendezvous",
     "--rendezvous is set by the launcher; drop it from the rank arguments "
     "(the launcher's own --rendezvous, before NPROC, chooses it)"},
};

// The name of the flag `arg` gives as Abseil's and gflags' parsers read it
// (-NAME, --NAME, -NAME=VALUE, --NAME=VALUE); "" if it is no flag.
absl::string_view FlagName(absl::string_view arg) {
  if (!absl::ConsumePrefix(&arg, "-")) return "";
  absl::ConsumePrefix(&arg, "-");
  return arg.substr(0, arg.find('='));
}

// InvalidArgument naming the first of kOwnedFlags among the rank arguments,
// in any spelling; what follows "--" is not flags.
absl::Status CheckRankArgs(absl::Span<const std::string> args) {
  for (const std::string& arg : args) {
    if (arg == "--") break;
    const absl::string_view name = FlagName(arg);
    for (const OwnedFlag& owned : kOwnedFlags) {
      if (name == owned.name) {
        return absl::InvalidArgumentError(owned.refusal);
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> MakeRendezvousDir() {
  const char* tmpdir = std::getenv("TMPDIR");
  const std::string pattern =
      absl::StrCat(tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp",
                   "/chunkzero-rendezvous.XXXXXX");
  std::string dir = pattern;
  if (mkdtemp(dir.data()) == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat("mkdtemp ", pattern));
  }
  return dir;
}

}  // namespace

absl::StatusOr<LaunchOptions> ParseLaunchArgs(
    absl::Span<const std::string> args) {
  LaunchOptions options;
  size_t i = 0;
  // "--name=N" with N a whole number in [min, max].
  auto whole = [](absl::string_view flag, absl::string_view value, int min,
                  int max, int* out) -> absl::Status {
    if (!absl::SimpleAtoi(value, out) || *out < min || *out > max) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, " takes a whole number from ", min, " to ",
                       max, ", not \"", value, "\""));
    }
    return absl::OkStatus();
  };
  for (; i < args.size() && absl::StartsWith(args[i], "--"); ++i) {
    absl::string_view value = args[i];
    if (absl::ConsumePrefix(&value, "--nnodes=")) {
      CZ_RETURN_IF_ERROR(whole("nnodes", value, 1, 65536, &options.nnodes));
      continue;
    }
    if (absl::ConsumePrefix(&value, "--node_rank=")) {
      CZ_RETURN_IF_ERROR(
          whole("node_rank", value, 0, 65535, &options.node_rank));
      continue;
    }
    if (absl::ConsumePrefix(&value, "--master_port=")) {
      CZ_RETURN_IF_ERROR(
          whole("master_port", value, 1, 65535, &options.master_port));
      continue;
    }
    if (absl::ConsumePrefix(&value, "--master_addr=")) {
      options.master_addr = std::string(value);
      if (value.empty()) {
        return absl::InvalidArgumentError("--master_addr is empty");
      }
      continue;
    }
    if (absl::ConsumePrefix(&value, "--store=")) {
      if (value == "tcp") {
        options.store = StoreKind::kTcp;
      } else if (value == "redis") {
        options.store = StoreKind::kRedis;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("--store takes tcp or redis, not \"", value, "\""));
      }
      continue;
    }
    if (absl::ConsumePrefix(&value, "--run_id=")) {
      if (value.empty() || value.find_first_of(" \t\n/") != value.npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("--run_id takes a name without spaces or '/', not \"",
                         value, "\""));
      }
      options.run_id = std::string(value);
      continue;
    }
    if (absl::ConsumePrefix(&value, "--rendezvous=")) {
      if (value.empty()) {
        return absl::InvalidArgumentError("--rendezvous is empty");
      }
      options.rendezvous = std::string(value);
      continue;
    }
    if (absl::ConsumePrefix(&value, "--redis_server=")) {
      options.redis_server = std::string(value);
      continue;
    }
    if (absl::ConsumePrefix(&value, "--grace_period_s=")) {
      double seconds = 0;
      if (!absl::SimpleAtod(value, &seconds) || !(seconds >= 0) ||
          seconds > 86400) {
        return absl::InvalidArgumentError(
            absl::StrCat("--grace_period_s takes seconds from 0 to 86400, "
                         "not \"",
                         value, "\""));
      }
      options.grace_period =
          std::chrono::milliseconds(std::llround(seconds * 1000));
      continue;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown flag ", args[i], " (the launcher's flags come before NPROC)"));
  }
  if (i == args.size()) return absl::InvalidArgumentError("missing NPROC");
  if (!absl::SimpleAtoi(args[i], &options.nproc) || options.nproc < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NPROC must be a whole number >= 1, not \"", args[i], "\""));
  }
  ++i;
  if (i == args.size() || args[i].empty()) {
    return absl::InvalidArgumentError("missing BINARY");
  }
  options.binary = args[i++];
  options.args.assign(args.begin() + i, args.end());
  CZ_RETURN_IF_ERROR(CheckRankArgs(options.args));
  CZ_RETURN_IF_ERROR(CheckHosts(options));
  return options;
}

absl::StatusOr<int> RunJob(const LaunchOptions& options) {
  if (options.nproc < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("nproc must be >= 1, not ", options.nproc));
  }
  if (options.binary.empty()) {
    return absl::InvalidArgumentError("no binary to run");
  }
  if (options.grace_period.count() < 0) {
    return absl::InvalidArgumentError("the grace period is negative");
  }
  CZ_RETURN_IF_ERROR(CheckHosts(options));
  // Handlers first, so that no signal can end the launcher between creating
  // the rendezvous directory and removing it.
  SignalScope signals;
  CZ_RETURN_IF_ERROR(signals.Install());
  std::string dir;
  std::string rendezvous = NamedRendezvous(options);
  if (rendezvous.empty()) {
    CZ_ASSIGN_OR_RETURN(dir, MakeRendezvousDir());
    rendezvous = dir + "/store";
  }
  absl::Status status;
  int exit_code = 0;
  {
    // Node 0's Redis server, for the whole job.
    std::optional<StoreServerProcess> redis;
    if (options.store == StoreKind::kRedis && options.node_rank == 0 &&
        options.rendezvous.empty()) {
      absl::StatusOr<StoreServerProcess> started =
          StoreServerProcess::StartRedis(options, signals);
      if (started.ok()) {
        redis.emplace(*std::move(started));
      } else {
        status = started.status();
      }
    }
    if (status.ok()) {
      Job job(options, rendezvous, signals);
      status = job.Start();
      if (!status.ok()) job.Abort();
      const absl::Status waited = job.Wait();
      if (status.ok()) status = waited;
      exit_code = job.exit_code();
    }
  }
  if (!dir.empty()) {
    std::error_code error;
    std::filesystem::remove_all(dir, error);
    if (error) {
      WriteAll(
          options.report_fd,
          absl::StrCat("launch: could not remove the rendezvous directory ",
                       dir, ": ", error.message(), "\n"));
    }
  }
  if (!status.ok()) return status;
  return exit_code;
}

int ExitCodeOf(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

std::string DescribeWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) {
    return absl::StrCat("exit code ", WEXITSTATUS(wait_status));
  }
  if (WIFSIGNALED(wait_status)) {
    return absl::StrCat("killed by signal ", SignalName(WTERMSIG(wait_status)));
  }
  return absl::StrCat("wait status ", wait_status);
}

}  // namespace launch
}  // namespace chunkzero
