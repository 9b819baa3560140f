#include "tools/train/trainer.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/crc32c.h"
#include "base/file.h"
#include "base/file_lock.h"
#include "base/parallel_for.h"
#include "base/status_macros.h"
#include "base/thread.h"
#include "checkpoint/checkpoint.h"
#include "comm/agree.h"
#include "comm/gather.h"
#include "comm/net/bind_address.h"
#include "comm/process_group.h"
#include "comm/rendezvous/rendezvous_store.h"
#include "comm/world.h"
#include "engine/engine.h"
#include "io/pretrained/pretrained_directory.h"
#include "kernels/gemm.h"
#include "models/common/language_model.h"
#include "models/gpt2/gpt_checkpoint.h"
#include "models/llama/llama_checkpoint.h"
#include "optim/zero_optimizer.h"
#include "tensor/cuda/cuda_runtime.h"
#include "tensor/memory/memory_tracker.h"
#include "tools/train/engine_spec.h"
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

// --save's directory, claimed by rank 0's process for the job: made if
// missing and locked against a second job. A job that fails before it has
// saved leaves nothing behind it made: the lock file (unless it was there
// before, or a checkpoint now is) and the directory (if it made it and it is
// empty) go again.
class SaveClaim {
 public:
  static absl::StatusOr<std::unique_ptr<SaveClaim>> Take(
      const std::string& dir) {
    struct stat st;
    const bool existed = ::stat(dir.c_str(), &st) == 0;
    CZ_RETURN_IF_ERROR(CreateDirectories(dir), "--save=", dir);
    const std::string lock_path = JoinPath(dir, kSaveLockName);
    const bool lock_existed = ::lstat(lock_path.c_str(), &st) == 0;
    absl::StatusOr<std::unique_ptr<FileLock>> locked =
        FileLock::TryAcquire(lock_path);
    if (!locked.ok()) {
      if (!existed) ::rmdir(dir.c_str());
      return absl::Status(
          locked.status().code(),
          absl::StrCat("--save=", dir, " is in use by another training job: ",
                       locked.status().message(),
                       "; wait for it to finish or save elsewhere"));
    }
    return std::unique_ptr<SaveClaim>(
        new SaveClaim(dir, existed, lock_existed, *std::move(locked)));
  }
  // The job succeeded: everything stays.
  void Keep() { keep_ = true; }
  ~SaveClaim() {
    if (!keep_) {
      struct stat st;
      const bool checkpoint =
          ::stat(JoinPath(dir_, kCheckpointManifestName).c_str(), &st) == 0;
      // Removed while held: a job that opened it meanwhile retries on what
      // the path names next (FileLock::Remove).
      if (!lock_existed_ && !checkpoint) (void)lock_->Remove();
      lock_.reset();
      if (!existed_) ::rmdir(dir_.c_str());  // Only if empty.
    }
  }

 private:
  SaveClaim(std::string dir, bool existed, bool lock_existed,
            std::unique_ptr<FileLock> lock)
      : dir_(std::move(dir)),
        existed_(existed),
        lock_existed_(lock_existed),
        lock_(std::move(lock)) {}
  const std::string dir_;
  const bool existed_, lock_existed_;
  std::unique_ptr<FileLock> lock_;
  bool keep_ = false;
};

// "<bytes> bytes, crc32c <hex>" of the regular file `path`, read through
// once in blocks.
absl::StatusOr<std::string> FileFingerprint(const std::string& path) {
  const int fd_number = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_number < 0) return ErrnoError("cannot open", path);
  FileDescriptor fd(fd_number);
  CZ_ASSIGN_OR_RETURN(const int64_t size, RegularFileSize(path));
  constexpr int64_t kBlock = int64_t{4} << 20;
  std::vector<char> block(static_cast<size_t>(std::min(size, kBlock)));
  uint32_t crc = 0;
  for (int64_t at = 0; at < size; at += kBlock) {
    const size_t n = static_cast<size_t>(std::min(kBlock, size - at));
    CZ_RETURN_IF_ERROR(ReadAt(fd.get(), at, block.data(), n, path));
    crc = Crc32cExtend(crc, block.data(), n);
  }
  return absl::StrCat(size, " bytes, crc32c ", absl::Hex(crc, absl::kZeroPad8));
}

// The files --init reads: the safetensors file, or a directory's config.json
// and the weight files its entry point names.
absl::StatusOr<std::vector<std::string>> InitFiles(const std::string& init) {
  if (!IsDirectory(init)) return std::vector<std::string>{init};
  CZ_ASSIGN_OR_RETURN(const PretrainedFiles files, ListPretrainedFiles(init));
  std::vector<std::string> out = {files.config};
  if (!files.index.empty()) out.push_back(files.index);
  out.insert(out.end(), files.weights.begin(), files.weights.end());
  return out;
}

// What every rank of a job must agree on, compared at the rendezvous so
// that ranks started with different flags fail at once, naming the flag:
// the model's shape, the optimizer's and the schedule's every setting, the
// layout, and every flag that reads or writes a file (a --export given to
// rank 0 alone would otherwise be found only after training). With one
// rank per process the input files' contents are compared too, not only
// their names: ranks on hosts whose copies of --init differ would train
// from different weights.
absl::StatusOr<std::map<std::string, std::string>> RendezvousConfig(
    const TrainPlan& plan) {
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
  config["seed"] = absl::StrCat(o.seed);
  config["lr"] = absl::StrCat(o.lr);
  config["min_lr"] = absl::StrCat(o.min_lr);
  config["warmup"] = absl::StrCat(o.warmup);
  config["weight_decay"] = absl::StrCat(o.weight_decay);
  config["clip"] = absl::StrCat(o.clip);
  config["activation_checkpointing"] = o.activation_checkpointing.ToString();
  config["data"] = absl::StrCat(plan.data.size(), " tokens");
  // The flags that read or write files (the train tool's own too).
  config["init"] = o.init;
  config["data_file"] = o.data;
  config["tokens"] = o.tokens;
  config["token_dtype"] = std::string(TokenDTypeFlagValue(o.token_dtype));
  config["save"] = o.save;
  config["save_every"] = absl::StrCat(o.save_every);
  config["resume"] = o.resume;
  config["export"] = o.export_path;
  config["export_shard_size"] = absl::StrCat(o.export_shard_size);
  config["nvme_path"] = o.nvme_path;
  for (const auto& [flag, value] : o.tool_flags) config[flag] = value;
  if (o.rank >= 0) {
    std::vector<std::pair<std::string, std::string>> inputs;
    if (!o.init.empty()) {
      absl::StatusOr<std::vector<std::string>> files = InitFiles(o.init);
      if (!files.ok()) {
        return absl::Status(files.status().code(),
                            absl::StrCat("--init: ", files.status().message()));
      }
      for (const std::string& file : *files) inputs.push_back({"init", file});
    }
    if (!o.data.empty()) inputs.push_back({"data_file", o.data});
    if (!o.tokens.empty()) inputs.push_back({"tokens", o.tokens});
    if (!o.resume.empty()) {
      inputs.push_back({"resume", JoinPath(o.resume, kCheckpointManifestName)});
    }
    for (const auto& [flag, file] : inputs) {
      absl::StatusOr<std::string> print = FileFingerprint(file);
      if (!print.ok()) {
        return absl::Status(
            print.status().code(),
            absl::StrCat("--", flag, ": ", print.status().message()));
      }
      config[absl::StrCat(flag, " content: ", file)] = *print;
    }
  }
  return config;
}

// One rank's whole run: the model (GPT-2 or Llama) and its data, trained
// through the engine (engine/engine.h).
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
      return absl::ResourceExhaustedError(absl::StrCat(
          "out of memory (an allocation failed) while ", doing_,
          "; the plan before step 1 says what each rank was to hold"));
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
      doing_ = absl::StrCat("step ", step + 1);
      CZ_RETURN_IF_ERROR(TrainStep(step), "step ", step + 1);
      const bool last = step + 1 == o_.steps;
      if (!o_.save.empty() &&
          (last || (o_.save_every > 0 && (step + 1) % o_.save_every == 0))) {
        // A save that fails anywhere fails on every rank and leaves the
        // previous checkpoint whole.
        doing_ = absl::StrCat("saving to --save=", o_.save);
        CZ_RETURN_IF_ERROR(engine_->Save(o_.save, CheckpointConfig(plan_)),
                           "saving to ", o_.save);
      }
    }
    doing_ = "finishing the run";
    // Model data only: the model's working buffers (reported under a
    // device memory limit) are not chunk payloads.
    CZ_ASSIGN_OR_RETURN(
        std::vector<std::vector<int64_t>> all,
        comm::AllGatherInt64(group_, {engine_->AtRestBytes()}, timeout()));
    if (rank() == 0) {
      result_->at_rest_bytes.clear();
      for (const auto& r : all) result_->at_rest_bytes.push_back(r[0]);
      if (const ChunkDiskTier* disk = engine_->disk(); disk != nullptr) {
        const IoEngine& io = disk->engine();
        result_->disk_io = std::string(io.name());
        if (!io.fallback_reason().empty()) {
          absl::StrAppend(&result_->disk_io, " (", io.fallback_reason(), ")");
        }
      }
    }
    if (!o_.export_path.empty()) {
      doing_ =
          absl::StrCat("gathering the weights for --export=", o_.export_path);
      CZ_ASSIGN_OR_RETURN(auto dict, engine_->GatherWeights());
      absl::Status exported;
      if (rank() == 0) exported = Export(dict);
      CZ_RETURN_IF_ERROR(
          engine_->Agree(exported, "the --export file could not be written"),
          "--export=", o_.export_path);
    }
    return absl::OkStatus();
  }

  // The gathered weights to --export: a Hugging Face directory, or one
  // GPT-2 safetensors file.
  absl::Status Export(const std::map<std::string, Tensor>& weights) const {
    const std::string& path = o_.export_path;
    if (plan_.spec.family == ModelFamily::kLlama) {
      return WriteLlamaDirectory(path, plan_.spec.llama, weights,
                                 o_.export_shard_size);
    }
    if (ExportsDirectory(path)) {
      return WriteGptDirectory(path, weights, plan_.spec.gpt.heads,
                               o_.export_shard_size);
    }
    return WriteGptCheckpoint(path, weights);
  }

  int rank() const { return group_.rank(); }
  absl::Duration timeout() const { return absl::Seconds(o_.comm_timeout_s); }

  absl::Status SetUp() {
    CZ_ASSIGN_OR_RETURN(const EngineOptions engine_options,
                        EngineOptionsForRun(plan_, device_));
    const bool gpu = o_.device == ComputeDevice::kCuda;
    doing_ = "creating the model";
    absl::StatusOr<std::unique_ptr<LanguageModel>> model = plan_.spec.Create(
        o_.seed, gpu ? device_ : Device::Cpu(), o_.fused_attention);
    CZ_RETURN_IF_ERROR(model.status(), doing_);
    model_ = *std::move(model);
    model_->set_matmul_precision(MatmulPrecision(o_.precision));
    // The model's working buffers count against the device they live on
    // (the host, under a host limit).
    if (o_.device_memory_limit > 0 || gpu || o_.host_memory_limit > 0) {
      CZ_RETURN_IF_ERROR(
          model_->set_memory_accounting(&tracker_, engine_options.device));
    }
    if (plan_.init.has_value()) {
      doing_ = absl::StrCat("loading --init=", o_.init);
      CZ_RETURN_IF_ERROR(model_->LoadStateDict(*plan_.init),
                         "--init=", o_.init);
    }
    doing_ = "registering the parameters in chunks (the engine)";
    absl::StatusOr<std::unique_ptr<Engine>> engine =
        Engine::Create(group_, *model_, engine_options, &tracker_);
    CZ_RETURN_IF_ERROR(EngineErrorInFlags(engine.status()), doing_);
    engine_ = *std::move(engine);
    if (!o_.resume.empty()) {
      doing_ = absl::StrCat("resuming from --resume=", o_.resume);
      CZ_RETURN_IF_ERROR(engine_
                             ->Resume(o_.resume, CheckpointConfig(plan_),
                                      absl::StrCat("--resume=", o_.resume))
                             .status());
    }
    // One micro-batch's tokens, filled just before its forward: nothing
    // here grows with --grad_accum.
    const size_t tokens_per_rank =
        static_cast<size_t>(o_.batch) * plan_.seq_len;
    inputs_.assign(tokens_per_rank, 0);
    targets_.assign(tokens_per_rank, 0);
    return absl::OkStatus();
  }

  absl::Status TrainStep(int64_t step) {
    const BatchOrder order{o_.batch, o_.world_size, o_.grad_accum,
                           plan_.seq_len};
    CZ_ASSIGN_OR_RETURN(
        StepMetrics m,
        engine_->Step(
            o_.grad_accum,
            [&](ParamHooks& hooks, int micro) -> absl::StatusOr<double> {
              CZ_RETURN_IF_ERROR(plan_.data.FillBatch(
                  order, step, micro, rank(), absl::MakeSpan(inputs_),
                  absl::MakeSpan(targets_)));
              return model_->Forward(hooks, o_.batch, plan_.seq_len, inputs_,
                                     targets_);
            },
            [&](ParamHooks& hooks, int, float loss_scale) {
              return model_->Backward(hooks, loss_scale);
            }));
    absl::Status reported;
    if (rank() == 0) {
      m.steps = o_.steps;
      m.tokens_per_s = static_cast<double>(o_.batch) * plan_.seq_len *
                       o_.world_size * o_.grad_accum / m.step_time_s;
      const LanguageModel::ActivationBytes activations =
          model_->activation_bytes(o_.batch, plan_.seq_len);
      m.activation_kept_bytes = activations.kept;
      m.activation_recomputed_bytes = activations.recomputed;
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
  std::unique_ptr<LanguageModel> model_;
  std::unique_ptr<Engine> engine_;
  // The micro-batch's tokens, filled before its forward.
  std::vector<int32_t> inputs_, targets_;
  // What the rank is doing, for an out-of-memory message.
  std::string doing_ = "starting";
};

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

int64_t DevicePeak(const TrainResult& result) {
  int64_t peak = 0;
  for (const StepMetrics& step : result.steps) {
    for (const RankStepMetrics& rank : step.ranks) {
      peak = std::max(peak, rank.peak_device_bytes);
    }
  }
  return peak;
}

gemm::Precision MatmulPrecision(DType precision) {
  return precision == DType::kBF16 ? gemm::Precision::kBf16
                                   : gemm::Precision::kF32;
}

absl::StatusOr<TrainResult> RunTraining(const TrainOptions& options,
                                        const StepCallback& on_step,
                                        const PlanCallback& on_plan) {
  CZ_ASSIGN_OR_RETURN(const TrainPlan plan, PlanTraining(options));
  CZ_RETURN_IF_ERROR(CheckTrainOutputs(plan));
  if (on_plan && options.rank <= 0) CZ_RETURN_IF_ERROR(on_plan(plan));
  // One job at a time saves into a directory: a second one would race the
  // first's commits (rank 0's process holds the lock for the whole run).
  std::unique_ptr<SaveClaim> save_claim;
  if (!options.save.empty() && options.rank <= 0) {
    CZ_ASSIGN_OR_RETURN(save_claim, SaveClaim::Take(options.save));
  }
  if (options.backend == Backend::kGloo) {
    CZ_RETURN_IF_ERROR(RaiseFileDescriptorLimit(options));
  }
  TrainResult result;
  result.auto_rests_on_host = plan.auto_rests_on_host;
  result.model = plan.model;
  result.spec = plan.spec;
  result.seq_len = plan.seq_len;
  result.parameters = plan.spec.ParameterCount();
  result.chunk_size = plan.chunk_size.value_or(0);
  result.chunk_utilisation = plan.utilisation;
  result.chunk_bytes = plan.chunk_size.value_or(plan.largest_tensor) *
                       ElementSize(options.precision);

  // The ranks' process groups (comm/world.h): one in-process world, or one
  // Gloo group per rank over TCP, rendezvousing in memory (threads) or at
  // --rendezvous (one rank per process); on GPUs NCCL or staging through
  // pinned host memory for device buffers.
  const bool gpu = options.device == ComputeDevice::kCuda;
  const int gpus = gpu ? std::max(CudaDeviceCount(), 1) : 0;
  comm::WorldSpec spec;
  spec.world_size = options.world_size;
  spec.backend =
      options.backend == Backend::kInProcess
          ? comm::WorldBackend::kInProcess
          : (options.backend == Backend::kGloo ? comm::WorldBackend::kGloo
                                               : comm::WorldBackend::kNccl);
  spec.rank = options.rank;
  CZ_ASSIGN_OR_RETURN(spec.job_config, RendezvousConfig(plan));
  spec.timeout = absl::Seconds(options.comm_timeout_s);
  if (gpu) {
    for (int r = 0; r < options.world_size; ++r) {
      spec.devices.push_back(Device::Cuda(GpuIndexOfRank(options, r, gpus)));
    }
    result.compute_device =
        absl::StrCat("cuda (", gpus, gpus == 1 ? " GPU" : " GPUs",
                     ", rank r on cuda:r mod ", gpus, ")");
    result.gemm_kernel = options.precision == DType::kBF16
                             ? "cuBLAS, bf16 tensor cores with f32 accumulation"
                             : "cuBLAS f32";
  }
  if (options.rank >= 0) {
    // The address first: it may set NCCL_SOCKET_IFNAME, which must happen
    // before any thread (the tcp:// server's) runs.
    CZ_ASSIGN_OR_RETURN(spec.listen_address, ListenAddress(options));
    spec.rendezvous = options.rendezvous;
    spec.rendezvous_label = absl::StrCat("--rendezvous=", options.rendezvous);
  }
  CZ_ASSIGN_OR_RETURN(const std::unique_ptr<comm::World> world,
                      comm::MakeWorld(spec));
  // Only rank 0 reports the transport.
  if (options.rank <= 0) result.comm_transport = world->transport();
  // The first failure is the cause; later ones are what it did to the others.
  comm::FailureCause failures;
  // A failed rank must not leave the others waiting in a collective: the
  // in-process world is aborted; a Gloo rank resets its connections when it
  // leaves the world.
  auto fail = [&](int r, const absl::Status& status) {
    world->Abort(failures.Record(r, status));
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
    const Device device = gpu ? spec.devices[r] : Device::Simulated(0);
    std::optional<ScopedCudaDevice> on_gpu;
    if (gpu) on_gpu.emplace(device.index());
    absl::Status status =
        on_gpu.has_value() ? on_gpu->status() : absl::OkStatus();
    comm::ProcessGroup* group = nullptr;
    if (status.ok()) {
      absl::StatusOr<comm::ProcessGroup*> mine = world->group(r);
      if (mine.ok()) {
        group = *mine;
      } else {
        status = mine.status();
      }
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
    // Its groups go now: over Gloo, the peers of a rank that failed see its
    // connections close instead of waiting out the timeout.
    world->Leave(r);
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
        // The ranks already started wait for the others in a collective:
        // over Gloo they learn at once when the rest leave.
        for (int rest = r; rest < options.world_size; ++rest) {
          world->Leave(rest);
        }
        break;
      }
      threads.push_back(*std::move(thread));
    }
  }
  for (std::thread& t : threads) t.join();
  const absl::Status cause = failures.cause();
  if (!cause.ok()) return absl::Status(cause.code(), cause.message());
  if (save_claim != nullptr) save_claim->Keep();
  return result;
}

}  // namespace chunkzero
