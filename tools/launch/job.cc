#include "tools/launch/job.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/file.h"
#include "base/parallel_for.h"
#include "base/status_macros.h"

namespace chunkzero {
namespace launch {
namespace {

// "5s", "0.5s".
std::string Seconds(std::chrono::milliseconds d) {
  return absl::StrCat(d.count() / 1000.0, "s");
}

absl::Status SetNonBlocking(int fd, absl::string_view what) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("fcntl O_NONBLOCK on ", what));
  }
  return absl::OkStatus();
}

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

}  // namespace

Job::Job(const LaunchOptions& options, std::string rendezvous,
         const SignalScope& signals)
    : options_(options),
      rendezvous_(std::move(rendezvous)),
      signals_(signals),
      ranks_(options.nproc) {
  // The ranks' share of the cores (ParallelThreadsShare) unless the user
  // set it; LOCAL_RANK and LOCAL_WORLD_SIZE, each rank's own, replace the
  // launcher's (StartRank).
  if (std::getenv("CHUNKZERO_NUM_THREADS") == nullptr) {
    environment_.push_back(absl::StrCat("CHUNKZERO_NUM_THREADS=",
                                        ParallelThreadsShare(options.nproc)));
  }
  // What the launcher found ignored stays ignored in the ranks (SIGCHLD
  // and SIGCONT the launcher catches all the same). Outside the terminal's
  // foreground group, writing to it (rank 0 shares the launcher's stdout)
  // would stop a rank under `stty tostop`: SIGTTOU is ignored.
  ignored_signals_.push_back(SIGTTOU);
  for (const int sig : kHandled) {
    if (signals.IgnoredOnEntry(sig)) ignored_signals_.push_back(sig);
  }
}

absl::Status Job::Start() {
  for (int r = 0; r < options_.nproc; ++r) {
    CZ_RETURN_IF_ERROR(Step(/*timeout_ms=*/0));
    if (stopping_) break;
    CZ_RETURN_IF_ERROR(StartRank(r));
  }
  return absl::OkStatus();
}

void Job::Abort() {
  if (!stopping_) StopRanks(SIGTERM);
}

absl::Status Job::Wait() {
  while (AnyRunning()) {
    const absl::Status status = Step(PollTimeoutMs());
    if (!status.ok()) {
      KillAndReapAll();
      return status;
    }
  }
  return absl::OkStatus();
}

int Job::GlobalRank(size_t r) const {
  return options_.node_rank * options_.nproc + static_cast<int>(r);
}

absl::Status Job::StartRank(int r) {
  const int g = GlobalRank(r);
  SpawnOptions spawn;
  spawn.argv = {
      options_.binary,
      absl::StrCat("--world_size=", options_.nnodes * options_.nproc),
      "--backend=gloo",
      absl::StrCat("--rank=", g),
      absl::StrCat("--rendezvous=", rendezvous_),
  };
  spawn.argv.insert(spawn.argv.end(), options_.args.begin(),
                    options_.args.end());
  spawn.name = absl::StrCat("rank ", g);
  spawn.env = environment_;
  spawn.env.push_back(absl::StrCat("LOCAL_RANK=", r));
  spawn.env.push_back(absl::StrCat("LOCAL_WORLD_SIZE=", options_.nproc));
  // A rank outside the terminal's foreground process group that read from
  // it would be stopped (SIGTTIN).
  spawn.stdin_from = Stdio::Null();
  // The job's rank 0 keeps the launcher's stdout and stderr.
  if (g > 0) {
    spawn.stdout_to = Stdio::Pipe();
    spawn.stderr_to = Stdio::SameAsStdout();
  }
  // What the rank starts (a wrapper script's own children) goes with it.
  spawn.new_process_group = true;
  spawn.parent_death_signal = SIGKILL;
  spawn.ignored_signals = ignored_signals_;
  Rank& rank = ranks_[r];
  CZ_ASSIGN_OR_RETURN(rank.process, Subprocess::Spawn(spawn));
  if (g > 0) {
    CZ_RETURN_IF_ERROR(SetNonBlocking(rank.process.pipe_fd(STDOUT_FILENO),
                                      absl::StrCat("rank ", g, "'s output")));
  }
  return absl::OkStatus();
}

absl::Status Job::Step(int timeout_ms) {
  std::vector<pollfd> fds;
  std::vector<Rank*> readers;
  fds.push_back({signals_.wake_fd(), POLLIN, 0});
  for (Rank& rank : ranks_) {
    const int output = rank.process.pipe_fd(STDOUT_FILENO);
    if (output < 0) continue;
    fds.push_back({output, POLLIN, 0});
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
      if (!ranks_[r].process.running()) continue;
      Report(absl::StrCat("launch: rank ", GlobalRank(r),
                          " did not exit within ",
                          Seconds(options_.grace_period), " of ",
                          SignalName(stop_signal_), "; sending SIGKILL\n"));
      ranks_[r].process.SignalGroup(SIGKILL).IgnoreError();
    }
  }
  return absl::OkStatus();
}

int Job::PollTimeoutMs() const {
  if (!kill_at_.has_value()) return -1;
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(*kill_at_ - Clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

void Job::Reap() {
  for (size_t r = 0; r < ranks_.size(); ++r) {
    Rank& rank = ranks_[r];
    if (!rank.process.running()) continue;
    // Seen to have exited, then reaped after what it started and left
    // behind in its group (a wrapper's children) has been SIGKILLed.
    absl::StatusOr<bool> exited = rank.process.HasExited();
    if (exited.ok() && !*exited) continue;
    absl::StatusOr<ExitStatus> end =
        exited.ok() ? rank.process.Reap() : exited.status();
    if (!end.ok()) {
      // Only if someone else reaped it; its status is lost.
      Report(absl::StrCat("launch: ", end.status().message(), "\n"));
      if (!stopping_) {
        exit_code_ = 1;
        StopRanks(SIGTERM);
      }
      continue;
    }
    OnRankExit(r, *end);
  }
}

void Job::OnRankExit(size_t r, ExitStatus end) {
  if (end.success() || stopping_) return;
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
      "launch: rank ", g, " failed (", end.ToString(), ")",
      options_.nnodes > 1 ? absl::StrCat(" on node ", options_.node_rank) : "",
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
    const Subprocess& process = ranks_[other].process;
    if (other != r && process.running() && StaysStopped(process.pid())) {
      absl::StrAppend(&report, "launch: rank ", GlobalRank(other),
                      " was stopped (SIGSTOP or a debugger) when rank ", g,
                      " failed\n");
    }
  }
  Report(report);
  exit_code_ = end.ShellCode();
  StopRanks(SIGTERM);
}

void Job::OnLauncherSignal(int sig) {
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
    if (rank.process.running()) rank.process.SignalGroup(SIGKILL).IgnoreError();
  }
}

// Ctrl-Z: the terminal stops its foreground process group, the launcher's;
// the ranks lead groups of their own. So the launcher stops them as the
// terminal would have, then itself; the SIGCONT that resumes it (`fg`,
// `bg`) resumes them (Resume). Not while the job is ending.
void Job::Suspend() {
  if (stopping_) return;
  for (Rank& rank : ranks_) {
    if (rank.process.running()) rank.process.SignalGroup(SIGTSTP).IgnoreError();
  }
  suspended_ = true;
  SignalScope::Take(SIGCONT);
  raise(SIGSTOP);
}

// Only ranks that Suspend stopped are resumed: a SIGCONT sent to the
// launcher for another reason leaves a rank stopped in a debugger alone.
void Job::Resume() {
  if (!suspended_) return;
  suspended_ = false;
  for (Rank& rank : ranks_) {
    if (rank.process.running()) rank.process.SignalGroup(SIGCONT).IgnoreError();
  }
}

void Job::StopRanks(int sig) {
  stopping_ = true;
  stop_signal_ = sig;
  for (Rank& rank : ranks_) {
    if (!rank.process.running()) continue;
    rank.process.SignalGroup(sig).IgnoreError();
    rank.process.SignalGroup(SIGCONT).IgnoreError();
  }
  kill_at_ = Clock::now() + options_.grace_period;
}

bool Job::AnyRunning() const {
  for (const Rank& rank : ranks_) {
    if (rank.process.running()) return true;
  }
  return false;
}

void Job::KillAndReapAll() {
  for (Rank& rank : ranks_) {
    if (rank.process.running()) rank.process.Kill().IgnoreError();
  }
}

// One read; returns false at EOF or on an error (the pipe is then closed)
// and when nothing is there.
bool Job::ReadOutput(Rank& rank) {
  const ssize_t n =
      read(rank.process.pipe_fd(STDOUT_FILENO), buffer_.data(), buffer_.size());
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
  rank.process.ClosePipe(STDOUT_FILENO);
  return false;
}

// Reads what is in the pipe now. Does not wait for EOF: a process the rank
// started may still hold the pipe open.
void Job::DrainOutput(Rank& rank) {
  while (rank.process.pipe_fd(STDOUT_FILENO) >= 0 && ReadOutput(rank)) {
  }
}

// The launcher's own messages. Errors are dropped: there is nowhere left to
// report them.
void Job::Report(absl::string_view text) const {
  WriteAll(options_.report_fd, text.data(), text.size(), "the report")
      .IgnoreError();
}

}  // namespace launch
}  // namespace chunkzero
