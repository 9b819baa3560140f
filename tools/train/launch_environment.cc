#include "tools/train/launch_environment.h"

#include <algorithm>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"

namespace chunkzero {
namespace {

bool Set(const EnvLookup& env, const char* name) {
  const char* value = env(name);
  return value != nullptr && value[0] != '\0';
}

// The integer in variable `name`, which must be set, in [min, max]. Only
// decimal digits (and a leading '-') are a number: " 0" or "+1" is a
// launcher's mistake, not a rank.
absl::StatusOr<int> IntVariable(const EnvLookup& env, const char* name, int min,
                                int max, absl::string_view want) {
  const char* value = env(name);
  const absl::string_view text = value == nullptr ? "" : value;
  const absl::string_view digits = absl::StripPrefix(text, "-");
  int parsed = 0;
  if (digits.empty() || digits.size() > 10 ||
      !std::all_of(digits.begin(), digits.end(), absl::ascii_isdigit) ||
      !absl::SimpleAtoi(text, &parsed) || parsed < min || parsed > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "=\"", absl::CHexEscape(text),
                     "\" (from the environment): want ", want));
  }
  return parsed;
}

// The most ranks a job may have (2^20).
constexpr int kMaxWorldSize = 1 << 20;
// The most threads CHUNKZERO_NUM_THREADS may ask of a process.
constexpr int kMaxThreads = 4096;
// Where rank 0 hosts the store under Slurm when MASTER_PORT is unset
// (torchrun's default).
constexpr int kDefaultMasterPort = 29500;

// The names under which a launcher gives a process its place in the job.
struct LauncherVariables {
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_world_size;
};
constexpr LauncherVariables kTorchrun = {"RANK", "WORLD_SIZE", "LOCAL_RANK",
                                         "LOCAL_WORLD_SIZE"};
constexpr LauncherVariables kSlurm = {"SLURM_PROCID", "SLURM_NTASKS",
                                      "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"};

// True when Slurm started this process as one task of several (srun): a
// shell of an allocation with one task trains as one process.
bool UnderSlurmTasks(const EnvLookup& env) {
  return Set(env, kSlurm.rank) && Set(env, kSlurm.world_size) &&
         std::string(env(kSlurm.world_size)) != "1";
}

// The rendezvous address where rank 0 hosts the store: `host` and
// MASTER_PORT, or `default_port` where that is unset (0: it must be set).
absl::StatusOr<std::string> TcpRendezvous(const std::string& host,
                                          const EnvLookup& env,
                                          int default_port) {
  absl::StatusOr<int> port = Set(env, "MASTER_PORT") || default_port == 0
                                 ? IntVariable(env, "MASTER_PORT", 1, 65535,
                                               "a TCP port in [1, 65535]")
                                 : absl::StatusOr<int>(default_port);
  if (!port.ok()) return port.status();
  return absl::StrCat(
      "tcp://",
      absl::StrContains(host, ':') && !absl::StartsWith(host, "[")
          ? absl::StrCat("[", host, "]")
          : host,
      ":", *port);
}

// RANK and WORLD_SIZE (or Slurm's), the backend and the rendezvous.
absl::Status ApplyRankEnvironment(const EnvLookup& env,
                                  const std::set<std::string>& given,
                                  const LauncherVariables& names,
                                  TrainOptions* o) {
  const bool slurm = names.rank == kSlurm.rank;
  if (!Set(env, names.world_size)) {
    return absl::InvalidArgumentError(absl::StrCat(
        names.rank, " is set in the environment but ", names.world_size,
        " is not: a launcher that sets one sets both"));
  }
  absl::StatusOr<int> world =
      IntVariable(env, names.world_size, 1, kMaxWorldSize,
                  "the job's ranks, in [1, 1048576]");
  if (!world.ok()) return world.status();
  absl::StatusOr<int> rank =
      IntVariable(env, names.rank, 0, *world - 1,
                  absl::StrCat("this process's rank in [0, ", names.world_size,
                               "=", *world, ")"));
  if (!rank.ok()) return rank.status();
  if (given.count("world_size") && o->world_size != *world) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--world_size=", o->world_size, " disagrees with ", names.world_size,
        "=", *world, " from the environment; drop one"));
  }
  // The command line wins, but it cannot make one rank of a job of
  // processes run its peers as threads.
  if (given.count("backend") && o->backend == Backend::kInProcess) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--backend=inproc runs every rank as a thread of one process, but ",
        names.rank, "=", *rank, " and ", names.world_size, "=", *world,
        " in the environment make this process one rank of ", *world,
        ": give --backend=gloo (or nccl), or unset ", names.rank,
        " to train as one process"));
  }
  o->world_size = *world;
  o->rank = *rank;
  if (!given.count("backend")) o->backend = Backend::kGloo;
  if (given.count("rendezvous")) return absl::OkStatus();
  if (Set(env, "CHUNKZERO_RENDEZVOUS")) {
    o->rendezvous = env("CHUNKZERO_RENDEZVOUS");
    return absl::OkStatus();
  }
  if (Set(env, "MASTER_ADDR") && (slurm || Set(env, "MASTER_PORT"))) {
    CZ_ASSIGN_OR_RETURN(
        o->rendezvous,
        TcpRendezvous(env("MASTER_ADDR"), env, slurm ? kDefaultMasterPort : 0));
    return absl::OkStatus();
  }
  if (!slurm) {
    return absl::InvalidArgumentError(
        "RANK is set in the environment but not where the ranks meet: set "
        "MASTER_ADDR and MASTER_PORT (rank 0 hosts the store there), or "
        "CHUNKZERO_RENDEZVOUS, or give --rendezvous");
  }
  // Under Slurm the job's first host hosts the store.
  if (!Set(env, "SLURM_JOB_NODELIST")) {
    return absl::InvalidArgumentError(
        "SLURM_PROCID and SLURM_NTASKS are set in the environment but not "
        "where the ranks meet: set MASTER_ADDR (and MASTER_PORT, default "
        "29500), SLURM_JOB_NODELIST, or CHUNKZERO_RENDEZVOUS, or give "
        "--rendezvous");
  }
  absl::StatusOr<std::string> host = FirstSlurmHost(env("SLURM_JOB_NODELIST"));
  if (!host.ok()) return host.status();
  CZ_ASSIGN_OR_RETURN(o->rendezvous,
                      TcpRendezvous(*host, env, kDefaultMasterPort));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> FirstSlurmHost(absl::string_view nodelist) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("SLURM_JOB_NODELIST=\"", absl::CHexEscape(nodelist),
                     "\" (from the environment): ", why));
  };
  // The first entry: up to a comma outside brackets ("a[1-4,7],b" -> a[1-4,7]).
  size_t end = 0;
  int depth = 0;
  for (; end < nodelist.size(); ++end) {
    const char c = nodelist[end];
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0 || depth > 1) return bad("unbalanced brackets");
    if (c == ',' && depth == 0) break;
  }
  if (depth != 0) return bad("unbalanced brackets");
  const absl::string_view first = nodelist.substr(0, end);
  const size_t open = first.find('[');
  std::string host;
  if (open == absl::string_view::npos) {
    host = std::string(first);
  } else {
    const size_t close = first.find(']', open);
    // The first number of the first range, its zeros kept ("[01-04]" ->
    // "01"), between the prefix and what follows the brackets.
    const absl::string_view ranges = first.substr(open + 1, close - open - 1);
    const absl::string_view number =
        ranges.substr(0, ranges.find_first_of(",-"));
    if (number.empty() ||
        !std::all_of(number.begin(), number.end(), absl::ascii_isdigit)) {
      return bad("want host names such as node[01-04,07],gpu5");
    }
    host = absl::StrCat(first.substr(0, open), number, first.substr(close + 1));
  }
  if (host.empty() || host.find_first_of(" \t[]") != std::string::npos) {
    return bad("want host names such as node[01-04,07],gpu5");
  }
  return host;
}

absl::Status ApplyLaunchEnvironment(const EnvLookup& env,
                                    const std::set<std::string>& given,
                                    TrainOptions* o) {
  // base/parallel_for.cc reads it for every process and would quietly
  // take the hardware's count for a value it cannot use.
  if (env("CHUNKZERO_NUM_THREADS") != nullptr) {
    absl::StatusOr<int> threads =
        IntVariable(env, "CHUNKZERO_NUM_THREADS", 1, kMaxThreads,
                    "threads per process, in [1, 4096]");
    if (!threads.ok()) return threads.status();
  }
  // Which launcher gave this process its rank, if any.
  const LauncherVariables* launcher = nullptr;
  if (!given.count("rank")) {
    if (Set(env, "RANK")) {
      launcher = &kTorchrun;
      CZ_RETURN_IF_ERROR(ApplyRankEnvironment(env, given, kTorchrun, o));
    } else if (env("RANK") == nullptr && UnderSlurmTasks(env)) {
      launcher = &kSlurm;
      CZ_RETURN_IF_ERROR(ApplyRankEnvironment(env, given, kSlurm, o));
    } else {
      // A launcher's environment with RANK unset or empty (a Slurm script
      // whose RANK=$VAR expanded to nothing): training alone here would
      // report success for a job that never met its peers.
      const char* rank = env("RANK");
      if (rank != nullptr) {
        return absl::InvalidArgumentError(
            "RANK=\"\" (from the environment) is empty: want this "
            "process's rank, or unset it to train as one process");
      }
      auto without_rank = [&](const char* name) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, "=\"", env(name),
            "\" is set in the environment but RANK is not: a launcher that "
            "sets one sets both (unset ",
            name, " to train as one process)"));
      };
      // WORLD_SIZE=1 describes this very job.
      if (Set(env, "WORLD_SIZE") && std::string(env("WORLD_SIZE")) != "1") {
        return without_rank("WORLD_SIZE");
      }
      if (Set(env, "CHUNKZERO_RENDEZVOUS")) {
        return without_rank("CHUNKZERO_RENDEZVOUS");
      }
    }
  }
  // Where this process's rank sits on its host, however its rank was given
  // (the multi-host launcher passes --rank and sets these). Ranks that are
  // threads of one process talk over loopback and share its cores.
  if (o->rank < 0) return absl::OkStatus();
  if (!given.count("interface") && Set(env, "GLOO_SOCKET_IFNAME")) {
    o->interface = env("GLOO_SOCKET_IFNAME");
    o->interface_source = "GLOO_SOCKET_IFNAME";
  }
  const int world = std::max(o->world_size, 1);
  // torchrun's names, else those of the launcher that gave the rank (Slurm
  // sets its own even where a script also sets LOCAL_RANK).
  auto local_name = [&](const char* torchrun, const char* launchers) {
    return Set(env, torchrun) || launcher == nullptr ? torchrun : launchers;
  };
  const char* local_rank =
      local_name(kTorchrun.local_rank, launcher ? launcher->local_rank : "");
  if (Set(env, local_rank)) {
    absl::StatusOr<int> local = IntVariable(
        env, local_rank, 0, world - 1,
        absl::StrCat("this rank's index on its host, in [0, ", world, ")"));
    if (!local.ok()) return local.status();
    o->local_rank = *local;
  }
  const char* local_world_size = local_name(
      kTorchrun.local_world_size, launcher ? launcher->local_world_size : "");
  if (Set(env, local_world_size)) {
    absl::StatusOr<int> local = IntVariable(
        env, local_world_size, 1, world,
        absl::StrCat("the ranks on this host, in [1, ", world, "]"));
    if (!local.ok()) return local.status();
    o->local_world_size = *local;
    if (!Set(env, "CHUNKZERO_NUM_THREADS")) o->core_sharing_ranks = *local;
  }
  return absl::OkStatus();
}

}  // namespace chunkzero
