// The launcher: runs a job as NPROC processes of one binary on this machine,
// one rank each, and makes sure that no rank outlives the job. With
// --nnodes, one launcher per host runs its NPROC ranks of a job spread over
// several hosts, as torchrun does.
//
//   absl::StatusOr<LaunchOptions> options = ParseLaunchArgs(args);
//   if (!options.ok()) return 2;  // print options.status() and kUsage
//   absl::StatusOr<int> exit_code = RunJob(*options);
//
// Rank r of this host (local rank r) is the job's rank g = node_rank * NPROC
// + r and runs `BINARY --world_size=NNODES*NPROC --backend=gloo --rank=g
// --rendezvous=R ARGS...` with LOCAL_RANK=r and LOCAL_WORLD_SIZE=NPROC in
// its environment; ARGS may not give --world_size, --rank or --rendezvous
// again (ParseLaunchArgs), while a --backend among them wins over gloo.
// R is, in this order: --rendezvous; with --master_addr,
// redis://MASTER_ADDR:MASTER_PORT/RUN_ID for --store=redis, else
// tcp://MASTER_ADDR:MASTER_PORT (the store the job's rank 0 hosts); on one
// host without either, DIR/store, DIR being a fresh directory (mkdtemp
// under $TMPDIR, else /tmp) that RunJob removes before it returns. With
// --store=redis the launcher of node 0 starts redis-server on MASTER_PORT
// (on MASTER_ADDR and loopback) before its ranks, and stops it after them.
//
// Output. The job's rank 0 shares the launcher's stdout and stderr; every
// other rank's stdout and stderr go through one pipe, of which the launcher
// keeps the last kKeptOutputBytes and shows them, each line prefixed
// `[rank g] `, if that rank fails. Every rank's stdin is /dev/null.
//
// Process groups. Each rank leads a process group of its own, and every
// signal the launcher sends a rank goes to that group, so that what the
// rank started (the children of a BINARY that is a wrapper script) goes
// with it; when a rank exits, whatever is left in its group is SIGKILLed.
// Outside the terminal's foreground group, a rank gets no Ctrl-C or Ctrl-Z
// from the terminal: the launcher passes them on (below). Ranks ignore
// SIGTTOU, so that rank 0 can write to the terminal under `stty tostop`.
//
// Cores. The ranks share the machine: each gets CHUNKZERO_NUM_THREADS =
// ParallelThreadsShare(NPROC) (base/parallel_for.h: the cores / NPROC) in
// its environment, the ParallelFor threads its kernels use, unless the
// launcher's environment sets it already.
//
// Stopping. The first rank to exit non-zero or by a signal fails the job:
// RunJob reports it (`launch: rank R failed (exit code C)` or `(killed by
// signal SIGNAME)`, with ` on node I` when there are several, then its kept
// output), sends SIGTERM and SIGCONT (so that a stopped rank acts on it) to
// every rank still running, and SIGKILLs those still running a grace period
// later. SIGINT, SIGTERM or SIGHUP sent to the launcher is passed on the
// same way (that signal, then SIGCONT, then SIGKILL after the grace period);
// a second such signal, or one that arrives while a failure is being
// handled, SIGKILLs the ranks at once. SIGTSTP (Ctrl-Z) to the launcher
// is passed on to the ranks before the launcher stops itself, and the
// SIGCONT that resumes it (`fg`, `bg`) is passed on too. Every rank also
// gets PR_SET_PDEATHSIG=SIGKILL, so a launcher killed outright takes its
// ranks with it (but not a wrapper script's own children: a wrapper should
// `exec` its binary). Only the first failure is reported: ranks that exit
// afterwards were most likely stopped by it, or by the launcher. A rank on
// another host that fails makes this host's ranks fail in their next
// collective (at once if its connections reset, else at their
// --comm_timeout_s), so every host's launcher exits non-zero.
//
// The parts: launch_options.h (the options and the command line),
// rendezvous.h (where the ranks meet; node 0's Redis server), signal_scope.h
// (the launcher's signal handling), job.h (starting and supervising the
// ranks, each one a base/subprocess.h child).
#ifndef CHUNKZERO_TOOLS_LAUNCH_LAUNCHER_H_
#define CHUNKZERO_TOOLS_LAUNCH_LAUNCHER_H_

#include <string>

#include "absl/status/statusor.h"
#include "tools/launch/launch_options.h"

namespace chunkzero {
namespace launch {

// Runs the job to its end and returns the exit code the launcher should
// exit with: 0 when every rank exited 0; otherwise the first failing rank's
// exit code (128 + the signal number if a signal killed it), or 128 + s if
// the launcher got signal s (SIGINT, SIGTERM, SIGHUP) before any rank
// failed. Blocks until every rank has been reaped.
//
// An error status means the launcher itself failed: bad options
// (InvalidArgument), a rank that could not be executed (the message names
// the binary and the errno text), a redis-server that could not be executed
// (naming the binary), found its port taken or did not answer within 10 s
// (naming the port; all Unavailable), or a failed
// system call (mkdtemp, pipe, fork, poll, ...). Ranks already started are
// stopped as above and reaped before it returns.
//
// REQUIRES: no other RunJob in this process at the same time. For its
// duration RunJob owns the dispositions of SIGINT, SIGTERM, SIGHUP,
// SIGTSTP, SIGCONT and SIGCHLD (restored on return; SIGINT, SIGTERM,
// SIGHUP or SIGTSTP ignored on entry, as under nohup, stays ignored, in the
// ranks too, and is not passed on) and reaps only its own children. Call
// it from a thread that outlives the job: PR_SET_PDEATHSIG fires when the
// thread that forked a rank exits.
[[nodiscard]] absl::StatusOr<int> RunJob(const LaunchOptions& options);

// The exit code a shell would give a process that ended with `wait_status`
// (from waitpid): its exit code, or 128 + the number of the signal that
// killed it.
int ExitCodeOf(int wait_status);

// "exit code 3" or "killed by signal SIGUSR1" for a status from waitpid.
std::string DescribeWaitStatus(int wait_status);

}  // namespace launch
}  // namespace chunkzero

#endif  // CHUNKZERO_TOOLS_LAUNCH_LAUNCHER_H_
