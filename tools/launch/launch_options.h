// The launcher's options and its command line (launcher.h says what they
// mean to a job):
//
//   absl::StatusOr<LaunchOptions> options = ParseLaunchArgs(args);
//   if (!options.ok()) return 2;  // print options.status() and kUsage
#ifndef CHUNKZERO_TOOLS_LAUNCH_LAUNCH_OPTIONS_H_
#define CHUNKZERO_TOOLS_LAUNCH_LAUNCH_OPTIONS_H_

#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace chunkzero {
namespace launch {

// What the launcher binary prints after a usage error.
inline constexpr char kUsage[] =
    "usage: launch [--grace_period_s=S] [--nnodes=N --node_rank=I "
    "--master_addr=HOST [--master_port=P] [--store=tcp|redis] [--run_id=ID]] "
    "[--rendezvous=R] NPROC BINARY [ARGS...]\n"
    "Runs NPROC processes of BINARY on this host, rank r as BINARY "
    "--world_size=N*NPROC --backend=gloo --rank=I*NPROC+r --rendezvous=R "
    "ARGS..., and stops them all when one fails (SIGTERM, then SIGKILL after "
    "S seconds, default 5). With several hosts, run one launcher per host "
    "with the same flags but --node_rank; the job's rank 0 hosts the store at "
    "HOST:P (default 29500), or with --store=redis node 0 starts "
    "redis-server there.\n";

// Where the ranks of several hosts meet when no --rendezvous is given.
enum class StoreKind {
  kTcp,    // tcp://MASTER_ADDR:MASTER_PORT, hosted by the job's rank 0.
  kRedis,  // redis://MASTER_ADDR:MASTER_PORT/RUN_ID, started by node 0.
};

// How much of each captured rank's output is kept: its last 64 KiB.
inline constexpr size_t kKeptOutputBytes = 64 * 1024;

inline constexpr std::chrono::milliseconds kDefaultGracePeriod{5000};

struct LaunchOptions {
  // Ranks, >= 1.
  int nproc = 0;
  // The program each rank runs: a path, or a name looked up in $PATH.
  std::string binary;
  // Passed to every rank after the flags the launcher sets.
  std::vector<std::string> args;
  // How long a rank has, after SIGTERM (or the signal the launcher passed
  // on), before it is SIGKILLed.
  std::chrono::milliseconds grace_period = kDefaultGracePeriod;
  // Where the launcher's own messages and a failed rank's kept output go.
  // Rank 0's output goes to this process's stdout and stderr regardless.
  int report_fd = STDERR_FILENO;
  // The hosts of the job and this one's index among them.
  int nnodes = 1;
  int node_rank = 0;
  // The store's host and port (torchrun's MASTER_ADDR, MASTER_PORT); empty:
  // one host, meeting in a fresh directory.
  std::string master_addr;
  int master_port = 29500;
  StoreKind store = StoreKind::kTcp;
  // The key prefix of a redis:// store.
  std::string run_id = "chunkzero";
  // Given as is to every rank instead of the above.
  std::string rendezvous;
  // The Redis server node 0 starts for --store=redis: a path, or a name
  // looked up in $PATH.
  std::string redis_server = "redis-server";
};

// Parses the launcher's command line, without the program name (kUsage).
// The launcher's flags come before NPROC; everything after BINARY is ARGS,
// flags included. InvalidArgument names what is wrong: a value out of
// range, --nnodes > 1 with no --master_addr or --rendezvous, both of those,
// --store=redis without --master_addr, or ARGS giving --rank, --world_size
// or --rendezvous, the launcher's to set, in any spelling Abseil's or
// gflags' parser takes (--rank=1, --rank 1, -rank=1, -rank; not after
// "--", nor inside a --flagfile).
[[nodiscard]] absl::StatusOr<LaunchOptions> ParseLaunchArgs(
    absl::Span<const std::string> args);

// What several hosts need, as ParseLaunchArgs documents (RunJob checks
// options made without it): InvalidArgument naming the flag.
[[nodiscard]] absl::Status CheckHosts(const LaunchOptions& options);

}  // namespace launch
}  // namespace chunkzero

#endif  // CHUNKZERO_TOOLS_LAUNCH_LAUNCH_OPTIONS_H_
