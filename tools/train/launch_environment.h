// torchrun's and Slurm's environment conventions, so that the train job
// runs one rank per process under the launchers clusters already have
// (torchrun-like wrappers, srun) with no wrapper of its own:
//
//   export RANK=3 WORLD_SIZE=8 LOCAL_RANK=1 MASTER_ADDR=node0
//   MASTER_PORT=29500 train --steps=20
//   srun --ntasks=8 --ntasks-per-node=2 train --steps=20
//
// With no --rank on the command line and RANK set, the job is one rank per
// process:
//  - RANK, WORLD_SIZE: this process's rank and the job's ranks (a
//    --world_size on the command line must agree);
//  - the rendezvous: --rendezvous if given, else CHUNKZERO_RENDEZVOUS (any
//    form of comm/rendezvous/rendezvous_store.h), else
//    tcp://MASTER_ADDR:MASTER_PORT (rank 0 hosts the store, as torchrun's rank
//    0 does);
//  - --backend: gloo unless the command line names one; a command line's
//    --backend=inproc (every rank a thread of this process) contradicts the
//    environment and is refused, naming both.
// With neither --rank nor RANK, Slurm's variables are read the same way
// when srun started this process as one of several tasks (SLURM_NTASKS > 1):
// SLURM_PROCID and SLURM_NTASKS for RANK and WORLD_SIZE, SLURM_LOCALID and
// SLURM_NTASKS_PER_NODE for LOCAL_RANK and LOCAL_WORLD_SIZE (those two
// win where a script sets them), and the store at MASTER_ADDR, else the
// first host of SLURM_JOB_NODELIST, on MASTER_PORT, else 29500.
// The command line wins over the environment everywhere; with --rank given
// RANK, WORLD_SIZE and the rendezvous variables are not read. For any rank
// of its own process (from RANK or --rank), LOCAL_RANK places it on its
// host (its GPU is LOCAL_RANK mod the GPUs visible), LOCAL_WORLD_SIZE is
// the ranks on this host (which also share its cores, unless
// CHUNKZERO_NUM_THREADS fixes them), and --interface defaults to
// GLOO_SOCKET_IFNAME. Numbers are decimal digits alone: " 0" and "+1" are
// refused. Ranks that are threads of one process read none of
// these; but with no --rank, a RANK that is set and empty, or a WORLD_SIZE
// other than 1 or a CHUNKZERO_RENDEZVOUS without RANK, is refused: a
// launcher's environment missing its RANK would otherwise train a job of
// its own and report success. CHUNKZERO_NUM_THREADS, where set, must be a
// count in [1, 4096].
#ifndef CHUNKZERO_TOOLS_TRAIN_LAUNCH_ENVIRONMENT_H_
#define CHUNKZERO_TOOLS_TRAIN_LAUNCH_ENVIRONMENT_H_

#include <functional>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tools/train/train_options.h"

namespace chunkzero {

// Reads an environment variable: nullptr when unset (std::getenv).
using EnvLookup = std::function<const char*(const char*)>;

// Applies the conventions above to `options`, which holds the command
// line's values; `given` names the flags the command line set (without
// dashes). InvalidArgument naming the variable (and its value) for a
// number that does not parse or is out of range, a WORLD_SIZE missing or
// disagreeing with --world_size, RANK set with no rendezvous, or a
// launcher's variables without RANK (above).
// The first host of a Slurm node list ("node[01-04,07],gpu5" -> "node01");
// InvalidArgument naming SLURM_JOB_NODELIST for one it cannot read.
[[nodiscard]] absl::StatusOr<std::string> FirstSlurmHost(
    absl::string_view nodelist);

[[nodiscard]] absl::Status ApplyLaunchEnvironment(
    const EnvLookup& env, const std::set<std::string>& given,
    TrainOptions* options);

}  // namespace chunkzero

#endif  // CHUNKZERO_TOOLS_TRAIN_LAUNCH_ENVIRONMENT_H_
