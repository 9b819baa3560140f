#include "tools/train/launch_environment.h"

#include <algorithm>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace chunkzero {
namespace {

bool Set(const EnvLookup& env, const char* name) {
  const char* value = env(name);
  return value != nullptr && value[0] != '\0';
}

// The integer in variable `name`, which must be set, in [min, max].
absl::StatusOr<int> IntVariable(const EnvLookup& env, const char* name, int min,
                                int max, absl::string_view want) {
  const char* value = env(name);
  int parsed = 0;
  if (value == nullptr || !absl::SimpleAtoi(value, &parsed) || parsed < min ||
      parsed > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "=\"", value == nullptr ? "" : value,
                     "\" (from the environment): want ", want));
  }
  return parsed;
}

// The most ranks a job may have (2^20).
constexpr int kMaxWorldSize = 1 << 20;
// The most threads CHUNKZERO_NUM_THREADS may ask of a process.
constexpr int kMaxThreads = 4096;

// RANK and WORLD_SIZE, the backend and the rendezvous.
absl::Status ApplyRankEnvironment(const EnvLookup& env,
                                  const std::set<std::string>& given,
                                  TrainOptions* o) {
  if (!Set(env, "WORLD_SIZE")) {
    return absl::InvalidArgumentError(
        "RANK is set in the environment but WORLD_SIZE is not: a launcher "
        "that sets one sets both");
  }
  absl::StatusOr<int> world = IntVariable(env, "WORLD_SIZE", 1, kMaxWorldSize,
                                          "the job's ranks, in [1, 1048576]");
  if (!world.ok()) return world.status();
  absl::StatusOr<int> rank = IntVariable(
      env, "RANK", 0, *world - 1,
      absl::StrCat("this process's rank in [0, WORLD_SIZE=", *world, ")"));
  if (!rank.ok()) return rank.status();
  if (given.count("world_size") && o->world_size != *world) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--world_size=", o->world_size, " disagrees with WORLD_SIZE=", *world,
        " from the environment; drop one"));
  }
  o->world_size = *world;
  o->rank = *rank;
  if (!given.count("backend")) o->backend = Backend::kGloo;
  if (given.count("rendezvous")) return absl::OkStatus();
  if (Set(env, "CHUNKZERO_RENDEZVOUS")) {
    o->rendezvous = env("CHUNKZERO_RENDEZVOUS");
    return absl::OkStatus();
  }
  if (!Set(env, "MASTER_ADDR") || !Set(env, "MASTER_PORT")) {
    return absl::InvalidArgumentError(
        "RANK is set in the environment but not where the ranks meet: set "
        "MASTER_ADDR and MASTER_PORT (rank 0 hosts the store there), or "
        "CHUNKZERO_RENDEZVOUS, or give --rendezvous");
  }
  absl::StatusOr<int> port =
      IntVariable(env, "MASTER_PORT", 1, 65535, "a TCP port in [1, 65535]");
  if (!port.ok()) return port.status();
  const std::string host = env("MASTER_ADDR");
  o->rendezvous =
      absl::StrCat("tcp://",
                   absl::StrContains(host, ':') && !absl::StartsWith(host, "[")
                       ? absl::StrCat("[", host, "]")
                       : host,
                   ":", *port);
  return absl::OkStatus();
}

}  // namespace

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
  if (!given.count("rank")) {
    if (Set(env, "RANK")) {
      if (absl::Status s = ApplyRankEnvironment(env, given, o); !s.ok()) {
        return s;
      }
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
  if (Set(env, "LOCAL_RANK")) {
    absl::StatusOr<int> local = IntVariable(
        env, "LOCAL_RANK", 0, world - 1,
        absl::StrCat("this rank's index on its host, in [0, ", world, ")"));
    if (!local.ok()) return local.status();
    o->local_rank = *local;
  }
  if (Set(env, "LOCAL_WORLD_SIZE")) {
    absl::StatusOr<int> local =
        IntVariable(env, "LOCAL_WORLD_SIZE", 1, world,
                    "the ranks on this host, in [1, WORLD_SIZE]");
    if (!local.ok()) return local.status();
    o->local_world_size = *local;
    if (!Set(env, "CHUNKZERO_NUM_THREADS")) o->core_sharing_ranks = *local;
  }
  return absl::OkStatus();
}

}  // namespace chunkzero
