#include "tools/train/train_plan.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/file.h"
#include "base/parallel_for.h"
#include "base/status_macros.h"
#include "base/system_memory.h"
#include "chunk/chunk_size_search.h"
#include "comm/rendezvous/rendezvous_store.h"
#include "engine/cost_model.h"
#include "engine/engine_options.h"
#include "io/json/json_text.h"
#include "io/nvme/scratch_file.h"
#include "io/pretrained/pretrained_directory.h"
#include "io/pretrained/pretrained_export.h"
#include "models/llama/llama_checkpoint.h"
#include "nlohmann/json.hpp"
#include "tensor/cpu/reduction_kernels.h"
#include "tensor/cuda/cuda_runtime.h"
#include "tools/train/train_flags.h"

namespace chunkzero {

namespace {

template <typename T>
absl::Status Bad(absl::string_view flag, const T& value,
                 absl::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, "=", value, ": ", want));
}

// What GPT-2 has that the Llama model does not: checked for --model=llama
// with the flags, and for a Llama from --init=DIR once config.json says so.
absl::Status CheckLlamaCanRun(const TrainOptions& o) {
  if (o.fused_attention) {
    return Bad("fused_attention", "true",
               "the Llama model has only the batched attention");
  }
  return absl::OkStatus();
}

// The flags of one architecture only: Llama's own sizes, and what GPT-2
// has that the Llama model does not.
absl::Status CheckModelFlags(const TrainOptions& o) {
  if (o.model_family == ModelFamily::kGpt2 && o.init.empty()) {
    const struct {
      const char* flag;
      std::string value;
    } llama_only[] = {{"kv_heads", absl::StrCat(o.llama.kv_heads)},
                      {"ffn", absl::StrCat(o.llama.ffn)},
                      {"rope_theta", absl::StrCat(o.llama.rope_theta)}};
    for (const auto& [flag, value] : llama_only) {
      if (o.given_flags.count(flag)) {
        return Bad(flag, value, "is for --model=llama");
      }
    }
    return absl::OkStatus();
  }
  if (o.model_family == ModelFamily::kGpt2) return absl::OkStatus();
  const int kv = o.llama.kv_heads > 0 ? o.llama.kv_heads : o.model.heads;
  if (o.llama.kv_heads < 0) {
    return Bad("kv_heads", o.llama.kv_heads, "want >= 1 (or 0: --heads)");
  }
  // With --init the heads come from config.json unless --heads is given.
  const bool heads_known = o.init.empty() || o.given_flags.count("heads");
  if (heads_known && o.model.heads > 0 && o.model.heads % kv != 0) {
    return Bad("kv_heads", kv,
               absl::StrCat("must divide --heads=", o.model.heads));
  }
  if (o.llama.ffn < 0) {
    return Bad("ffn", o.llama.ffn, "want >= 1 (or 0: 8 d_model / 3)");
  }
  if (o.llama.ffn == 0 &&
      DefaultLlamaFfn(o.model.d_model) > std::numeric_limits<int>::max()) {
    return Bad("d_model", o.model.d_model,
               absl::StrCat("gives a default --ffn of ",
                            DefaultLlamaFfn(o.model.d_model),
                            ", past 2^31 - 1; give --ffn"));
  }
  if (!(o.llama.rope_theta > 0 && std::isfinite(o.llama.rope_theta))) {
    return Bad("rope_theta", o.llama.rope_theta, "want a positive number");
  }
  if (o.init.empty() && o.model.heads > 0 &&
      o.model.d_model % o.model.heads == 0 &&
      (o.model.d_model / o.model.heads) % 2 != 0) {
    return Bad(
        "heads", o.model.heads,
        absl::StrCat("--d_model / --heads = ", o.model.d_model / o.model.heads,
                     " must be even for the rotary embedding"));
  }
  // The rotary tables' own rule (llama_model.h), for the flags' shape (with
  // --init the file's is checked as it is read).
  if (o.init.empty() && o.model.heads > 0 &&
      o.model.d_model % o.model.heads == 0) {
    const std::string problem =
        RopeThetaProblem(o.llama.rope_theta, o.model.d_model / o.model.heads,
                         o.seq_len > 0 ? o.seq_len : o.model.seq_len);
    if (!problem.empty()) {
      return Bad("rope_theta", o.llama.rope_theta,
                 problem.substr(problem.find(' ') + 1));
    }
  }
  return CheckLlamaCanRun(o);
}

// Flags that only mean something with another, one rule for all: set (on
// the command line, or to a value other than the default) without the other
// is refused, naming both.
absl::Status CheckDependentFlags(const TrainOptions& o) {
  const TrainOptions defaults;
  const bool nvme = o.offload == OffloadPolicy::kNvme;
  const std::string offload_now = absl::StrCat(
      " (this run has --offload=", OffloadFlagValue(o.offload), ")");
  const struct {
    const char* flag;
    bool set;
    std::string value;
    bool has_what_it_needs;
    std::string needs;
  } dependent[] = {
      {"nvme_path", !o.nvme_path.empty(), o.nvme_path, nvme,
       "--offload=nvme" + offload_now},
      {"nvme_io",
       o.given_flags.count("nvme_io") > 0 || o.nvme_io != defaults.nvme_io,
       std::string(NvmeIoFlagValue(o.nvme_io)), nvme,
       "--offload=nvme" + offload_now},
      {"host_memory_limit", o.host_memory_limit > 0,
       absl::StrCat(o.host_memory_limit), nvme,
       "--offload=nvme, the disk that takes what does not fit" + offload_now},
      {"token_dtype", o.given_flags.count("token_dtype") > 0,
       std::string(TokenDTypeFlagValue(o.token_dtype)), !o.tokens.empty(),
       "--tokens (a file of token ids)"},
      {"save_every", o.save_every > 0, absl::StrCat(o.save_every),
       !o.save.empty(), "--save, the directory to save to"},
      {"export_shard_size",
       o.given_flags.count("export_shard_size") > 0 ||
           o.export_shard_size != defaults.export_shard_size,
       absl::StrCat(o.export_shard_size), !o.export_path.empty(),
       "--export, a directory whose weights it shards"},
  };
  for (const auto& [flag, set, value, has_what_it_needs, needs] : dependent) {
    if (set && !has_what_it_needs) {
      return Bad(flag, value, absl::StrCat("is for ", needs));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckOptions(const TrainOptions& o, const GpuMemoryProbe& probe) {
  // The enumerated options arrive parsed (train_flags.h); a library caller
  // can still pass a value outside its enum. A value is known when its
  // spelling parses back.
  const struct {
    const char* flag;
    int value;
    bool known;
    const char* want;
  } enums[] = {
      {"backend", static_cast<int>(o.backend),
       ParseBackendFlag(BackendFlagValue(o.backend)).ok(),
       "inproc, gloo or nccl"},
      {"device", static_cast<int>(o.device),
       ParseDeviceFlag(DeviceFlagValue(o.device)).ok(), "cpu or cuda"},
      {"precision", static_cast<int>(o.precision),
       ParsePrecisionFlag(PrecisionFlagValue(o.precision)).ok(),
       "fp32, fp16 or bf16"},
      {"storage", static_cast<int>(o.storage),
       ParseStorageFlag(ChunkLayoutName(o.storage)).ok(),
       "replicated, owner or sharded"},
      {"optimizer", static_cast<int>(o.optimizer),
       ParseOptimizerFlag(OptimizerKindName(o.optimizer)).ok(),
       "adamw, adam or sgd"},
      {"offload", static_cast<int>(o.offload),
       ParseOffloadFlag(OffloadFlagValue(o.offload)).ok(),
       "none, optimizer, params or auto"},
      {"param_order", static_cast<int>(o.param_order),
       ParseParamOrderFlag(ParamOrderFlagValue(o.param_order)).ok(),
       "layers or record"},
  };
  for (const auto& [flag, value, known, want] : enums) {
    if (!known) {
      return Bad(flag, absl::StrCat("<enum value ", value, ">"),
                 absl::StrCat("want ", want));
    }
  }
  if (o.world_size < 1) return Bad("world_size", o.world_size, "want >= 1");
  if (o.offload == OffloadPolicy::kNvme && o.nvme_path.empty()) {
    return Bad("offload", "nvme",
               "needs --nvme_path, a directory on a disk for the masters and "
               "optimizer states");
  }
  CZ_RETURN_IF_ERROR(CheckDependentFlags(o));
  if (o.backend == Backend::kNccl && o.device != ComputeDevice::kCuda) {
    return Bad("backend", "nccl",
               "NCCL moves GPU memory: give --device=cuda too (or use inproc "
               "or gloo on the CPU)");
  }
  if (o.fused_attention && o.device != ComputeDevice::kCuda) {
    return absl::InvalidArgumentError(
        "--fused_attention runs on GPUs: give --device=cuda too");
  }
  if (o.device == ComputeDevice::kCuda) {
    const int gpus = probe.count();
    if (gpus == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--device=cuda: no GPU is visible",
          BuiltWithCuda() ? ""
                          : " (this train binary was built without "
                            "--config=cuda)"));
    }
    if (o.backend == Backend::kNccl && o.rank < 0 && o.world_size > gpus) {
      return Bad("world_size", o.world_size,
                 absl::StrCat("--backend=nccl runs one rank per GPU and ", gpus,
                              " are visible; ranks sharing a GPU use "
                              "--backend=gloo or inproc"));
    }
  }
  if (o.rank < -1) {
    return Bad("rank", o.rank,
               "want -1 (every rank as a thread of this process) or this "
               "process's rank in [0, world_size)");
  }
  if (o.rank >= 0 &&
      (o.rank >= o.world_size || o.backend == Backend::kInProcess ||
       o.rendezvous.empty())) {
    return Bad("rank", o.rank,
               "one rank per process needs 0 <= rank < world_size, "
               "--backend=gloo or nccl and a --rendezvous");
  }
  if (o.rank < 0 && !o.rendezvous.empty()) {
    return Bad("rendezvous", o.rendezvous,
               "a rendezvous is for one rank per process: give --rank too "
               "(tools/train/launch.sh does)");
  }
  if (!o.rendezvous.empty()) {
    if (absl::Status s = comm::ParseRendezvousAddress(o.rendezvous).status();
        !s.ok()) {
      return Bad("rendezvous", o.rendezvous, s.message());
    }
  }
  if (!o.interface.empty() && o.rank < 0) {
    return Bad("interface", o.interface,
               "an interface is for one rank per process: ranks that are "
               "threads of one process talk over loopback");
  }
  if (o.rank < 0 && o.world_size > kMaxRanksAsThreads) {
    return Bad("world_size", o.world_size,
               absl::StrCat("at most ", kMaxRanksAsThreads,
                            " ranks run as threads of one process; run one "
                            "process per rank (tools/train/launch.sh)"));
  }
  const struct {
    const char* flag;
    int value;
  } positive[] = {{"layers", o.model.layers}, {"d_model", o.model.d_model},
                  {"heads", o.model.heads},   {"vocab", o.model.vocab},
                  {"batch", o.batch},         {"grad_accum", o.grad_accum}};
  for (const auto& [flag, value] : positive) {
    if (value < 1) return Bad(flag, value, "want >= 1");
  }
  if (o.seq_len < 0 || (o.seq_len == 0 && o.model.seq_len < 1)) {
    return Bad("seq_len", o.seq_len, "want >= 1");
  }
  if (o.init.empty() && o.model.d_model % o.model.heads != 0) {
    return Bad("d_model", o.model.d_model,
               absl::StrCat("must be a multiple of --heads=", o.model.heads));
  }
  CZ_RETURN_IF_ERROR(CheckModelFlags(o));
  if (o.steps < 0) return Bad("steps", o.steps, "want >= 0");
  if (o.warmup < 0) return Bad("warmup", o.warmup, "want >= 0");
  if (o.save_every < 0) return Bad("save_every", o.save_every, "want >= 0");
  if (o.chunk_size < -1) {
    return Bad("chunk_size", o.chunk_size, "want -1 (search), 0 or a size");
  }
  if (o.max_prefetch < 0) return Bad("max_prefetch", o.max_prefetch, ">= 0");
  if (o.activation_checkpointing.every < 0) {
    return Bad("activation_checkpointing",
               absl::StrCat("every:", o.activation_checkpointing.every),
               "want every:K with K >= 1, or none");
  }
  // NaN compares false with everything, so these are written to fail on it.
  const struct {
    const char* flag;
    double value;
    bool negative_ok;
  } reals[] = {{"lr", o.lr, false},
               {"min_lr", o.min_lr, false},
               {"clip", o.clip, false},
               {"weight_decay", o.weight_decay, true}};
  for (const auto& [flag, value, negative_ok] : reals) {
    if (!std::isfinite(value)) {
      return Bad(flag, value, "want a finite number");
    }
    if (!negative_ok && value < 0) return Bad(flag, value, "want >= 0");
  }
  // The optimizer's own rule for its rates (optim/zero_optimizer.h), whose
  // options are these flags.
  if (const std::optional<OptimizerRateProblem> problem = CheckOptimizerRates(
          o.optimizer, o.lr, o.min_lr,
          o.weight_decay < 0 ? std::nullopt
                             : std::optional<double>(o.weight_decay));
      problem.has_value()) {
    return Bad(problem->option, problem->value, problem->why);
  }
  if (o.export_shard_size < 1) {
    return Bad("export_shard_size", o.export_shard_size,
               "want a positive number of bytes");
  }
  // A day at most: deadlines are added to clocks, and no collective or
  // rendezvous should wait longer.
  // At least a millisecond: deadlines count whole milliseconds, and a
  // tinier positive value (1e-320) would be a timeout of 0.
  if (!(o.comm_timeout_s >= 0.001) || !(o.comm_timeout_s <= 86400)) {
    return Bad("comm_timeout_s", o.comm_timeout_s,
               "want a positive number of seconds, from 0.001 to 86400");
  }
  if (o.memory_limit_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory_limit_bytes = ", o.memory_limit_bytes, ": want >= 0"));
  }
  if (o.device_memory_limit < 0) {
    return Bad("device_memory_limit", o.device_memory_limit,
               "want >= 0 (0: no limit)");
  }
  if (o.host_memory_limit < 0) {
    return Bad("host_memory_limit", o.host_memory_limit,
               "want >= 0 (0: no limit)");
  }
  if (!o.data.empty() && !o.tokens.empty()) {
    return absl::InvalidArgumentError("give --data or --tokens, not both");
  }
  if (!o.init.empty() && !o.resume.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--init=", o.init, " and --resume=", o.resume,
        " both say where the weights come from; give one (a resumed run "
        "continues from its checkpoint's weights)"));
  }
  return absl::OkStatus();
}

// The size of the regular file `path`, for planning before it is read.
absl::StatusOr<int64_t> FileSize(const std::string& flag,
                                 const std::string& path) {
  absl::StatusOr<int64_t> size = RegularFileSize(path);
  if (size.ok()) return size;
  // "--data=PATH is a directory, not a file", "--data: cannot open PATH: ..."
  return absl::Status(
      size.status().code(),
      absl::StrCat("--", flag,
                   absl::IsInvalidArgument(size.status()) ? "=" : ": ",
                   size.status().message()));
}

absl::StatusOr<int64_t> MemoryAvailable(const TrainOptions& o) {
  if (o.memory_limit_bytes > 0) return o.memory_limit_bytes;
  return AvailableMemoryBytes();
}

// The bytes PretrainedDirectory::Read takes in from `dir`: config.json and
// the weight files its entry point names (model.safetensors, or the index
// and the shards it lists, whatever their names); nothing else there (a
// tokenizer, pytorch_model.bin, an unrelated FIFO) is looked at.
absl::StatusOr<int64_t> DirectoryBytes(const std::string& dir) {
  auto flagged = [](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("--init: ", s.message()));
  };
  absl::StatusOr<int64_t> config =
      RegularFileSize(JoinPath(dir, kPretrainedConfigName));
  if (!config.ok()) return flagged(config.status());
  absl::StatusOr<PretrainedFiles> files = ListPretrainedFiles(dir);
  if (!files.ok()) return flagged(files.status());
  std::vector<std::string> read;
  if (!files->index.empty()) read.push_back(files->index);
  read.insert(read.end(), files->weights.begin(), files->weights.end());
  int64_t bytes = *config;
  for (const std::string& path : read) {
    absl::StatusOr<int64_t> size = RegularFileSize(path);
    if (!size.ok()) return flagged(size.status());
    bytes += *size;
  }
  return bytes;
}

// What --init holds: the architecture and every parameter's values.
struct InitWeights {
  ModelSpec spec;
  std::map<std::string, Tensor> state;
};

// Reads --init, a Hugging Face directory (GPT-2 or Llama, as its
// config.json says) or a GPT-2 safetensors file, refusing one too large to
// hold and weights that are not finite (a run from them could only
// produce NaN).
absl::StatusOr<InitWeights> ReadInit(const TrainOptions& o, int64_t available) {
  const bool directory = IsDirectory(o.init);
  int64_t size = 0;
  if (directory) {
    CZ_ASSIGN_OR_RETURN(size, DirectoryBytes(o.init));
  } else {
    CZ_ASSIGN_OR_RETURN(size, FileSize("init", o.init));
  }
  // The files are read whole, then their tensors are copied out of them.
  if (2.0 * size > static_cast<double>(available)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("--init=", o.init, " has ", FormatBytes(size),
                     "; reading it needs about twice that, but ",
                     FormatBytes(available), " is available"));
  }
  auto flagged = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("--init: ", s.message()));
  };
  InitWeights out;
  if (!directory) {
    if (o.model_family == ModelFamily::kLlama) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--init=", o.init,
          ": a Llama starts from a Hugging Face directory (config.json and "
          "safetensors weights), not a file"));
    }
    absl::StatusOr<GptCheckpoint> ckpt =
        ReadGptCheckpoint(o.init, o.model.heads);
    if (!ckpt.ok()) return flagged(ckpt.status());
    out.spec.gpt = ckpt->config;
    out.state = std::move(ckpt->state);
  } else {
    absl::StatusOr<PretrainedDirectory> files =
        PretrainedDirectory::Read(o.init);
    if (!files.ok()) return flagged(files.status());
    const nlohmann::json& config = files->config();
    const auto type = config.find("model_type");
    const bool llama = type != config.end() && *type == "llama";
    out.spec.family = llama ? ModelFamily::kLlama : ModelFamily::kGpt2;
    if (o.given_flags.count("model") && o.model_family != out.spec.family) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--model=", ModelFamilyName(o.model_family),
          " disagrees with --init=", o.init, ", whose config.json says ",
          type != config.end() ? JsonForMessage(*type)
                               : "nothing of model_type",
          "; drop --model"));
    }
    if (llama) {
      absl::StatusOr<LlamaCheckpoint> ckpt = ReadLlamaDirectory(*files);
      if (!ckpt.ok()) return flagged(ckpt.status());
      out.spec.llama = ckpt->config;
      out.state = std::move(ckpt->state);
    } else {
      absl::StatusOr<GptCheckpoint> ckpt = ReadGptDirectory(*files);
      if (!ckpt.ok()) return flagged(ckpt.status());
      out.spec.gpt = ckpt->config;
      out.state = std::move(ckpt->state);
    }
  }
  for (const auto& [name, tensor] : out.state) {
    CZ_ASSIGN_OR_RETURN(const bool non_finite,
                        HasInfOrNan(tensor.raw_data(), tensor.dtype(),
                                    static_cast<size_t>(tensor.numel())));
    if (non_finite) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--init=", o.init, ": tensor '", name,
          "' holds Inf or NaN; training from it could only produce NaN"));
    }
  }
  return out;
}

// Whether the ranks' collectives stage device buffers through pinned host
// memory: on GPUs, every backend but NCCL.
bool Staged(const TrainOptions& o) {
  return o.device == ComputeDevice::kCuda && o.backend != Backend::kNccl;
}

// Whether the ranks compute on a device: a GPU, or sim:0 under a device
// cap.
bool ComputesOnDevice(const TrainOptions& o) {
  return o.device == ComputeDevice::kCuda || o.device_memory_limit > 0;
}

// Whether the ranks compute on a device while --host_memory_limit gives the
// parameter chunks all three tiers (engine/engine_options.h): they then
// rest as --offload=auto places them, in host memory and on the device
// while its limit leaves room, and on disk beyond the host's.
bool ThreeTiers(const TrainOptions& o) {
  return o.offload == OffloadPolicy::kNvme && o.host_memory_limit > 0 &&
         ComputesOnDevice(o);
}

// Where the parameter chunks rest, as an offload policy: kAuto's under
// three tiers, the flag's otherwise.
OffloadPolicy ParamPlacement(const TrainOptions& o) {
  return ThreeTiers(o) ? OffloadPolicy::kAuto : o.offload;
}

// Refuses a job whose host memory would not hold it: everything, on the
// CPU; with --device=cuda only what lives on the host (the GPU's share is
// CheckDeviceMemory's).
absl::Status CheckMemory(const TrainPlan& plan) {
  const TrainOptions& o = plan.options;
  const bool gpu = o.device == ComputeDevice::kCuda;
  double need = gpu ? plan.memory.HostTotal(ParamPlacement(o), Staged(o))
                    : plan.memory.total();
  // A host limit holds each rank to it (CheckHostMemoryLimit has checked
  // that a rank can work within it).
  if (o.host_memory_limit > 0) {
    const double per_rank =
        (need - plan.memory.data) / plan.memory.ranks_in_process;
    need = std::min(per_rank, static_cast<double>(o.host_memory_limit)) *
               plan.memory.ranks_in_process +
           plan.memory.data;
  }
  if (need <= static_cast<double>(plan.memory_available)) {
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "this job needs about ", FormatBytes(need),
      gpu ? " of host memory (" : " of memory (",
      gpu ? plan.memory.DescribeHost(ParamPlacement(o), Staged(o))
          : plan.memory.Describe(),
      ") but ", FormatBytes(plan.memory_available),
      o.memory_limit_bytes > 0 ? " is its limit" : " is available",
      "; the largest part grows with ", plan.memory.LargestPartFlags(),
      o.rank < 0 && o.world_size > 1
          ? absl::StrCat("; the ", o.world_size,
                         " ranks run as threads of this process (--world_size)")
          : ""));
}

// The GPU whose free memory leaves the least per rank of this process's
// ranks on it (placed by GpuIndexOfRank, as the train job places them), and
// that share. Ranks of other processes that share a GPU
// have not allocated yet, so only this process's count.
struct GpuShare {
  int device = 0;
  int ranks = 0;
  int64_t free_bytes = 0;
  double per_rank = 0;
};
absl::StatusOr<GpuShare> TightestGpu(const TrainOptions& o,
                                     const GpuMemoryProbe& probe) {
  const int gpus = std::max(probe.count(), 1);
  std::map<int, int> ranks_on;
  if (o.rank >= 0) {
    ++ranks_on[GpuIndexOfRank(o, o.rank, gpus)];
  } else {
    for (int r = 0; r < o.world_size; ++r)
      ++ranks_on[GpuIndexOfRank(o, r, gpus)];
  }
  std::optional<GpuShare> tightest;
  for (const auto& [device, ranks] : ranks_on) {
    absl::StatusOr<int64_t> free_bytes = probe.free_bytes(device);
    if (!free_bytes.ok()) {
      return absl::Status(
          free_bytes.status().code(),
          absl::StrCat("--device=cuda: the free memory of cuda:", device, ": ",
                       free_bytes.status().message()));
    }
    const double per_rank = static_cast<double>(*free_bytes) / ranks;
    if (!tightest.has_value() || per_rank < tightest->per_rank) {
      tightest = GpuShare{device, ranks, *free_bytes, per_rank};
    }
  }
  return *tightest;
}

// The estimate's chunk figures as the engine's cost model has them.
ChunkMemory ChunkFigures(const TrainMemoryEstimate& e) {
  ChunkMemory m;
  m.chunks = e.chunks;
  m.chunks_at_rest = e.chunks_at_rest;
  m.reduce_scratch = e.reduce_scratch;
  m.in_flight = e.in_flight;
  m.in_flight_shards = e.in_flight_shards;
  m.optimizer = e.optimizer;
  m.disk = e.disk;
  m.rest_per_chunk = e.rest_per_chunk;
  return m;
}

// The compute chunks' bytes on the device (engine/cost_model.h).
double DeviceChunkBytes(const TrainMemoryEstimate& e, OffloadPolicy offload) {
  return chunkzero::DeviceChunkBytes(ChunkFigures(e), offload);
}

// The least host memory a rank can work in with --offload=nvme: all it
// needs but the parameter chunks at rest, which may all be on disk, except
// the chunks read ahead of use and the one being read (each a read buffer
// and the payload it lands in); registering and stepping, the larger.
// Computing on a device, only the host's part counts, and the parameter
// chunks rest there (and so may go to disk) only with three tiers.
struct HostFloorParts {
  // What a rank holds in host memory with its parameter chunks there too
  // (with `all`, the same as `stepping`).
  double whole = 0;
  double registering = 0;  // model_init: over before the first step.
  double stepping = 0;     // A step's host buffers but the chunks at rest.
  double reading = 0;      // The chunks being read from disk.
  double chunks_read = 0;  // How many that is.
  // The host's parts the step's figure comes from (Describe or
  // DescribeHost).
  std::string described;
  // Without the tier's help (no parameter chunk may go to disk): the
  // whole of the rank's host figure.
  bool all = false;

  double total() const {
    return all ? stepping : std::max(registering, stepping) + reading;
  }
  std::string Describe() const {
    if (all) return described;
    return absl::StrCat(
        "the larger of registering the model (", FormatBytes(registering),
        ") and a step without its parameter chunks at rest (",
        FormatBytes(stepping), "), plus ", FormatBytes(reading), " for the ",
        chunks_read, " chunks read from disk at once; from ", described);
  }
};
HostFloorParts HostFloor(const TrainPlan& plan) {
  const TrainOptions& o = plan.options;
  const TrainMemoryEstimate& e = plan.memory;
  const bool on_device = ComputesOnDevice(o);
  HostFloorParts floor;
  if (on_device && !ThreeTiers(o)) {
    floor.all = true;
    floor.whole = floor.stepping = e.HostBytesPerRank(o.offload, Staged(o));
    floor.described = e.DescribeHost(o.offload, Staged(o));
    return floor;
  }
  floor.chunks_read = std::min<double>(
      EngineOptions().disk_lookahead + 1,
      e.rest_per_chunk > 0 ? std::ceil(e.chunks_at_rest / e.rest_per_chunk)
                           : 0);
  floor.reading = std::min(2.0 * floor.chunks_read * (e.rest_per_chunk + 4096),
                           e.chunks_at_rest);
  floor.whole = on_device ? e.HostBytesPerRank(OffloadPolicy::kAuto, Staged(o))
                          : e.per_rank();
  floor.described = on_device ? e.DescribeHost(OffloadPolicy::kAuto, Staged(o))
                              : e.Describe();
  // Registration (model_init) is over before the first step's buffers
  // exist: the larger of the two.
  floor.registering = e.model_init;
  floor.stepping = floor.whole - e.model_init - e.chunks_at_rest;
  return floor;
}

// Whether the parameter chunks may go to disk: a host limit below what a
// rank would hold in host memory with all of them there.
bool ParamsMayGoToDisk(const TrainPlan& plan) {
  const TrainOptions& o = plan.options;
  if (o.host_memory_limit == 0) return false;
  const HostFloorParts floor = HostFloor(plan);
  return !floor.all && floor.whole > static_cast<double>(o.host_memory_limit);
}

// --host_memory_limit: refuses a limit below HostFloor.
absl::Status CheckHostMemoryLimit(const TrainPlan& plan) {
  const TrainOptions& o = plan.options;
  if (o.host_memory_limit == 0) return absl::OkStatus();
  const HostFloorParts floor = HostFloor(plan);
  if (floor.total() <= static_cast<double>(o.host_memory_limit)) {
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "--host_memory_limit=",
      FormatBytes(static_cast<double>(o.host_memory_limit)),
      " is less than the ", FormatBytes(floor.total()),
      " a rank needs in host memory with every parameter chunk on disk (",
      floor.Describe(), "); the largest part grows with ",
      plan.memory.LargestPartFlags()));
}

// --offload=nvme: the directory can hold scratch files (train_plan.h) and
// has room for this process's ranks' masters and optimizer states (and
// parameter chunks, when a host limit may send them there).
absl::Status CheckDiskSpace(const TrainPlan& plan) {
  const TrainOptions& o = plan.options;
  if (o.offload != OffloadPolicy::kNvme) return absl::OkStatus();
  absl::StatusOr<int64_t> free_bytes = ScratchDirectoryFreeBytes(o.nvme_path);
  if (!free_bytes.ok()) {
    return absl::Status(free_bytes.status().code(),
                        absl::StrCat("--nvme_path=", o.nvme_path, ": ",
                                     free_bytes.status().message()));
  }
  const int ranks = o.rank < 0 ? o.world_size : 1;
  const bool params = ParamsMayGoToDisk(plan);
  const double need =
      (plan.memory.disk + (params ? plan.memory.chunks_at_rest : 0)) * ranks;
  if (static_cast<double>(*free_bytes) >= need) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "--nvme_path=", o.nvme_path, " has ",
      FormatBytes(static_cast<double>(*free_bytes)), " free, but the masters",
      params ? ", optimizer states and parameter chunks of "
             : " and optimizer states of ",
      ranks, ranks == 1 ? " rank" : " ranks", " need about ", FormatBytes(need),
      " there"));
}

// "17.16 MiB per rank on sim:0 (chunks 13.00 MiB, activations 4.16 MiB)":
// what a rank needs on its compute device as the flags place it.
std::string DescribeDeviceNeed(const TrainPlan& plan,
                               absl::string_view device) {
  const TrainOptions& o = plan.options;
  // Auto placement that keeps no chunk on the device needs what params'
  // does.
  const OffloadPolicy placement =
      plan.auto_rests_on_host ? OffloadPolicy::kParams : ParamPlacement(o);
  return absl::StrCat(FormatBytes(DeviceMemoryNeeded(plan.memory, placement)),
                      " per rank on ", device, " (chunks ",
                      FormatBytes(DeviceChunkBytes(plan.memory, placement)),
                      o.offload != OffloadPolicy::kNone
                          ? ""
                          : absl::StrCat(", masters and optimizer states ",
                                         FormatBytes(plan.memory.optimizer)),
                      ", activations ", FormatBytes(plan.memory.activations),
                      ")");
}

// Refuses a configuration whose compute device would need more than
// --device_memory_limit or, with --device=cuda, more than the GPU has free
// for each of its ranks, naming the parts and the first lighter
// configuration that fits.
absl::Status CheckDeviceMemory(TrainPlan& plan, const TrainMemoryInput& need,
                               const GpuMemoryProbe& probe) {
  const TrainOptions& o = plan.options;
  const bool gpu = o.device == ComputeDevice::kCuda;
  if (o.device_memory_limit == 0 && !gpu) return absl::OkStatus();
  // Per rank: the flag's limit, and on GPUs the tightest GPU's free memory
  // shared by its ranks, whichever is smaller.
  double limit = o.device_memory_limit > 0
                     ? static_cast<double>(o.device_memory_limit)
                     : std::numeric_limits<double>::infinity();
  std::string device = "sim:0";
  std::string limit_text =
      absl::StrCat("--device_memory_limit is ", FormatBytes(limit));
  if (gpu) {
    CZ_ASSIGN_OR_RETURN(const GpuShare share, TightestGpu(o, probe));
    device = absl::StrCat("cuda:", share.device);
    if (share.per_rank < limit) {
      limit = share.per_rank;
      limit_text = absl::StrCat(
          device, " has ", FormatBytes(static_cast<double>(share.free_bytes)),
          " free",
          share.ranks > 1 ? absl::StrCat(" for its ", share.ranks, " ranks (",
                                         FormatBytes(share.per_rank), " each)")
                          : "");
    }
  }
  const double bytes = DeviceMemoryNeeded(plan.memory, ParamPlacement(o));
  if (bytes <= limit) return absl::OkStatus();
  if (ParamPlacement(o) == OffloadPolicy::kAuto &&
      DeviceMemoryNeeded(plan.memory, OffloadPolicy::kParams) <= limit) {
    // (Three tiers keep their placement: its residency simply keeps no
    // chunk on the device.)
    plan.auto_rests_on_host = o.offload == OffloadPolicy::kAuto;
    return absl::OkStatus();
  }
  const bool can_checkpoint = !o.activation_checkpointing.enabled();
  std::string advice = absl::StrCat(
      "no layout fits: lower --batch or --seq_len, ",
      can_checkpoint ? "recompute activations (--activation_checkpointing), "
                     : "",
      "or raise the limit");
  const struct {
    ChunkLayout layout;
    OffloadPolicy offload;
  } lighter[] = {{ChunkLayout::kSharded, o.offload},
                 {o.storage, OffloadPolicy::kOptimizer},
                 {ChunkLayout::kSharded, OffloadPolicy::kOptimizer},
                 {o.storage, OffloadPolicy::kParams},
                 {ChunkLayout::kSharded, OffloadPolicy::kParams}};
  for (const auto& [layout, offload] : lighter) {
    // Only lighter: never advise bringing offloaded state back.
    if (layout == o.storage && offload == o.offload) continue;
    if (OffloadDeviceWeight(offload) > OffloadDeviceWeight(o.offload)) continue;
    TrainMemoryInput other = need;
    other.layout = layout;
    absl::StatusOr<TrainMemoryEstimate> e = EstimateTrainMemory(other);
    if (!e.ok() || DeviceMemoryNeeded(*e, offload) > limit) continue;
    advice = "try";
    if (layout != o.storage) {
      absl::StrAppend(&advice, " --storage=", ChunkLayoutName(layout));
    }
    if (offload != o.offload) {
      absl::StrAppend(&advice, " --offload=", OffloadFlagValue(offload));
    }
    break;
  }
  // No lighter layout fits: recomputing the blocks' activations may.
  if (can_checkpoint && absl::StartsWith(advice, "no layout fits")) {
    TrainMemoryInput checkpointed = need;
    checkpointed.activation_checkpointing.every = 1;
    absl::StatusOr<TrainMemoryEstimate> e = EstimateTrainMemory(checkpointed);
    if (e.ok() && DeviceMemoryNeeded(*e, ParamPlacement(o)) <= limit) {
      advice = "try --activation_checkpointing=layers";
    }
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "--storage=", ChunkLayoutName(o.storage),
      " --offload=", OffloadFlagValue(o.offload), " needs about ",
      DescribeDeviceNeed(plan, device), " but ", limit_text, "; ", advice));
}

}  // namespace

int GpuIndexOfRank(const TrainOptions& options, int rank, int gpus) {
  return (options.local_rank >= 0 ? options.local_rank : rank) % gpus;
}

GpuMemoryProbe CudaGpus() {
  return {[] { return CudaDeviceCount(); },
          [](int device_index) -> absl::StatusOr<int64_t> {
            CZ_ASSIGN_OR_RETURN(const CudaMemoryInfo info,
                                CudaMemGetInfo(device_index));
            return static_cast<int64_t>(info.free_bytes);
          }};
}

double DeviceMemoryNeeded(const TrainMemoryEstimate& e, OffloadPolicy offload) {
  return DeviceModelDataBytes(ChunkFigures(e), offload) + e.activations;
}

std::map<std::string, std::string> CheckpointConfig(const TrainPlan& plan) {
  std::map<std::string, std::string> config = plan.spec.CheckpointConfig();
  config["optimizer"] = std::string(OptimizerKindName(plan.options.optimizer));
  config["precision"] = std::string(PrecisionFlagValue(plan.options.precision));
  return config;
}

int64_t DefaultLlamaFfn(int64_t d_model) {
  return (8 * d_model / 3 + 63) / 64 * 64;
}

LlamaConfig LlamaFromOptions(const TrainOptions& o) {
  LlamaConfig c;
  c.layers = o.model.layers;
  c.d_model = o.model.d_model;
  c.heads = o.model.heads;
  c.kv_heads = o.llama.kv_heads > 0 ? o.llama.kv_heads : o.model.heads;
  // Past INT_MAX only where CheckOptions has refused the flags already.
  c.ffn = o.llama.ffn > 0 ? o.llama.ffn
                          : static_cast<int>(std::min<int64_t>(
                                DefaultLlamaFfn(o.model.d_model),
                                std::numeric_limits<int>::max()));
  c.vocab = o.model.vocab;
  c.seq_len = o.model.seq_len;
  c.rope_theta = o.llama.rope_theta;
  c.rms_norm_eps = o.llama.rms_norm_eps;
  c.tie_word_embeddings = o.llama.tie_word_embeddings;
  return c;
}

absl::StatusOr<TrainPlan> PlanTraining(const TrainOptions& options,
                                       const GpuMemoryProbe& gpus) {
  CZ_RETURN_IF_ERROR(CheckOptions(options, gpus));
  TrainPlan plan;
  plan.options = options;
  plan.model = options.model;
  CZ_ASSIGN_OR_RETURN(plan.memory_available, MemoryAvailable(options));

  plan.spec.family = options.model_family;
  plan.spec.gpt = options.model;
  if (options.model_family == ModelFamily::kLlama) {
    plan.spec.llama = LlamaFromOptions(options);
  }
  if (!options.init.empty()) {
    CZ_ASSIGN_OR_RETURN(InitWeights init,
                        ReadInit(options, plan.memory_available));
    // The architecture comes from the file (plus --heads for a GPT-2
    // file); a shape flag given as well must say the same.
    const bool llama = init.spec.family == ModelFamily::kLlama;
    const bool gpt_directory = !llama && IsDirectory(options.init);
    const LlamaConfig& l = init.spec.llama;
    const struct {
      const char* flag;
      double given;
      double file;
      const char* what;
      bool applies;
    } shape[] = {
        {"layers", 1.0 * options.model.layers, 1.0 * init.spec.layers(),
         "number of layers", true},
        {"d_model", 1.0 * options.model.d_model, 1.0 * init.spec.d_model(),
         "width d_model", true},
        {"vocab", 1.0 * options.model.vocab, 1.0 * init.spec.vocab(),
         "vocabulary", true},
        {"heads", 1.0 * options.model.heads,
         1.0 * (llama ? l.heads : init.spec.gpt.heads), "number of heads",
         llama || gpt_directory},
        {"kv_heads", 1.0 * options.llama.kv_heads, 1.0 * l.kv_heads,
         "number of key/value heads", llama},
        {"ffn", 1.0 * options.llama.ffn, 1.0 * l.ffn, "MLP width", llama},
        {"rope_theta", options.llama.rope_theta, l.rope_theta, "rope_theta",
         llama}};
    for (const auto& [flag, given, file, what, applies] : shape) {
      if (!applies || !options.given_flags.count(flag) || given == file) {
        continue;
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, "=", given, " disagrees with --init=", options.init,
          ", whose ", what, " is ", file,
          ": the shape comes from the file; "
          "drop --",
          flag, " or give --", flag, "=", file));
    }
    if (llama) CZ_RETURN_IF_ERROR(CheckLlamaCanRun(options));
    plan.spec = init.spec;
    plan.init = std::move(init.state);
  }
  // GPT-2's config, or the sizes a Llama shares with it.
  if (plan.spec.family == ModelFamily::kGpt2) {
    plan.model = plan.spec.gpt;
  } else {
    plan.model.layers = plan.spec.llama.layers;
    plan.model.d_model = plan.spec.llama.d_model;
    plan.model.heads = plan.spec.llama.heads;
    plan.model.seq_len = plan.spec.llama.seq_len;
    plan.model.vocab = plan.spec.llama.vocab;
  }
  const int positions = plan.spec.positions();
  plan.seq_len = options.seq_len > 0 ? options.seq_len : positions;
  if (plan.seq_len > positions) {
    return absl::InvalidArgumentError(
        plan.init.has_value()
            ? absl::StrCat(
                  "--seq_len=", plan.seq_len, " is longer than the ", positions,
                  " positions of --init=", options.init,
                  plan.spec.family == ModelFamily::kGpt2
                      ? absl::StrCat(" (wpe.weight has ", positions, " rows)")
                      : " (its max_position_embeddings)",
                  "; give --seq_len <= ", positions)
            : absl::StrCat("--seq_len=", plan.seq_len,
                           " is longer than the model's ", positions,
                           " positions"));
  }
  CZ_RETURN_IF_ERROR(plan.spec.Validate());

  // What the job will hold, before anything large is allocated.
  TrainMemoryInput need;
  need.model = plan.model;
  if (plan.spec.family == ModelFamily::kLlama) need.llama = plan.spec.llama;
  need.seq_len = plan.seq_len;
  need.batch = options.batch;
  need.world_size = options.world_size;
  need.ranks_in_process = options.rank < 0 ? options.world_size : 1;
  need.grad_accum = options.grad_accum;
  need.dtype = options.precision;
  need.layout = options.storage;
  need.optimizer = options.optimizer;
  need.chunk_size = options.chunk_size;
  need.offload = options.offload;
  need.max_prefetch = options.max_prefetch;
  need.fused_attention = options.fused_attention;
  need.activation_checkpointing = options.activation_checkpointing;
  // As RunTraining shares the cores out.
  need.threads_per_rank = ParallelThreadsShare(
      options.rank >= 0 ? options.core_sharing_ranks : options.world_size);
  need.gpu = options.device == ComputeDevice::kCuda;
  if (!options.tokens.empty()) {
    CZ_ASSIGN_OR_RETURN(need.data_bytes, FileSize("tokens", options.tokens));
    need.data_token_bytes = options.token_dtype == TokenDType::kU32 ? 4 : 2;
  } else if (!options.data.empty()) {
    CZ_ASSIGN_OR_RETURN(need.data_bytes, FileSize("data", options.data));
  }
  CZ_ASSIGN_OR_RETURN(plan.memory, EstimateTrainMemory(need));
  CZ_RETURN_IF_ERROR(CheckMemory(plan));

  if (!options.tokens.empty() || !options.data.empty()) {
    const bool ids = !options.tokens.empty();
    absl::StatusOr<TokenData> data =
        ids ? TokenData::FromTokenFile(options.tokens, plan.spec.vocab(),
                                       options.token_dtype)
            : TokenData::FromByteFile(options.data);
    if (!data.ok()) {
      return absl::Status(data.status().code(),
                          absl::StrCat(ids ? "--tokens: " : "--data: ",
                                       data.status().message()));
    }
    plan.data = *std::move(data);
  } else {
    plan.data = TokenData::BuiltIn();
  }
  if (plan.data.vocab_used() > plan.spec.vocab()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the data uses token ids up to ", plan.data.vocab_used() - 1,
        " but --vocab is ", plan.spec.vocab()));
  }
  if (plan.data.size() <= plan.seq_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the data has ", plan.data.size(),
        " tokens, fewer than one sequence of --seq_len=", plan.seq_len,
        " plus one"));
  }
  std::vector<int64_t> sizes;
  for (const auto& [name, shape] : plan.spec.FirstUseOrder()) {
    plan.order.push_back(name);
    sizes.push_back(NumElements(shape));
    plan.largest_tensor = std::max(plan.largest_tensor, sizes.back());
  }
  if (options.chunk_size > 0) {
    plan.chunk_size = options.chunk_size;
    ChunkSizeSearchOptions one;
    one.min_chunk_size = one.max_chunk_size = *plan.chunk_size;
    one.grid = 1;
    absl::StatusOr<ChunkSizeReport> report = SearchChunkSize(sizes, one);
    if (!report.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--chunk_size=", *plan.chunk_size, ": ", report.status().message()));
    }
    plan.utilisation = report->best.utilisation;
    // The packing's own padding, which the first check bounded from below.
    need.num_chunks = report->best.num_chunks;
    CZ_ASSIGN_OR_RETURN(plan.memory, EstimateTrainMemory(need));
    CZ_RETURN_IF_ERROR(CheckMemory(plan));
  } else if (options.chunk_size < 0) {
    // The size with the least padding, from the largest tensor up to 4x it.
    const int64_t largest = plan.largest_tensor;
    ChunkSizeSearchOptions search;
    search.min_chunk_size = largest;
    search.max_chunk_size = 4 * largest;
    search.grid = std::max<int64_t>(1, largest / 64);
    search.alignment = options.world_size;
    CZ_ASSIGN_OR_RETURN(ChunkSizeReport report, SearchChunkSize(sizes, search));
    plan.chunk_size = report.best.chunk_size;
    plan.utilisation = report.best.utilisation;
    // The first check counted the smallest candidate.
    need.chunk_size = *plan.chunk_size;
    need.num_chunks = report.best.num_chunks;
    CZ_ASSIGN_OR_RETURN(plan.memory, EstimateTrainMemory(need));
    CZ_RETURN_IF_ERROR(CheckMemory(plan));
  }
  // With the chunk size known, so that the advice is for the chunks the
  // run would have.
  CZ_RETURN_IF_ERROR(CheckDeviceMemory(plan, need, gpus));
  CZ_RETURN_IF_ERROR(CheckHostMemoryLimit(plan));
  CZ_RETURN_IF_ERROR(CheckDiskSpace(plan));
  if (!options.resume.empty()) {
    absl::StatusOr<CheckpointMeta> meta = ReadCheckpointMeta(options.resume);
    if (!meta.ok()) {
      return absl::Status(meta.status().code(),
                          absl::StrCat("--resume: ", meta.status().message()));
    }
    CZ_RETURN_IF_ERROR(
        CheckSavedConfig(meta->config, CheckpointConfig(plan), options.resume));
    plan.resume_meta = *std::move(meta);
  }
  return plan;
}

absl::Status CheckSavedConfig(const std::map<std::string, std::string>& saved,
                              const std::map<std::string, std::string>& ours,
                              const std::string& resume) {
  for (const auto& [key, value] : ours) {
    auto it = saved.find(key);
    // Checkpoints from before the Llama model have no "model": GPT-2's.
    const std::string* was = it != saved.end() ? &it->second : nullptr;
    static const std::string kGpt2 = "gpt2";
    if (was == nullptr && key == "model") was = &kGpt2;
    if (was != nullptr && *was != value) {
      return absl::InvalidArgumentError(
          absl::StrCat("--resume=", resume, " was saved with ", key, "=", *was,
                       ", this run has ", key, "=", value));
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> ExportFiles(const TrainPlan& plan) {
  std::vector<int64_t> bytes;
  const auto shapes = plan.spec.family == ModelFamily::kLlama
                          ? LlamaParameterShapes(plan.spec.llama)
                          : GptParameterShapes(plan.spec.gpt);
  for (const auto& [name, shape] : shapes) {
    bytes.push_back(NumElements(shape) * 4);  // Exported as f32.
  }
  return PretrainedExportFiles(bytes, plan.options.export_shard_size);
}

absl::Status CheckTrainOutputs(const TrainPlan& plan) {
  const TrainOptions& options = plan.options;
  auto flagged = [](const absl::Status& status, absl::string_view flag,
                    const std::string& value) {
    if (status.ok()) return status;
    return absl::Status(status.code(), absl::StrCat("--", flag, "=", value,
                                                    ": ", status.message()));
  };
  if (!options.export_path.empty() && options.rank <= 0) {
    const std::string& path = options.export_path;
    if (!ExportsDirectory(path)) {
      // The family the plan settled on: a Llama from --init=DIR without
      // --model is one too.
      if (plan.spec.family == ModelFamily::kLlama) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--export=", path,
            ": a Llama exports a Hugging Face directory (config.json and "
            "safetensors weights); give a directory's path"));
      }
      CZ_RETURN_IF_ERROR(flagged(CheckCanCreateFile(path), "export", path));
    } else {
      // Every name the export will create, replace or remove, now: a
      // failure after training would lose the run's weights.
      CZ_RETURN_IF_ERROR(
          flagged(CheckCanWritePretrainedDirectory(path, ExportFiles(plan)),
                  "export", path));
    }
  }
  if (!options.save.empty()) {
    // Nothing is created yet (RunTraining makes the directory once the
    // ranks have met).
    CZ_RETURN_IF_ERROR(
        flagged(CheckCanCreateDirectories(options.save), "save", options.save));
    if (IsDirectory(options.save)) {
      CZ_RETURN_IF_ERROR(flagged(
          CheckCanCreateFile(JoinPath(options.save, kCheckpointManifestName)),
          "save", options.save));
    }
  }
  return absl::OkStatus();
}

bool ExportsDirectory(const std::string& path) {
  if (IsDirectory(path)) return true;
  if (absl::EndsWith(path, ".safetensors")) return false;
  struct stat st;
  return ::lstat(path.c_str(), &st) != 0 && errno == ENOENT;
}

int64_t FileDescriptorsNeeded(const TrainOptions& o) {
  const int64_t ranks_here = o.rank < 0 ? o.world_size : 1;
  return ranks_here * (o.world_size - 1) + ranks_here * 8 + 64;
}

absl::Status CheckFileDescriptorLimit(const TrainOptions& o, int64_t limit) {
  const int64_t need = FileDescriptorsNeeded(o);
  if (limit >= need) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "--world_size=", o.world_size, " over --backend=gloo needs about ", need,
      " file descriptors in this process (a socket per pair of ranks), but "
      "the limit is ",
      limit,
      " (ulimit -n); raise it, or run one process per rank "
      "(tools/train/launch.sh)"));
}

std::string FormatPlan(const TrainPlan& plan) {
  const TrainOptions& o = plan.options;
  const TrainMemoryEstimate& e = plan.memory;
  const bool gpu = o.device == ComputeDevice::kCuda;
  const bool on_device = ComputesOnDevice(o);
  const bool params_to_disk = ParamsMayGoToDisk(plan);
  std::string text = "plan (what each rank will hold, estimated):\n";
  if (on_device) {
    absl::StrAppend(&text, "  device: ",
                    DescribeDeviceNeed(plan, gpu ? "its GPU" : "sim:0"));
    if (o.device_memory_limit > 0) {
      absl::StrAppend(&text, "; --device_memory_limit=",
                      FormatBytes(static_cast<double>(o.device_memory_limit)));
    }
    if (plan.auto_rests_on_host) {
      absl::StrAppend(&text, "; every chunk rests in host memory");
    }
    absl::StrAppend(&text, "\n");
  }
  absl::StrAppend(
      &text, "  host: ",
      on_device ? e.DescribeHost(ParamPlacement(o), Staged(o)) : e.Describe());
  if (o.host_memory_limit > 0) {
    absl::StrAppend(&text, "; --host_memory_limit=",
                    FormatBytes(static_cast<double>(o.host_memory_limit)),
                    " (at least ", FormatBytes(HostFloor(plan).total()),
                    " with every parameter chunk on disk): ",
                    params_to_disk ? "parameter chunks go to disk as it demands"
                                   : "all of it fits");
  }
  absl::StrAppend(&text, "\n");
  if (o.offload == OffloadPolicy::kNvme) {
    absl::StrAppend(&text, "  disk (--nvme_path=", o.nvme_path,
                    "): masters and optimizer states ", FormatBytes(e.disk),
                    " per rank");
    if (params_to_disk) {
      absl::StrAppend(&text, ", and parameter chunks up to ",
                      FormatBytes(e.chunks_at_rest));
    }
    absl::StrAppend(&text, "\n");
  }
  return text;
}

}  // namespace chunkzero
