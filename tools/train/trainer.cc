#include "tools/train/trainer.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/detached_status.h"
#include "base/file.h"
#include "base/file_lock.h"
#include "base/mutex.h"
#include "base/parallel_for.h"
#include "base/status_macros.h"
#include "base/thread.h"
#include "comm/agree.h"
#include "comm/gather.h"
#include "comm/gloo/bind_address.h"
#include "comm/gloo/gloo_process_group.h"
#include "comm/gloo/rendezvous_store.h"
#include "comm/inprocess/in_process_group.h"
#include "comm/nccl/nccl_process_group.h"
#include "comm/process_group.h"
#include "comm/routing_process_group.h"
#include "comm/staging_process_group.h"
#include "engine/engine.h"
#include "gloo/rendezvous/hash_store.h"
#include "models/gpt2/gemm.h"
#include "models/gpt2/gpt_checkpoint.h"
#include "optim/zero_optimizer.h"
#include "tensor/allocator.h"
#include "tensor/caching_allocator.h"
#include "tensor/cuda_runtime.h"
#include "tensor/memory_tracker.h"
#include "tools/train/step_metrics.h"
#include "tools/train/token_data.h"
#include "tools/train/train_flags.h"
#include "tools/train/train_plan.h"

namespace chunkzero {

namespace {

// The lock file --save's directory holds while a job saves into it.
constexpr char kSaveLockName[] = "lock";

// Raises this process's soft limit on file descriptors to the hard one if
// the Gloo ranks need more than it, and checks that they then fit.
absl::Status RaiseFileDescriptorLimit(const TrainOptions& o) {
  struct rlimit limit;
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return absl::OkStatus();
  if (static_cast<int64_t>(limit.rlim_cur) < FileDescriptorsNeeded(o) &&
      limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
    ::getrlimit(RLIMIT_NOFILE, &limit);
  }
  return CheckFileDescriptorLimit(o, static_cast<int64_t>(limit.rlim_cur));
}

// What every rank of a job must agree on, compared at the rendezvous so
// that ranks started with different flags fail at once, naming the flag.
std::map<std::string, std::string> RendezvousConfig(const TrainPlan& plan) {
  const TrainOptions& o = plan.options;
  std::map<std::string, std::string> config = CheckpointConfig(plan);
  config["context"] = absl::StrCat(plan.seq_len);
  config["batch"] = absl::StrCat(o.batch);
  config["grad_accum"] = absl::StrCat(o.grad_accum);
  config["steps"] = absl::StrCat(o.steps);
  config["storage"] = std::string(ChunkLayoutName(o.storage));
  config["chunk_size"] = absl::StrCat(plan.chunk_size.value_or(0));
  config["offload"] = std::string(OffloadFlagValue(o.offload));
  config["device"] = std::string(DeviceFlagValue(o.device));
  config["backend"] = std::string(BackendFlagValue(o.backend));
  config["fused_attention"] = o.fused_attention ? "true" : "false";
  config["param_order"] = std::string(ParamOrderFlagValue(o.param_order));
  config["save"] = o.save;
  config["resume"] = o.resume;
  config["seed"] = absl::StrCat(o.seed);
  config["lr"] = absl::StrCat(o.lr);
  config["data"] = absl::StrCat(plan.data.size(), " tokens");
  return config;
}

// True for a rank's failure that reports what another rank's failure did
// to it: an agreement's echo, a connection the failed rank's teardown
// reset, a collective cancelled or refused by an abort, a rendezvous a rank
// gave up. Ranks as threads report in whatever order they fail; the cause
// is reported before these.
bool IsConsequence(const absl::Status& status) {
  if (comm::IsEchoedFailure(status)) return true;
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

// One rank's whole run: the GPT-2 model and its data, trained through the
// engine (engine/engine.h).
class RankRunner {
 public:
  // `result` is filled on rank 0 only. `device` is where the rank's chunks
  // compute: its GPU for --device=cuda, else the simulated device (used
  // with --offload or a device memory limit).
  RankRunner(const TrainPlan& plan, comm::ProcessGroup& group, Device device,
             const StepCallback& on_step, TrainResult* result)
      : plan_(plan),
        o_(plan.options),
        device_(device),
        group_(group),
        on_step_(on_step),
        result_(result) {}

  // Never throws: what the planning could not foresee (an allocation that
  // fails) is a status, reported before the runner is torn down.
  absl::Status Run() {
    try {
      return RunSteps();
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError(
          "out of memory (an allocation failed)");
    } catch (const std::exception& e) {
      return absl::InternalError(
          absl::StrCat("unexpected exception: ", e.what()));
    }
  }

 private:
  absl::Status RunSteps() {
    CZ_RETURN_IF_ERROR(SetUp());
    const int64_t first = engine_->step();
    if (rank() == 0) result_->first_step = first;
    for (int64_t step = first; step < o_.steps; ++step) {
      CZ_RETURN_IF_ERROR(TrainStep(step), "step ", step + 1);
      const bool last = step + 1 == o_.steps;
      if (!o_.save.empty() &&
          (last || (o_.save_every > 0 && (step + 1) % o_.save_every == 0))) {
        // A save that fails anywhere fails on every rank and leaves the
        // previous checkpoint whole.
        CZ_RETURN_IF_ERROR(engine_->Save(o_.save, CheckpointConfig(plan_)),
                           "saving to ", o_.save);
      }
    }
    // Model data only: the model's working buffers (reported under a
    // device memory limit) are not chunk payloads.
    CZ_ASSIGN_OR_RETURN(
        std::vector<std::vector<int64_t>> all,
        comm::AllGatherInt64(group_, {engine_->AtRestBytes()}, timeout()));
    if (rank() == 0) {
      result_->at_rest_bytes.clear();
      for (const auto& r : all) result_->at_rest_bytes.push_back(r[0]);
    }
    if (!o_.export_path.empty()) {
      CZ_ASSIGN_OR_RETURN(auto dict, engine_->GatherWeights());
      absl::Status exported;
      if (rank() == 0) exported = WriteGptCheckpoint(o_.export_path, dict);
      CZ_RETURN_IF_ERROR(
          engine_->Agree(exported, "the --export file could not be written"),
          "--export=", o_.export_path);
    }
    return absl::OkStatus();
  }

  int rank() const { return group_.rank(); }
  absl::Duration timeout() const { return absl::Seconds(o_.comm_timeout_s); }

  // The engine's options from the flags: the device the chunks compute on
  // is the GPU, or the simulated device when something is offloaded or
  // capped, else the host.
  EngineOptions MakeEngineOptions() const {
    const bool gpu = o_.device == ComputeDevice::kCuda;
    const bool capped = o_.device_memory_limit > 0;
    EngineOptions e;
    e.chunk_size = plan_.chunk_size;
    e.layout = o_.storage;
    e.precision = o_.precision;
    e.device = gpu || o_.offload != OffloadPolicy::kNone || capped
                   ? device_
                   : Device::Cpu();
    // An `auto` the device limit leaves no room in rests on the host, as
    // `params` does (TrainPlan::auto_rests_on_host).
    e.offload = o_.offload == OffloadPolicy::kAuto && plan_.auto_rests_on_host
                    ? OffloadPolicy::kParams
                    : o_.offload;
    e.device_memory_limit = o_.device_memory_limit;
    e.max_prefetch = o_.max_prefetch;
    if (o_.param_order == ParamOrder::kLayers) e.first_use_order = plan_.order;
    e.comm_timeout = timeout();
    return e;
  }

  absl::Status SetUp() {
    EngineOptions engine_options = MakeEngineOptions();
    ZeroOptimizerOptions& opt = engine_options.optimizer;
    opt.kind = o_.optimizer;
    CZ_ASSIGN_OR_RETURN(opt.lr,
                        LrSchedule::WarmupCosine(o_.lr, o_.min_lr, o_.warmup,
                                                 std::max(o_.steps, 1)));
    if (o_.weight_decay >= 0) opt.weight_decay = o_.weight_decay;
    opt.max_grad_norm = o_.clip;
    const bool gpu = o_.device == ComputeDevice::kCuda;
    CZ_ASSIGN_OR_RETURN(model_,
                        GptModel::Create(plan_.model, o_.seed, DType::kF32,
                                         gpu ? device_ : Device::Cpu()));
    model_->set_matmul_precision(MatmulPrecision(o_.precision));
    CZ_RETURN_IF_ERROR(model_->set_fused_attention(o_.fused_attention));
    // The model's working buffers count against the device they live on.
    if (o_.device_memory_limit > 0 || gpu) {
      CZ_RETURN_IF_ERROR(model_->set_memory_accounting(&tracker_, device_));
    }
    if (plan_.init.has_value()) {
      CZ_RETURN_IF_ERROR(model_->LoadStateDict(plan_.init->state),
                         "--init=", o_.init);
    }
    CZ_ASSIGN_OR_RETURN(
        engine_, Engine::Create(group_, *model_, engine_options, &tracker_));
    if (!o_.resume.empty()) {
      CZ_RETURN_IF_ERROR(engine_
                             ->Resume(o_.resume, CheckpointConfig(plan_),
                                      absl::StrCat("--resume=", o_.resume))
                             .status());
    }
    const size_t tokens_per_rank =
        static_cast<size_t>(o_.batch) * plan_.seq_len;
    inputs_.assign(o_.grad_accum, std::vector<int32_t>(tokens_per_rank));
    targets_.assign(o_.grad_accum, std::vector<int32_t>(tokens_per_rank));
    return absl::OkStatus();
  }

  absl::Status TrainStep(int64_t step) {
    const BatchOrder order{o_.batch, o_.world_size, o_.grad_accum,
                           plan_.seq_len};
    for (int m = 0; m < o_.grad_accum; ++m) {
      CZ_RETURN_IF_ERROR(plan_.data.FillBatch(order, step, m, rank(),
                                              absl::MakeSpan(inputs_[m]),
                                              absl::MakeSpan(targets_[m])));
    }
    CZ_ASSIGN_OR_RETURN(
        StepMetrics m,
        engine_->Step(
            o_.grad_accum,
            [&](ParamHooks& hooks, int micro) -> absl::StatusOr<double> {
              return model_->Forward(hooks, o_.batch, plan_.seq_len,
                                     inputs_[micro], targets_[micro]);
            },
            [&](ParamHooks& hooks, int, float loss_scale) {
              return model_->Backward(hooks, loss_scale);
            }));
    absl::Status reported;
    if (rank() == 0) {
      m.steps = o_.steps;
      m.tokens_per_s = static_cast<double>(o_.batch) * plan_.seq_len *
                       o_.world_size * o_.grad_accum / m.step_time_s;
      result_->steps.push_back(m);
      if (on_step_) reported = on_step_(m);
    }
    // A report that failed (say, a full disk under --metrics_out) ends the
    // run on every rank.
    return engine_->Agree(reported, "the step could not be reported");
  }

  const TrainPlan& plan_;
  const TrainOptions& o_;
  const Device device_;
  comm::ProcessGroup& group_;
  const StepCallback& on_step_;
  TrainResult* result_;
  // Destroyed in reverse: the engine, then the model (which reports its
  // buffers to the tracker), then the tracker.
  MemoryTracker tracker_;
  std::unique_ptr<GptModel> model_;
  std::unique_ptr<Engine> engine_;
  // Each micro-batch's tokens, filled before the step.
  std::vector<std::vector<int32_t>> inputs_, targets_;
};

// This process's rank's store at --rendezvous (checked by PlanTraining).
absl::StatusOr<std::unique_ptr<comm::RendezvousStore>> OpenProcessRendezvous(
    const TrainOptions& options) {
  CZ_ASSIGN_OR_RETURN(const comm::RendezvousAddress address,
                      comm::ParseRendezvousAddress(options.rendezvous));
  absl::StatusOr<std::unique_ptr<comm::RendezvousStore>> store =
      comm::RendezvousStore::Open(address, options.rank,
                                  absl::Seconds(options.comm_timeout_s));
  if (!store.ok()) {
    return absl::Status(store.status().code(),
                        absl::StrCat("rank ", options.rank,
                                     ": --rendezvous=", options.rendezvous,
                                     ": ", store.status().message()));
  }
  return store;
}

// The address this process's rank listens on: --interface's, else the
// route's to the rendezvous server, else loopback. NCCL, which finds its
// own interface, is pointed at the same one unless NCCL_SOCKET_IFNAME says
// otherwise.
absl::StatusOr<std::string> ListenAddress(const TrainOptions& options) {
  if (!options.interface.empty()) {
    absl::StatusOr<std::string> address =
        comm::InterfaceAddress(options.interface);
    if (!address.ok()) {
      return absl::Status(
          address.status().code(),
          absl::StrCat(options.interface_source, "=", options.interface, ": ",
                       address.status().message()));
    }
    setenv("NCCL_SOCKET_IFNAME", options.interface.c_str(), /*overwrite=*/0);
    return address;
  }
  CZ_ASSIGN_OR_RETURN(const comm::RendezvousAddress rendezvous,
                      comm::ParseRendezvousAddress(options.rendezvous));
  const bool other_hosts = options.local_world_size > 0 &&
                           options.world_size > options.local_world_size;
  if (!rendezvous.IsNetworked()) {
    // A directory (on a shared filesystem) shows no route to the other
    // hosts; loopback would leave them timing out on connects to it.
    if (other_hosts) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--rendezvous=", options.rendezvous, ": ranks on other hosts (",
          options.world_size, " ranks, ", options.local_world_size,
          " on this host) meeting in a directory need this host's network "
          "interface named with --interface (or GLOO_SOCKET_IFNAME)"));
    }
    return std::string("127.0.0.1");
  }
  absl::StatusOr<std::string> address =
      comm::LocalAddressToward(rendezvous.host, rendezvous.port);
  if (!address.ok()) {
    return absl::Status(
        address.status().code(),
        absl::StrCat("--rendezvous=", options.rendezvous, ": ",
                     address.status().message(),
                     "; name this host's interface with --interface"));
  }
  // A host that reaches the store over loopback (MASTER_ADDR resolving to
  // 127.0.1.1 on itself, say) would give ranks on other hosts an address
  // they cannot use: they would time out, much later, saying less.
  if (other_hosts && comm::IsLoopbackAddress(*address)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rendezvous=", options.rendezvous, ": this host reaches ",
        rendezvous.host, " over loopback (", *address,
        "), an address ranks on other hosts cannot reach (", options.world_size,
        " ranks, ", options.local_world_size,
        " on this host); name this host's network interface with --interface "
        "(or GLOO_SOCKET_IFNAME)"));
  }
  return address;
}

}  // namespace

gemm::Precision MatmulPrecision(DType precision) {
  return precision == DType::kBF16 ? gemm::Precision::kBf16
                                   : gemm::Precision::kF32;
}

absl::StatusOr<TrainResult> RunTraining(const TrainOptions& options,
                                        const StepCallback& on_step) {
  CZ_ASSIGN_OR_RETURN(const TrainPlan plan, PlanTraining(options));
  CZ_RETURN_IF_ERROR(CheckTrainOutputs(options));
  // One job at a time saves into a directory: a second one would race the
  // first's commits (rank 0's process holds the lock for the whole run).
  std::unique_ptr<FileLock> save_lock;
  if (!options.save.empty() && options.rank <= 0) {
    absl::StatusOr<std::unique_ptr<FileLock>> locked =
        FileLock::TryAcquire(JoinPath(options.save, kSaveLockName));
    if (!locked.ok()) {
      return absl::Status(
          locked.status().code(),
          absl::StrCat(
              "--save=", options.save,
              " is in use by another training job: ", locked.status().message(),
              "; wait for it to finish or save elsewhere"));
    }
    save_lock = *std::move(locked);
  }
  if (options.backend == Backend::kGloo) {
    CZ_RETURN_IF_ERROR(RaiseFileDescriptorLimit(options));
  }
  TrainResult result;
  result.auto_rests_on_host = plan.auto_rests_on_host;
  result.model = plan.model;
  result.seq_len = plan.seq_len;
  result.parameters = GptParameterCount(plan.model);
  result.chunk_size = plan.chunk_size.value_or(0);
  result.chunk_utilisation = plan.utilisation;
  result.chunk_bytes = plan.chunk_size.value_or(plan.largest_tensor) *
                       ElementSize(options.precision);

  // The ranks' host process groups: one in-process world, or one Gloo
  // group per rank over TCP, rendezvousing through a shared in-memory store
  // (threads) or a FileStore directory (one rank per process). With NCCL
  // they carry the host-side agreements: in-process for threads, Gloo for
  // processes; NCCL meets through its own store (threads) or the same
  // directory.
  const bool gpu = options.device == ComputeDevice::kCuda;
  const bool nccl = options.backend == Backend::kNccl;
  std::unique_ptr<comm::InProcessWorld> world;
  std::unique_ptr<gloo::rendezvous::HashStore> store, nccl_store;
  if (options.backend == Backend::kInProcess || (nccl && options.rank < 0)) {
    world = std::make_unique<comm::InProcessWorld>(options.world_size);
    result.comm_transport = "in-process";
  } else if (options.rank < 0) {
    store = std::make_unique<gloo::rendezvous::HashStore>();
  }
  if (nccl && options.rank < 0) {
    nccl_store = std::make_unique<gloo::rendezvous::HashStore>();
  }
  const int gpus = gpu ? CudaDeviceCount() : 0;
  comm::NcclOptions nccl_options;
  nccl_options.timeout = absl::Seconds(options.comm_timeout_s);
  if (gpu) {
    result.compute_device =
        absl::StrCat("cuda (", gpus, gpus == 1 ? " GPU" : " GPUs",
                     ", rank r on cuda:r mod ", gpus, ")");
    result.gemm_kernel = options.precision == DType::kBF16
                             ? "cuBLAS, bf16 tensor cores with f32 accumulation"
                             : "cuBLAS f32";
  }
  comm::GlooOptions gloo_options;
  gloo_options.timeout = absl::Seconds(options.comm_timeout_s);
  gloo_options.job_config = RendezvousConfig(plan);
  // One rank per process: its store (for tcp:// on rank 0 also the server,
  // which must outlive every rank's rendezvous, so it lives for the run) and
  // the address it listens on.
  std::unique_ptr<comm::RendezvousStore> process_store;
  if (options.rank >= 0) {
    // The address first: it may set NCCL_SOCKET_IFNAME, which must happen
    // before any thread (the tcp:// server's) runs.
    CZ_ASSIGN_OR_RETURN(gloo_options.hostname, ListenAddress(options));
    CZ_ASSIGN_OR_RETURN(process_store, OpenProcessRendezvous(options));
  }
  // The first failure is the cause; later ones are what it did to the others.
  Mutex failure_mu;
  absl::Status first_failure;
  auto fail = [&](int r, const absl::Status& status) {
    absl::Status cause;
    {
      MutexLock lock(&failure_mu);
      const bool consequence = IsConsequence(status);
      if (first_failure.ok() ||
          (!consequence && IsConsequence(first_failure))) {
        first_failure = absl::Status(
            status.code(), absl::StrCat("rank ", r, ": ", status.message()));
        if (consequence) comm::MarkEchoedFailure(first_failure);
      }
      // A copy sharing nothing with first_failure, which another rank may
      // replace meanwhile (base/detached_status.h).
      cause = DetachedCopy(first_failure);
    }
    // A failed rank must not leave the others waiting in a collective:
    // abort the in-process world; a Gloo group resets its connections when
    // it is destroyed.
    if (world) world->Abort(cause);
  };
  // In-process ranks split the cores: each rank's kernels use its share of
  // ParallelFor's one pool (a process that is one rank has them all; the
  // launcher gives each such process its share through
  // CHUNKZERO_NUM_THREADS).
  const int ranks_here =
      options.rank >= 0 ? options.core_sharing_ranks : options.world_size;
  result.threads_per_rank = ParallelThreadsShare(ranks_here);
  if (!gpu) {
    result.gemm_kernel =
        gemm::GemmKernelName(MatmulPrecision(options.precision));
  }
  auto run_rank = [&](int r) {
    ScopedParallelThreads share(result.threads_per_rank);
    // This rank's GPU is the thread's current one for the whole run (the
    // chunks' kernels run on the current GPU).
    const int on_host = options.local_rank >= 0 ? options.local_rank : r;
    const Device device =
        gpu ? Device::Cuda(on_host % gpus) : Device::Simulated(0);
    std::optional<ScopedCudaDevice> on_gpu;
    if (gpu) on_gpu.emplace(device.index());
    absl::Status status =
        on_gpu.has_value() ? on_gpu->status() : absl::OkStatus();
    // Pinned, cached host memory for collectives staged through the host
    // (ranks sharing a GPU), declared before the groups that use it.
    PinnedHostAllocator pinned;
    CachingAllocator staging_memory(&pinned);
    std::unique_ptr<comm::GlooProcessGroup> gloo_group;
    std::unique_ptr<comm::NcclProcessGroup> nccl_group;
    std::unique_ptr<comm::StagingProcessGroup> staged_group;
    std::unique_ptr<comm::RoutingProcessGroup> routed_group;
    comm::ProcessGroup* group = nullptr;
    if (!status.ok()) {
      // The GPU could not be selected: nothing below can run, and the
      // peers meeting over Gloo are told at once.
      gloo::rendezvous::Store* meeting =
          store ? store.get()
                : (process_store ? &process_store->store() : nullptr);
      if (meeting != nullptr && !world) {
        comm::GlooProcessGroup::AnnounceGiveUp(*meeting, r, status);
      }
    } else if (world) {
      absl::StatusOr<comm::ProcessGroup*> mine = world->group(r);
      if (mine.ok()) {
        group = *mine;
      } else {
        status = mine.status();
      }
    } else {
      absl::StatusOr<std::unique_ptr<comm::GlooProcessGroup>> created =
          comm::GlooProcessGroup::Create(
              r, options.world_size, store ? *store : process_store->store(),
              gloo_options);
      if (!created.ok() && process_store != nullptr) {
        created = absl::Status(
            created.status().code(),
            absl::StrCat(created.status().message(),
                         " [--rendezvous=", options.rendezvous, "]"));
      }
      if (created.ok()) {
        gloo_group = *std::move(created);
        group = gloo_group.get();
        if (r == 0) {
          result.comm_transport =
              gloo_group->uses_shared_memory()
                  ? absl::StrFormat(
                        "gloo, shared memory for collectives from %.4g MiB",
                        gloo_options.min_shared_memory_bytes / 1048576.0)
                  : "gloo over TCP";
        }
      } else {
        status = created.status();
      }
    }
    // On GPUs, collectives on GPU memory go to NCCL or through the host
    // group staged via pinned memory; host memory stays on the host group.
    if (gpu && group != nullptr) {
      comm::ProcessGroup* device_side = nullptr;
      if (nccl) {
        absl::StatusOr<std::unique_ptr<comm::NcclProcessGroup>> created =
            comm::NcclProcessGroup::Create(
                r, options.world_size, device.index(),
                nccl_store ? *nccl_store : process_store->store(),
                nccl_options);
        if (created.ok()) {
          nccl_group = *std::move(created);
          device_side = nccl_group.get();
        } else {
          status = created.status();
        }
      } else {
        staged_group = std::make_unique<comm::StagingProcessGroup>(
            group, device, &staging_memory);
        device_side = staged_group.get();
      }
      if (device_side != nullptr) {
        routed_group =
            std::make_unique<comm::RoutingProcessGroup>(device_side, group);
        if (r == 0) {
          result.comm_transport =
              nccl ? absl::StrCat("nccl; host-side agreements ",
                                  result.comm_transport)
                   : absl::StrCat(result.comm_transport,
                                  ", staged through pinned host memory");
        }
      }
      group = routed_group.get();
    }
    // Once every rank is at this barrier, every group's rendezvous is done
    // and nobody reads the store again: each rank deletes the keys it set
    // on a shared redis:// server, so that the job's prefix serves the next
    // job (only a job killed before here leaves keys, which the next job
    // under its prefix is refused for).
    if (group != nullptr && process_store != nullptr && gloo_group) {
      status = comm::Barrier(*gloo_group);
      if (status.ok()) status = process_store->DeleteKeysItSet();
      if (!status.ok()) group = nullptr;
    }
    bool reported = false;
    if (group != nullptr) {
      // No exception may end the process from a rank's thread: what the
      // planning could not foresee (an allocation that fails) is an error
      // of this rank like any other.
      try {
        RankRunner runner(plan, *group, device, on_step, &result);
        status = runner.Run();
        // Reported before the runner is torn down: a tear-down with
        // collectives in flight aborts the group (ChunkManager), and the
        // peers' failures it causes must not pass for the first one.
        if (!status.ok()) {
          fail(r, status);
          reported = true;
        }
      } catch (const std::bad_alloc&) {
        status = absl::ResourceExhaustedError(
            "out of memory (an allocation failed)");
      } catch (const std::exception& e) {
        status = absl::InternalError(
            absl::StrCat("unexpected exception: ", e.what()));
      }
    }
    if (!status.ok() && !reported) fail(r, status);
  };
  std::vector<std::thread> threads;
  if (options.rank >= 0) {
    run_rank(options.rank);  // This process is one rank.
  } else {
    for (int r = 0; r < options.world_size; ++r) {
      absl::StatusOr<std::thread> thread =
          StartThread(absl::StrCat("the thread of rank ", r),
                      [&run_rank, r] { run_rank(r); });
      if (!thread.ok()) {
        const absl::Status why(
            thread.status().code(),
            absl::StrCat(thread.status().message(),
                         "; run fewer ranks as threads (--world_size) or one "
                         "process per rank (tools/train/launch.sh)"));
        fail(r, why);
        // The ranks already started wait for this one in the rendezvous.
        if (store) comm::GlooProcessGroup::AnnounceGiveUp(*store, r, why);
        break;
      }
      threads.push_back(*std::move(thread));
    }
  }
  for (std::thread& t : threads) t.join();
  MutexLock lock(&failure_mu);
  if (!first_failure.ok()) {
    return absl::Status(first_failure.code(), first_failure.message());
  }
  return result;
}

}  // namespace chunkzero
