#include "base/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"

extern char** environ;

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

namespace chunkzero {
namespace {

// The step of the child's start that failed, reported through the status
// pipe with its errno.
enum class Stage : int { kPdeathsig, kSetpgid, kStdio, kChdir, kExec };

struct Failure {
  Stage stage;
  int error;
};

// Everything the forked child needs, made before fork(): after it the child
// only makes async-signal-safe calls.
struct Plan {
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  const char* working_dir = nullptr;  // nullptr: stay.
  // What becomes the child's fd i; -1 leaves it as it is.
  std::array<int, 3> source = {-1, -1, -1};
  bool stderr_same_as_stdout = false;
  bool new_process_group = false;
  int death_signal = 0;
  bool close_other_fds = false;
  int max_fd = 0;  // For closing descriptors without close_range().
  pid_t parent = -1;
  sigset_t mask;  // The signal mask before fork(), the child's.
  std::array<bool, NSIG> ignore{};
  int status_fd = -1;
};

[[noreturn]] void FailChild(const Plan& plan, Stage stage, int error) {
  const Failure failure{stage, error};
  const ssize_t ignored = write(plan.status_fd, &failure, sizeof(failure));
  (void)ignored;
  _exit(127);
}

[[noreturn]] void RunChild(const Plan& plan) {
  // No handler of the parent's may run here (it could touch the parent's
  // locks or write into its pipes): caught signals get their default
  // actions back before the signals blocked around fork() are let through.
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) != 0) continue;  // Reserved ones.
    const bool caught =
        (old.sa_flags & SA_SIGINFO) != 0 ||
        (old.sa_handler != SIG_IGN && old.sa_handler != SIG_DFL);
    if (!caught && !plan.ignore[sig]) continue;
    struct sigaction action {};
    action.sa_handler = plan.ignore[sig] ? SIG_IGN : SIG_DFL;
    sigemptyset(&action.sa_mask);
    sigaction(sig, &action, nullptr);
  }
  sigprocmask(SIG_SETMASK, &plan.mask, nullptr);
  if (plan.death_signal != 0) {
    if (prctl(PR_SET_PDEATHSIG, plan.death_signal) != 0) {
      FailChild(plan, Stage::kPdeathsig, errno);
    }
    // The parent may have died between fork() and prctl(), before the
    // death signal was armed; then nobody would stop this child.
    if (getppid() != plan.parent) _exit(127);
  }
  // The parent makes the same call, so that the group exists whichever of
  // the two runs first.
  if (plan.new_process_group && setpgid(0, 0) != 0) {
    FailChild(plan, Stage::kSetpgid, errno);
  }
  // Sources among 0, 1 and 2 move out of the way first (close-on-exec), so
  // that no dup2() below overwrites one that a later one reads.
  std::array<int, 3> source = plan.source;
  for (int& fd : source) {
    if (fd >= 0 && fd < 3) {
      fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
      if (fd < 0) FailChild(plan, Stage::kStdio, errno);
    }
  }
  for (int target = 0; target < 3; ++target) {
    if (source[target] >= 0 && dup2(source[target], target) < 0) {
      FailChild(plan, Stage::kStdio, errno);
    }
  }
  if (plan.stderr_same_as_stdout && dup2(STDOUT_FILENO, STDERR_FILENO) < 0) {
    FailChild(plan, Stage::kStdio, errno);
  }
  if (plan.working_dir != nullptr && chdir(plan.working_dir) != 0) {
    FailChild(plan, Stage::kChdir, errno);
  }
  if (plan.close_other_fds) {
    // Close-on-exec rather than closed: the status pipe must stay open
    // until exec.
    bool done = false;
#ifdef SYS_close_range
    done = syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) == 0;
#endif
    for (int fd = 3; !done && fd < plan.max_fd; ++fd) {
      fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
  }
  execvpe(plan.argv[0], plan.argv, plan.envp);
  FailChild(plan, Stage::kExec, errno);
}

// Owns the descriptors Spawn opens.
class OwnedFd {
 public:
  OwnedFd() = default;
  explicit OwnedFd(int fd) : fd_(fd) {}
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  ~OwnedFd() { Reset(); }
  int get() const { return fd_; }
  int Release() { return std::exchange(fd_, -1); }
  void Reset(int fd = -1) {
    if (fd_ >= 0) close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

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

// waitpid() for `pid` (retrying after EINTR); errno's value, 0 on success.
int WaitPid(pid_t pid, int* wait_status) {
  while (waitpid(pid, wait_status, 0) < 0) {
    if (errno != EINTR) return errno;
  }
  return 0;
}

absl::string_view EnvName(absl::string_view entry) {
  return entry.substr(0, entry.find('='));
}

// This process's environment with `additions` replacing the entries of
// their names.
std::vector<std::string> ChildEnvironment(
    const std::vector<std::string>& additions) {
  std::vector<std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    env.emplace_back(*entry);
  }
  for (const std::string& addition : additions) {
    const absl::string_view name = EnvName(addition);
    env.erase(std::remove_if(env.begin(), env.end(),
                             [&](const std::string& entry) {
                               return EnvName(entry) == name;
                             }),
              env.end());
    env.push_back(addition);
  }
  return env;
}

absl::Status CheckOptions(const SpawnOptions& o, absl::string_view name) {
  if (o.argv.empty() || o.argv[0].empty()) {
    return absl::InvalidArgumentError("no program to run");
  }
  auto has_nul = [](absl::string_view s) {
    return s.find('\0') != absl::string_view::npos;
  };
  for (size_t i = 0; i < o.argv.size(); ++i) {
    if (has_nul(o.argv[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("argument ", i, " of ", name, " holds a NUL byte: \"",
                       absl::CHexEscape(o.argv[i]), "\""));
    }
  }
  for (const std::string& entry : o.env) {
    if (has_nul(entry) || EnvName(entry).empty() ||
        EnvName(entry).size() == entry.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("environment entry \"", absl::CHexEscape(entry),
                       "\" for ", name, " is not NAME=VALUE"));
    }
  }
  if (has_nul(o.working_dir)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the working directory of ", name, " holds a NUL byte"));
  }
  const Stdio* streams[3] = {&o.stdin_from, &o.stdout_to, &o.stderr_to};
  for (int i = 0; i < 3; ++i) {
    const Stdio& s = *streams[i];
    if (s.kind() == Stdio::Kind::kSameAsStdout && i != STDERR_FILENO) {
      return absl::InvalidArgumentError(absl::StrCat(
          "only stderr can go where stdout goes (fd ", i, " of ", name, ")"));
    }
    if (s.kind() == Stdio::Kind::kFile &&
        (s.path().empty() || has_nul(s.path()))) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad file name \"", absl::CHexEscape(s.path()),
                       "\" for fd ", i, " of ", name));
    }
    if (s.kind() == Stdio::Kind::kFd && fcntl(s.fd(), F_GETFD) < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("descriptor ", s.fd(), " for fd ", i, " of ", name, ": ",
                       strerror(errno)));
    }
  }
  auto bad_signal = [](int sig) {
    return sig < 1 || sig >= NSIG || sig == SIGKILL || sig == SIGSTOP;
  };
  if (o.parent_death_signal != 0 &&
      (o.parent_death_signal < 1 || o.parent_death_signal >= NSIG)) {
    return absl::InvalidArgumentError(
        absl::StrCat("parent death signal ", o.parent_death_signal, " for ",
                     name, " is not a signal"));
  }
  for (const int sig : o.ignored_signals) {
    if (bad_signal(sig)) {
      return absl::InvalidArgumentError(
          absl::StrCat("signal ", sig, " cannot be ignored (for ", name, ")"));
    }
  }
  return absl::OkStatus();
}

// Opens what stream `target` of the child reads or writes; the descriptor
// the child gets goes to *child_end (-1: inherit), a pipe's other end to
// *parent_end.
absl::Status OpenStream(const Stdio& s, int target, absl::string_view name,
                        OwnedFd* child_end, OwnedFd* parent_end) {
  const bool input = target == STDIN_FILENO;
  switch (s.kind()) {
    case Stdio::Kind::kInherit:
    case Stdio::Kind::kSameAsStdout:
    case Stdio::Kind::kFd:
      return absl::OkStatus();
    case Stdio::Kind::kNull:
    case Stdio::Kind::kFile: {
      const bool null = s.kind() == Stdio::Kind::kNull;
      const std::string path = null ? "/dev/null" : s.path();
      const int flags =
          input ? O_RDONLY
                : O_WRONLY |
                      (null ? 0 : O_CREAT | (s.append() ? O_APPEND : O_TRUNC));
      // Non-blocking while it opens: a FIFO without a reader (or writer)
      // must not hang this process; the child gets a blocking descriptor.
      const int fd =
          open(path.c_str(), flags | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0644);
      if (fd < 0) {
        return absl::ErrnoToStatus(errno,
                                   absl::StrCat("open ", path, " for ", name));
      }
      child_end->Reset(fd);
      const int status_flags = fcntl(fd, F_GETFL);
      if (status_flags < 0 ||
          fcntl(fd, F_SETFL, status_flags & ~O_NONBLOCK) != 0) {
        return absl::ErrnoToStatus(errno,
                                   absl::StrCat("fcntl ", path, " for ", name));
      }
      return absl::OkStatus();
    }
    case Stdio::Kind::kPipe: {
      int fds[2];
      if (pipe2(fds, O_CLOEXEC) != 0) {
        return absl::ErrnoToStatus(
            errno, absl::StrCat("pipe for fd ", target, " of ", name));
      }
      child_end->Reset(input ? fds[0] : fds[1]);
      parent_end->Reset(input ? fds[1] : fds[0]);
      return absl::OkStatus();
    }
  }
  return absl::InternalError("unknown stdio kind");
}

absl::Status ChildFailed(const Failure& failure, const SpawnOptions& options,
                         absl::string_view name) {
  switch (failure.stage) {
    case Stage::kPdeathsig:
      return absl::ErrnoToStatus(
          failure.error, absl::StrCat("prctl(PR_SET_PDEATHSIG) for ", name));
    case Stage::kSetpgid:
      return absl::ErrnoToStatus(failure.error,
                                 absl::StrCat("setpgid for ", name));
    case Stage::kStdio:
      return absl::ErrnoToStatus(failure.error,
                                 absl::StrCat("dup2 for ", name));
    case Stage::kChdir:
      return absl::ErrnoToStatus(
          failure.error,
          absl::StrCat("chdir to ", options.working_dir, " for ", name));
    case Stage::kExec:
      break;
  }
  return absl::ErrnoToStatus(
      failure.error,
      absl::StrCat("cannot execute ", options.argv[0],
                   options.name.empty() ? "" : " for ", options.name));
}

}  // namespace

std::string SignalName(int sig) {
  const char* abbrev = sig > 0 && sig < NSIG ? sigabbrev_np(sig) : nullptr;
  if (abbrev == nullptr) return absl::StrCat("signal ", sig);
  return absl::StrCat("SIG", abbrev);
}

bool ExitStatus::exited() const { return WIFEXITED(wait_status); }
int ExitStatus::exit_code() const { return WEXITSTATUS(wait_status); }
bool ExitStatus::killed() const { return WIFSIGNALED(wait_status); }
int ExitStatus::signal() const { return WTERMSIG(wait_status); }

int ExitStatus::ShellCode() const {
  if (exited()) return exit_code();
  if (killed()) return 128 + signal();
  return 1;
}

std::string ExitStatus::ToString() const {
  if (exited()) return absl::StrCat("exit code ", exit_code());
  if (killed()) return absl::StrCat("killed by signal ", SignalName(signal()));
  return absl::StrCat("wait status ", wait_status);
}

Stdio Stdio::File(std::string path, bool append) {
  Stdio s(Kind::kFile);
  s.path_ = std::move(path);
  s.append_ = append;
  return s;
}

Stdio Stdio::Fd(int fd) {
  Stdio s(Kind::kFd);
  s.fd_ = fd;
  return s;
}

absl::StatusOr<Subprocess> Subprocess::Spawn(const SpawnOptions& options) {
  const std::string name = options.name.empty() && !options.argv.empty()
                               ? options.argv[0]
                               : options.name;
  if (absl::Status s = CheckOptions(options, name); !s.ok()) return s;

  std::vector<std::string> args = options.argv;
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  std::vector<std::string> env = ChildEnvironment(options.env);
  std::vector<char*> envp;
  for (std::string& entry : env) envp.push_back(entry.data());
  envp.push_back(nullptr);

  Plan plan;
  plan.argv = argv.data();
  plan.envp = envp.data();
  if (!options.working_dir.empty()) {
    plan.working_dir = options.working_dir.c_str();
  }
  OwnedFd child_ends[3];
  OwnedFd parent_ends[3];
  const Stdio* streams[3] = {&options.stdin_from, &options.stdout_to,
                             &options.stderr_to};
  for (int i = 0; i < 3; ++i) {
    if (absl::Status s =
            OpenStream(*streams[i], i, name, &child_ends[i], &parent_ends[i]);
        !s.ok()) {
      return s;
    }
    plan.source[i] = streams[i]->kind() == Stdio::Kind::kFd
                         ? streams[i]->fd()
                         : child_ends[i].get();
  }
  plan.stderr_same_as_stdout =
      options.stderr_to.kind() == Stdio::Kind::kSameAsStdout;
  plan.new_process_group = options.new_process_group;
  plan.death_signal = options.parent_death_signal;
  plan.close_other_fds = options.close_other_fds;
  if (options.close_other_fds) {
    rlimit limit{};
    plan.max_fd =
        getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY
            ? static_cast<int>(
                  std::min<rlim_t>(limit.rlim_cur, rlim_t{1} << 20))
            : 1 << 20;
  }
  for (const int sig : options.ignored_signals) plan.ignore[sig] = true;
  plan.parent = getpid();

  // Where the child reports a Failure; EOF means it exec'd (the pipe is
  // close-on-exec). Its write end stays clear of 0, 1 and 2, which the
  // child overwrites.
  OwnedFd status_read, status_write;
  {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      return absl::ErrnoToStatus(
          errno, absl::StrCat("pipe for ", name, "'s exec status"));
    }
    status_read.Reset(fds[0]);
    status_write.Reset(fds[1]);
    if (status_write.get() < 3) {
      const int moved = fcntl(status_write.get(), F_DUPFD_CLOEXEC, 3);
      if (moved < 0) {
        return absl::ErrnoToStatus(
            errno, absl::StrCat("fcntl for ", name, "'s exec status"));
      }
      status_write.Reset(moved);
    }
  }
  plan.status_fd = status_write.get();

  sigset_t all;
  sigfillset(&all);
  if (const int error = pthread_sigmask(SIG_BLOCK, &all, &plan.mask);
      error != 0) {
    return absl::ErrnoToStatus(error,
                               absl::StrCat("pthread_sigmask for ", name));
  }
  const pid_t pid = fork();
  if (pid == 0) RunChild(plan);
  const int fork_errno = errno;
  // As the child does. EACCES (the child has exec'd, so it made the group)
  // and ESRCH (it has exited) are fine.
  if (pid > 0 && options.new_process_group) setpgid(pid, pid);
  pthread_sigmask(SIG_SETMASK, &plan.mask, nullptr);
  if (pid < 0) {
    return absl::ErrnoToStatus(fork_errno, absl::StrCat("fork for ", name));
  }
  Subprocess child(pid, options.new_process_group, name);
  status_write.Reset();
  for (OwnedFd& fd : child_ends) fd.Reset();

  Failure failure{};
  const ssize_t n = ReadFully(status_read.get(), &failure, sizeof(failure));
  if (n == 0) {
    for (int i = 0; i < 3; ++i) child.pipes_[i] = parent_ends[i].Release();
    return child;
  }
  const int read_errno = errno;
  // The child exits right after reporting; if it could not report, it is
  // killed.
  if (n < 0 || n != static_cast<ssize_t>(sizeof(failure))) {
    child.KillQuietly();
    if (n < 0) {
      return absl::ErrnoToStatus(
          read_errno, absl::StrCat("reading ", name, "'s exec status"));
    }
    return absl::InternalError(
        absl::StrCat(name, " sent a partial exec status"));
  }
  int wait_status = 0;
  WaitPid(pid, &wait_status);
  child.pid_ = -1;
  return ChildFailed(failure, options, name);
}

Subprocess::Subprocess(Subprocess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      leads_group_(other.leads_group_),
      name_(std::move(other.name_)),
      pipes_(std::exchange(other.pipes_, {-1, -1, -1})) {}

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  if (this != &other) {
    KillQuietly();
    pid_ = std::exchange(other.pid_, -1);
    leads_group_ = other.leads_group_;
    name_ = std::move(other.name_);
    pipes_ = std::exchange(other.pipes_, {-1, -1, -1});
  }
  return *this;
}

Subprocess::~Subprocess() { KillQuietly(); }

void Subprocess::KillQuietly() {
  if (running()) {
    kill(leads_group_ ? -pid_ : pid_, SIGKILL);
    int wait_status = 0;
    WaitPid(pid_, &wait_status);
    pid_ = -1;
  }
  for (int& fd : pipes_) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
}

int Subprocess::pipe_fd(int child_fd) const {
  return child_fd >= 0 && child_fd < 3 ? pipes_[child_fd] : -1;
}

int Subprocess::ReleasePipe(int child_fd) {
  return child_fd >= 0 && child_fd < 3 ? std::exchange(pipes_[child_fd], -1)
                                       : -1;
}

void Subprocess::ClosePipe(int child_fd) {
  const int fd = ReleasePipe(child_fd);
  if (fd >= 0) close(fd);
}

absl::Status Subprocess::Signal(int sig) const {
  if (!running()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot send ", SignalName(sig), ": no child running"));
  }
  if (kill(pid_, sig) != 0) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("kill ", SignalName(sig), " to ", name_));
  }
  return absl::OkStatus();
}

absl::Status Subprocess::SignalGroup(int sig) const {
  if (!running() || !leads_group_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot send ", SignalName(sig), " to a process group: ",
        running() ? absl::StrCat(name_, " leads none") : "no child running"));
  }
  if (kill(-pid_, sig) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("kill ", SignalName(sig),
                                                   " to ", name_, "'s group"));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> Subprocess::HasExited() {
  if (!running()) return absl::FailedPreconditionError("no child running");
  siginfo_t info{};
  while (waitid(P_PID, pid_, &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
    if (errno == EINTR) continue;
    // Reaped by someone else (ECHILD): its pid is no longer this child's.
    // It is given up either way: nothing more can be learnt of it.
    const int error = errno;
    pid_ = -1;
    return absl::ErrnoToStatus(error, absl::StrCat("waitpid for ", name_));
  }
  return info.si_pid == pid_;
}

absl::StatusOr<ExitStatus> Subprocess::Reap() {
  if (!running()) return absl::FailedPreconditionError("no child running");
  siginfo_t info{};
  while (waitid(P_PID, pid_, &info, WEXITED | WNOWAIT) != 0) {
    if (errno == EINTR) continue;
    const int error = errno;
    pid_ = -1;
    return absl::ErrnoToStatus(error, absl::StrCat("waitpid for ", name_));
  }
  // Exited but not reaped: the group's id is still its own.
  if (leads_group_) kill(-pid_, SIGKILL);
  ExitStatus status;
  const int error = WaitPid(pid_, &status.wait_status);
  pid_ = -1;
  if (error != 0) {
    return absl::ErrnoToStatus(error, absl::StrCat("waitpid for ", name_));
  }
  return status;
}

absl::StatusOr<ExitStatus> Subprocess::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration pause = absl::Milliseconds(1);
  while (true) {
    absl::StatusOr<bool> exited = HasExited();
    if (!exited.ok()) return exited.status();
    if (*exited) return Reap();
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          name_, " still running after ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(std::min(pause, deadline - now));
    pause = std::min(pause * 2, absl::Milliseconds(20));
  }
}

absl::StatusOr<ExitStatus> Subprocess::Kill() {
  if (!running()) return absl::FailedPreconditionError("no child running");
  kill(leads_group_ ? -pid_ : pid_, SIGKILL);
  return Reap();
}

absl::StatusOr<ExitStatus> RunSubprocess(const SpawnOptions& options,
                                         absl::Duration timeout) {
  absl::StatusOr<Subprocess> child = Subprocess::Spawn(options);
  if (!child.ok()) return child.status();
  absl::StatusOr<ExitStatus> status = child->Wait(timeout);
  if (absl::IsDeadlineExceeded(status.status())) {
    child->Kill().IgnoreError();
    return absl::DeadlineExceededError(
        absl::StrCat(status.status().message(), "; killed"));
  }
  return status;
}

}  // namespace chunkzero
