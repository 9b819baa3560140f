#include "comm/world.h"

#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/detached_status.h"
#include "base/mutex.h"
#include "base/status_macros.h"
#include "base/thread.h"
#include "comm/agree.h"
#include "comm/gloo/gloo_process_group.h"
#include "comm/inprocess/in_process_group.h"
#include "comm/nccl/nccl_process_group.h"
#include "comm/rendezvous/rendezvous_store.h"
#include "comm/routing_process_group.h"
#include "comm/staging_process_group.h"
#include "gloo/rendezvous/hash_store.h"
#include "tensor/cuda/cuda_runtime.h"
#include "tensor/memory/allocator.h"
#include "tensor/memory/caching_allocator.h"

namespace chunkzero {
namespace comm {

bool IsConsequenceOfAnotherFailure(const absl::Status& status) {
  if (IsEchoedFailure(status)) return true;
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kCancelled:
      return true;
    case absl::StatusCode::kFailedPrecondition:
      return absl::StrContains(status.message(),
                               "gave up before the rendezvous completed") ||
             absl::StrContains(status.message(),
                               "aborted by an earlier failure");
    default:
      return false;
  }
}

absl::Status FailureCause::Record(int rank, const absl::Status& status) {
  MutexLock lock(&mu_);
  const bool consequence = IsConsequenceOfAnotherFailure(status);
  if (cause_.ok() || (!consequence && IsConsequenceOfAnotherFailure(cause_))) {
    cause_ = absl::Status(status.code(),
                          absl::StrCat("rank ", rank, ": ", status.message()));
    if (consequence) MarkEchoedFailure(cause_);
  }
  // Another rank may replace cause_ while the caller uses the copy
  // (base/detached_status.h).
  return DetachedCopy(cause_);
}

absl::Status FailureCause::cause() const {
  MutexLock lock(&mu_);
  return DetachedCopy(cause_);
}

namespace {

// One local rank's groups, and the pinned staging memory they use
// (declared first, so destroyed after them).
struct RankGroups {
  std::unique_ptr<PinnedHostAllocator> pinned;
  std::unique_ptr<CachingAllocator> staging_memory;
  std::unique_ptr<GlooProcessGroup> gloo;
  std::unique_ptr<NcclProcessGroup> nccl;
  std::unique_ptr<StagingProcessGroup> staged;
  std::unique_ptr<RoutingProcessGroup> routed;
  ProcessGroup* group = nullptr;  // What group() returns.
  bool left = false;

  // Destroys the groups, the outermost first.
  void Reset() {
    group = nullptr;
    routed.reset();
    staged.reset();
    nccl.reset();
    gloo.reset();
  }
};

class WorldImpl final : public World {
 public:
  explicit WorldImpl(const WorldSpec& spec) : spec_(spec) {
    if (spec.rank >= 0) {
      local_ranks_.push_back(spec.rank);
    } else {
      for (int r = 0; r < spec.world_size; ++r) local_ranks_.push_back(r);
    }
    for (int r : local_ranks_) ranks_[r];
  }

  ~WorldImpl() override {
    // Groups before the stores and the in-process world they meet through.
    for (auto& [r, groups] : ranks_) groups.Reset();
  }

  absl::StatusOr<ProcessGroup*> group(int rank) override {
    auto it = ranks_.find(rank);
    if (it == ranks_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank, " is not one of this process's ranks"));
    }
    if (it->second.left) {
      return absl::FailedPreconditionError(
          absl::StrCat("rank ", rank, " has left the world"));
    }
    return it->second.group;
  }

  const std::vector<int>& local_ranks() const override { return local_ranks_; }

  void Leave(int rank) override {
    auto it = ranks_.find(rank);
    if (it == ranks_.end()) return;
    it->second.left = true;
    it->second.Reset();
  }

  void Abort(const absl::Status& cause) override {
    if (in_process_) in_process_->Abort(cause);
  }

  std::string transport() const override { return transport_; }

  // Opens what the ranks meet through (called before any rank joins).
  absl::Status Open() {
    const bool nccl = spec_.backend == WorldBackend::kNccl;
    if (spec_.backend == WorldBackend::kInProcess || (nccl && spec_.rank < 0)) {
      in_process_ = std::make_unique<InProcessWorld>(spec_.world_size);
      transport_ = "in-process";
    } else if (spec_.rank < 0) {
      store_ = std::make_unique<gloo::rendezvous::HashStore>();
    }
    if (nccl && spec_.rank < 0) {
      nccl_store_ = std::make_unique<gloo::rendezvous::HashStore>();
    }
    if (spec_.rank >= 0) {
      CZ_ASSIGN_OR_RETURN(const RendezvousAddress address,
                          ParseRendezvousAddress(spec_.rendezvous));
      absl::StatusOr<std::unique_ptr<RendezvousStore>> store =
          RendezvousStore::Open(address, spec_.rank, spec_.timeout);
      if (!store.ok()) {
        return absl::Status(store.status().code(),
                            absl::StrCat("rank ", spec_.rank, ": ", Label(),
                                         ": ", store.status().message()));
      }
      process_store_ = *std::move(store);
    }
    return absl::OkStatus();
  }

  // Creates rank `r`'s groups; every local rank joins at once (with Gloo or
  // NCCL, on its own thread).
  absl::Status Join(int r) {
    RankGroups& mine = ranks_.at(r);
    const bool gpu = !spec_.devices.empty();
    const Device device = gpu ? spec_.devices.at(r) : Device::Cpu();
    std::optional<ScopedCudaDevice> on_gpu;
    if (gpu) {
      on_gpu.emplace(device.index());
      if (!on_gpu->status().ok()) {
        // Nothing below can run: the peers are told.
        GiveUp(r, on_gpu->status());
        return on_gpu->status();
      }
    }
    if (in_process_) {
      CZ_ASSIGN_OR_RETURN(mine.group, in_process_->group(r));
    } else {
      GlooOptions options;
      options.timeout = spec_.timeout;
      options.job_config = spec_.job_config;
      if (!spec_.listen_address.empty()) {
        options.hostname = spec_.listen_address;
      }
      absl::StatusOr<std::unique_ptr<GlooProcessGroup>> created =
          GlooProcessGroup::Create(r, spec_.world_size,
                                   store_ ? *store_ : process_store_->store(),
                                   options);
      if (!created.ok()) {
        if (process_store_ != nullptr) {
          return absl::Status(
              created.status().code(),
              absl::StrCat(created.status().message(), " [", Label(), "]"));
        }
        return created.status();
      }
      mine.gloo = *std::move(created);
      mine.group = mine.gloo.get();
      if (r == local_ranks_.front()) {
        transport_ =
            mine.gloo->uses_shared_memory()
                ? absl::StrFormat(
                      "gloo, shared memory for collectives from %.4g MiB",
                      options.min_shared_memory_bytes / 1048576.0)
                : "gloo over TCP";
      }
    }
    // On GPUs, collectives on GPU memory go to NCCL or through the host
    // group staged via pinned memory; host memory stays on the host group.
    if (gpu) {
      ProcessGroup* device_side = nullptr;
      if (spec_.backend == WorldBackend::kNccl) {
        NcclOptions options;
        options.timeout = spec_.timeout;
        // NCCL ranks started with different flags fail at the rendezvous
        // naming the flag, as Gloo's do.
        options.job_config = spec_.job_config;
        CZ_ASSIGN_OR_RETURN(
            mine.nccl,
            NcclProcessGroup::Create(
                r, spec_.world_size, device.index(),
                nccl_store_ ? *nccl_store_ : process_store_->store(), options));
        device_side = mine.nccl.get();
      } else {
        mine.pinned = std::make_unique<PinnedHostAllocator>();
        mine.staging_memory =
            std::make_unique<CachingAllocator>(mine.pinned.get());
        mine.staged = std::make_unique<StagingProcessGroup>(
            mine.group, device, mine.staging_memory.get());
        device_side = mine.staged.get();
      }
      mine.routed =
          std::make_unique<RoutingProcessGroup>(device_side, mine.group);
      if (r == local_ranks_.front()) {
        const std::string host_side = transport_;
        transport_ =
            spec_.backend == WorldBackend::kNccl
                ? absl::StrCat("nccl; host-side agreements ", host_side)
                : absl::StrCat(host_side,
                               ", staged through pinned host memory");
      }
      mine.group = mine.routed.get();
    }
    // Once every rank is at this barrier, every group's rendezvous is done
    // and nobody reads the store again: each rank deletes the keys it set
    // on a shared redis:// server, so that the job's prefix serves the next
    // job (only a job killed before here leaves keys, which the next job
    // under its prefix is refused for).
    if (process_store_ != nullptr && mine.gloo) {
      CZ_RETURN_IF_ERROR(Barrier(*mine.gloo));
      CZ_RETURN_IF_ERROR(process_store_->DeleteKeysItSet());
    }
    return absl::OkStatus();
  }

  // Tells the ranks meeting over Gloo (in memory or at the rendezvous)
  // that rank `r` will not come; in-process ranks need no telling.
  void GiveUp(int r, const absl::Status& why) {
    if (in_process_) return;
    if (store_) {
      GlooProcessGroup::AnnounceGiveUp(*store_, r, why);
    } else if (process_store_) {
      GlooProcessGroup::AnnounceGiveUp(process_store_->store(), r, why);
    }
  }

 private:
  std::string Label() const {
    return spec_.rendezvous_label.empty()
               ? absl::StrCat("rendezvous ", spec_.rendezvous)
               : spec_.rendezvous_label;
  }

  const WorldSpec spec_;
  std::vector<int> local_ranks_;
  std::string transport_;
  std::unique_ptr<InProcessWorld> in_process_;
  std::unique_ptr<gloo::rendezvous::HashStore> store_, nccl_store_;
  // One rank per process: its store (for tcp:// on rank 0 also the server,
  // which must outlive every rank's rendezvous).
  std::unique_ptr<RendezvousStore> process_store_;
  // Declared last: destroyed first (and by the destructor, explicitly).
  std::map<int, RankGroups> ranks_;
};

absl::Status CheckSpec(const WorldSpec& spec) {
  if (spec.world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a world of ", spec.world_size, " ranks: it needs one"));
  }
  if (spec.rank >= spec.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", spec.rank, " is outside a world of ", spec.world_size));
  }
  if (spec.rank >= 0 && spec.rendezvous.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", spec.rank,
        " runs alone in this process: it needs a rendezvous to meet the "
        "others at (a directory, tcp://HOST:PORT or "
        "redis://HOST:PORT/PREFIX)"));
  }
  if (spec.rank >= 0 && spec.backend == WorldBackend::kInProcess) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", spec.rank,
        " runs alone in this process, but the in-process backend connects "
        "threads of one process: use Gloo"));
  }
  if (spec.rank < 0 && !spec.rendezvous.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ranks as threads meet in memory; the rendezvous ",
                     spec.rendezvous, " is for one rank per process"));
  }
  if (spec.backend == WorldBackend::kNccl && spec.devices.empty()) {
    return absl::InvalidArgumentError(
        "NCCL moves GPU buffers: the ranks need their GPUs (devices)");
  }
  if (!spec.devices.empty()) {
    const size_t needed = spec.rank >= 0 ? spec.rank + 1 : spec.world_size;
    if (spec.devices.size() < needed) {
      return absl::InvalidArgumentError(
          absl::StrCat(spec.devices.size(), " devices for ranks up to ",
                       needed - 1, ": one per rank"));
    }
  }
  if (spec.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a rendezvous timeout of ", absl::FormatDuration(spec.timeout)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<World>> MakeWorld(const WorldSpec& spec) {
  CZ_RETURN_IF_ERROR(CheckSpec(spec));
  auto world = std::make_unique<WorldImpl>(spec);
  CZ_RETURN_IF_ERROR(world->Open());
  // The cause is returned once every rank has tried; nothing to abort
  // meanwhile (a rank that fails to join tells the others itself).
  FailureCause failures;
  auto fail = [&failures](int r, const absl::Status& status) {
    failures.Record(r, status).IgnoreError();
  };
  const bool concurrent =
      spec.rank < 0 && spec.world_size > 1 &&
      (spec.backend != WorldBackend::kInProcess || !spec.devices.empty());
  if (!concurrent) {
    for (int r : world->local_ranks()) {
      const absl::Status joined = world->Join(r);
      if (!joined.ok()) fail(r, joined);
    }
  } else {
    std::vector<std::thread> threads;
    for (int r : world->local_ranks()) {
      absl::StatusOr<std::thread> thread = StartThread(
          absl::StrCat("the thread that joins rank ", r), [&world, &fail, r] {
            const absl::Status joined = world->Join(r);
            if (!joined.ok()) fail(r, joined);
          });
      if (!thread.ok()) {
        const absl::Status why(
            thread.status().code(),
            absl::StrCat(thread.status().message(),
                         "; run fewer ranks as threads, or one process per "
                         "rank"));
        fail(r, why);
        // The ranks already started wait for this one in the rendezvous.
        world->GiveUp(r, why);
        break;
      }
      threads.push_back(*std::move(thread));
    }
    for (std::thread& t : threads) t.join();
  }
  CZ_RETURN_IF_ERROR(failures.cause());
  return world;
}

}  // namespace comm
}  // namespace chunkzero
