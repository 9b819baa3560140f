// World: the process groups of this process's ranks, for every topology
// chunkzero runs: ranks as threads in-process or over Gloo, one rank per
// process over Gloo, NCCL for GPU buffers with host-side agreement groups,
// and ranks sharing a GPU staged through pinned host memory.
//
//   WorldSpec spec;
//   spec.world_size = 4;                         // ranks as threads
//   spec.backend = WorldBackend::kGloo;          // TCP on loopback
//   CZ_ASSIGN_OR_RETURN(std::unique_ptr<World> world, MakeWorld(spec));
//   // on rank r's thread:
//   CZ_ASSIGN_OR_RETURN(comm::ProcessGroup* group, world->group(r));
//
// MakeWorld meets the other ranks (a rendezvous in memory for threads, or
// at spec.rendezvous: a directory, tcp://HOST:PORT, redis://HOST:PORT/PREFIX)
// and returns once every rank of this process has its groups; with Gloo it
// creates them on one thread per rank, since the ranks meet each other. It
// then deletes the keys this process's ranks set on a shared redis://
// server. A rank that cannot join (its GPU cannot be selected, its group
// cannot be created) tells the others at once, so they fail without
// waiting out the timeout; the error returned is the cause, "rank R: ...",
// not what it did to the others.
//
// On GPUs (spec.devices), group(r) routes collectives on device memory to
// NCCL (kNccl) or to the host group staged through pinned host memory, and
// host memory to the host group.
//
// Clean-up: the world owns every group, the stores and the staging memory.
// Leave(r) destroys rank r's groups early (a rank that failed resets its
// connections so that its peers fail fast); the destructor destroys the
// rest. Abort(cause) fails the in-process ranks' pending and later
// collectives with `cause`.
//
// Thread-safety: group(), Leave() and Abort() may be called from the ranks'
// threads concurrently, each rank's calls from its own thread.
#ifndef CHUNKZERO_COMM_WORLD_H_
#define CHUNKZERO_COMM_WORLD_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/mutex.h"
#include "comm/process_group.h"
#include "tensor/device.h"

namespace chunkzero {
namespace comm {

enum class WorldBackend {
  kInProcess,  // Threads sharing memory.
  kGloo,       // Threads or processes over TCP (shared memory on one host).
  kNccl,       // GPU buffers over NCCL; host buffers in-process (threads)
               // or over Gloo (processes).
};

struct WorldSpec {
  int world_size = 1;
  WorldBackend backend = WorldBackend::kInProcess;
  // -1: every rank is a thread of this process (rendezvous in memory);
  // else this process runs rank `rank` only, meeting the others at
  // `rendezvous` (see comm/rendezvous/rendezvous_store.h).
  int rank = -1;
  std::string rendezvous;
  // How errors name the rendezvous (e.g. the flag that gave it); empty:
  // "rendezvous <address>".
  std::string rendezvous_label;
  // The address this process's rank listens on and gives its peers (one
  // rank per process over Gloo); empty: loopback.
  std::string listen_address;
  // Each local rank's GPU, indexed by rank (threads: every rank; one rank
  // per process: element `rank`); empty: the ranks compute on the host.
  std::vector<Device> devices;
  // What every rank must agree on (Gloo compares it at the rendezvous and
  // fails naming the key).
  std::map<std::string, std::string> job_config;
  // How long a rank waits for its peers at the rendezvous and in a
  // collective.
  absl::Duration timeout = absl::Seconds(300);
};

class World {
 public:
  virtual ~World() = default;
  // The group rank `rank` of this process uses (a router over NCCL or
  // staging and the host group on GPUs). InvalidArgument for a rank this
  // process does not run, FailedPrecondition after Leave(rank).
  [[nodiscard]] virtual absl::StatusOr<ProcessGroup*> group(int rank) = 0;
  // The ranks this process runs, ascending.
  virtual const std::vector<int>& local_ranks() const = 0;
  // Destroys rank `rank`'s groups now (its peers see its connections
  // close); later group(rank) calls fail.
  virtual void Leave(int rank) = 0;
  // Fails the in-process ranks' pending and later collectives with
  // `cause` (over Gloo a rank's peers learn of a failure when it Leaves).
  virtual void Abort(const absl::Status& cause) = 0;
  // How rank 0's (or this process's rank's) collectives move data: e.g.
  // "in-process", "gloo over TCP", "gloo, shared memory for collectives
  // from 1 MiB", "nccl; host-side agreements in-process".
  virtual std::string transport() const = 0;
};

// Builds this process's ranks' groups as described above. InvalidArgument
// for a spec that cannot run (no ranks, a rank outside the world, NCCL
// without devices, a rendezvous that one rank per process lacks or that
// threads are given); the rendezvous' and the groups' errors, "rank R: "
// first.
[[nodiscard]] absl::StatusOr<std::unique_ptr<World>> MakeWorld(
    const WorldSpec& spec);

// True for a rank's failure that reports what another rank's failure did
// to it: an agreement's echo, a connection the failed rank's teardown
// reset, a collective cancelled or refused by an abort, a rendezvous a rank
// gave up. Ranks as threads fail in whatever order; the cause is the one
// failure that is not a consequence.
bool IsConsequenceOfAnotherFailure(const absl::Status& status);

// The cause among the failures of a world's ranks: the first one recorded
// that is not a consequence of another, else the first one, with "rank R: "
// before its message (a consequence kept as the cause stays marked as an
// echo, comm/agree.h). Thread-safe: every rank records its own failure.
//
//   FailureCause failures;
//   ... on rank r's thread: world->Abort(failures.Record(r, status));
//   if (!failures.cause().ok()) return failures.cause();
class FailureCause {
 public:
  // Records rank `rank`'s failure (non-OK) and returns the cause so far, a
  // copy that shares nothing with what other threads may record meanwhile.
  absl::Status Record(int rank, const absl::Status& status);
  // OK while nothing has failed.
  absl::Status cause() const;

 private:
  mutable Mutex mu_;
  absl::Status cause_ ABSL_GUARDED_BY(mu_);
};

}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_WORLD_H_
