// Child processes: started with fork() and exec, waited for with a
// deadline, signalled alone or with their process group, and their end
// decoded. Errors are absl::Status values naming the program (or the name
// the caller gives it) and errno's text.
//
//   SpawnOptions options;
//   options.argv = {"redis-server", "--port", "6400"};
//   options.stdout_to = Stdio::Null();
//   options.new_process_group = true;
//   options.parent_death_signal = SIGKILL;
//   CZ_ASSIGN_OR_RETURN(Subprocess child, Subprocess::Spawn(options));
//   absl::StatusOr<ExitStatus> end = child.Wait(absl::Seconds(10));
//
//   CZ_ASSIGN_OR_RETURN(ExitStatus end, RunSubprocess(options,
//   absl::Seconds(30)));
//
// Safe in a multithreaded process: everything the child needs is made
// before fork(), and after it the child makes only async-signal-safe calls
// until it execs. All signals are blocked around fork(); the child sets the
// signals this process catches back to their default actions (a handler
// must not run in it) and unblocks what was unblocked before.
//
// A child that leads a process group of its own takes the group with it:
// whatever is left in the group when it exits (a wrapper script's children)
// is SIGKILLed before it is reaped. Until a child is reaped its pid, and
// its group's id, cannot be reused, so signalling them cannot hit another
// process.
//
// Thread-safety: a Subprocess is not safe to use from several threads at
// once; distinct ones are independent.
#ifndef CHUNKZERO_BASE_SUBPROCESS_H_
#define CHUNKZERO_BASE_SUBPROCESS_H_

#include <sys/types.h>

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace chunkzero {

// "SIGTERM"; "signal 77" for a number without a name.
std::string SignalName(int sig);

// How a child ended: a status from waitpid().
struct ExitStatus {
  int wait_status = 0;

  bool exited() const;  // It called exit(); exit_code() says with what.
  int exit_code() const;
  bool killed() const;  // A signal ended it; signal() says which.
  int signal() const;
  // Exited with code 0.
  bool success() const { return exited() && exit_code() == 0; }
  // The code a shell gives it: the exit code, or 128 + the signal's number
  // (1 for a status that is neither).
  int ShellCode() const;
  // "exit code 3", "killed by signal SIGUSR1".
  std::string ToString() const;
};

// Where one of the child's stdin, stdout or stderr comes from or goes to.
class Stdio {
 public:
  enum class Kind { kInherit, kNull, kFile, kPipe, kFd, kSameAsStdout };

  // This process's own stream (the default).
  static Stdio Inherit() { return Stdio(Kind::kInherit); }
  // /dev/null.
  static Stdio Null() { return Stdio(Kind::kNull); }
  // A file, opened by this process before the child starts: for stdin read,
  // for stdout and stderr created (mode 0644) and truncated, or appended to
  // with `append`.
  static Stdio File(std::string path, bool append = false);
  // A pipe whose other end this process gets (Subprocess::pipe_fd).
  static Stdio Pipe() { return Stdio(Kind::kPipe); }
  // A descriptor of this process's (not closed by Subprocess).
  static Stdio Fd(int fd);
  // For stderr only: wherever stdout goes (2>&1).
  static Stdio SameAsStdout() { return Stdio(Kind::kSameAsStdout); }

  Kind kind() const { return kind_; }
  const std::string& path() const { return path_; }
  bool append() const { return append_; }
  int fd() const { return fd_; }

 private:
  explicit Stdio(Kind kind) : kind_(kind) {}

  Kind kind_;
  std::string path_;
  bool append_ = false;
  int fd_ = -1;
};

struct SpawnOptions {
  // The program and its arguments; argv[0] is a path, or a name looked up
  // in $PATH.
  std::vector<std::string> argv;
  // What messages call the child ("rank 3"): "cannot execute ARGV0 for
  // NAME", "fork for NAME". Empty: argv[0].
  std::string name;
  // "NAME=VALUE" entries added to this process's environment, each
  // replacing an entry of the same name.
  std::vector<std::string> env;
  // Where the child starts; empty: this process's working directory.
  std::string working_dir;
  Stdio stdin_from = Stdio::Inherit();
  Stdio stdout_to = Stdio::Inherit();
  Stdio stderr_to = Stdio::Inherit();
  // The child leads a process group of its own (its pid is the group's id),
  // which SignalGroup signals as a whole and whose leftovers die with it.
  bool new_process_group = false;
  // Sent to the child when the thread that started it exits (or the whole
  // process dies, SIGKILL included): PR_SET_PDEATHSIG; 0 for none. Start
  // such a child from a thread that outlives it.
  int parent_death_signal = 0;
  // Every descriptor but stdin, stdout and stderr is closed in the child,
  // also those this process opened without O_CLOEXEC.
  bool close_other_fds = false;
  // Signals the child starts with ignored (SIG_IGN survives exec). Signals
  // this process ignores stay ignored in the child anyway.
  std::vector<int> ignored_signals;
};

class Subprocess {
 public:
  // Starts the child and returns once it has exec'd the program. An error
  // names the program and the errno: "cannot execute ARGV0[ for NAME]:
  // No such file or directory" with errno's code (NotFound here) when exec
  // fails; "open PATH for NAME", "chdir to DIR for NAME", "fork for NAME",
  // ... for the steps before; InvalidArgument for options that cannot be
  // run (no argv, an empty program, a NUL inside an argument, an env entry
  // without '=', SameAsStdout for stdin or stdout, a bad Fd or signal).
  [[nodiscard]] static absl::StatusOr<Subprocess> Spawn(
      const SpawnOptions& options);

  Subprocess() = default;
  Subprocess(Subprocess&& other) noexcept;
  // Kills (as Kill) a child this one still holds first.
  Subprocess& operator=(Subprocess&& other) noexcept;
  // A child still running is killed: SIGKILL (to its group if it leads
  // one) and reaped.
  ~Subprocess();

  // Started and not reaped yet.
  bool running() const { return pid_ > 0; }
  // -1 when none is running.
  pid_t pid() const { return pid_; }
  // Whether it leads a process group of its own (new_process_group).
  bool leads_group() const { return leads_group_; }
  // The name messages use (SpawnOptions::name, else argv[0]).
  const std::string& name() const { return name_; }

  // This process's end of the child's stdin (0), stdout (1) or stderr (2)
  // pipe (Stdio::Pipe), -1 if none; owned by this object until released.
  int pipe_fd(int child_fd) const;
  // Gives the caller the pipe end (to close), -1 if none.
  int ReleasePipe(int child_fd);
  // Closes it (stdin: the child reads EOF).
  void ClosePipe(int child_fd);

  // `sig` to the child; to it and every process in its group. Both
  // FailedPrecondition when no child is running; SignalGroup also when it
  // does not lead a group.
  absl::Status Signal(int sig) const;
  absl::Status SignalGroup(int sig) const;

  // Whether the child has exited, without reaping it (it stays a zombie,
  // its pid reserved, until Reap or Wait). FailedPrecondition if none is
  // running; errno's status ("waitpid for NAME: No child processes") if it
  // cannot be waited for (someone else reaped it), and the child is given
  // up: running() is false from then on.
  absl::StatusOr<bool> HasExited();
  // Waits for the child to exit, kills what is left in its group, reaps it.
  // Errors as HasExited's.
  absl::StatusOr<ExitStatus> Reap();
  // As Reap, for at most `timeout`: DeadlineExceeded ("NAME still running
  // after 2s") leaves the child running.
  absl::StatusOr<ExitStatus> Wait(absl::Duration timeout);
  // SIGKILL (to its group if it leads one), then Reap.
  absl::StatusOr<ExitStatus> Kill();

 private:
  Subprocess(pid_t pid, bool leads_group, std::string name)
      : pid_(pid), leads_group_(leads_group), name_(std::move(name)) {}
  void KillQuietly();

  pid_t pid_ = -1;
  bool leads_group_ = false;
  std::string name_;
  std::array<int, 3> pipes_ = {-1, -1, -1};
};

// Spawns, waits at most `timeout`, and returns how the child ended. A child
// still running then is killed (with its group) and DeadlineExceeded
// returned: "NAME still running after 30s; killed".
[[nodiscard]] absl::StatusOr<ExitStatus> RunSubprocess(
    const SpawnOptions& options, absl::Duration timeout);

}  // namespace chunkzero

#endif  // CHUNKZERO_BASE_SUBPROCESS_H_
