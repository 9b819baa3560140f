// PlanTraining: checks a train job's options and works out everything the
// ranks need before any of them starts, so that a bad flag, an unreadable
// or non-finite input, or a configuration the machine cannot hold fails at
// once, naming the flag, the file or the bytes, instead of after minutes of
// work (or as a crash).
//
//   CZ_ASSIGN_OR_RETURN(TrainPlan plan, PlanTraining(options));
//   ... plan.model, plan.seq_len, plan.data, plan.order ...
//
// Planning reads the input files (--init, --data/--tokens, the --resume
// manifest) but writes nothing; CheckTrainOutputs checks the destinations
// (--save, --export) separately, as it creates the checkpoint directory.
#ifndef CHUNKZERO_TOOLS_TRAIN_TRAIN_PLAN_H_
#define CHUNKZERO_TOOLS_TRAIN_TRAIN_PLAN_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/checkpoint.h"
#include "chunk/chunk_layout.h"
#include "models/gpt2/gpt_checkpoint.h"
#include "models/gpt2/gpt_model.h"
#include "optim/zero_optimizer.h"
#include "tensor/dtype.h"
#include "tools/train/memory_estimate.h"
#include "tools/train/model_spec.h"
#include "tools/train/token_data.h"
#include "tools/train/train_options.h"

namespace chunkzero {

// Ranks as threads of one process: more is refused (use one process per
// rank, tools/launch).
inline constexpr int kMaxRanksAsThreads = 1024;

struct TrainPlan {
  TrainOptions options;
  GptConfig model;  // GPT-2's architecture; model.seq_len is P, the positions.
  ModelSpec spec;   // The architecture trained (GPT-2's is `model`).
  int seq_len = 0;  // T, the context trained on (<= P).
  std::optional<int64_t> chunk_size;  // nullopt: one chunk per tensor.
  double utilisation = 1;
  TokenData data = TokenData::FromTokens({});
  // --init's values by parameter name (its architecture is `spec`).
  std::optional<std::map<std::string, Tensor>> init;
  std::optional<CheckpointMeta> resume_meta;
  std::vector<std::string> order;  // First-use order.
  int64_t largest_tensor = 0;      // Elements of the largest parameter.
  TrainMemoryEstimate memory;      // What the job will hold.
  // --offload=auto under a --device_memory_limit that fits --offload=params
  // but not the shards auto may keep on the device while their chunks are
  // in use: every chunk rests in host memory, as with params (auto may
  // always fall back to params' placement, so it accepts what params does).
  bool auto_rests_on_host = false;
  int64_t memory_available = 0;  // What it may hold.
};

// The GPUs as planning sees them: how many are visible and how much memory
// each has free. CudaGpus() asks the CUDA runtime; tests give fakes.
struct GpuMemoryProbe {
  std::function<int()> count;
  std::function<absl::StatusOr<int64_t>(int device_index)> free_bytes;
};
GpuMemoryProbe CudaGpus();

// The GPU rank `rank` computes on, of `gpus` visible (>= 1): its local rank
// (--local_rank, one rank per process) if given, else its rank, mod the
// GPUs. The train job places its ranks by this, and planning checks the
// same GPUs' memory.
int GpuIndexOfRank(const TrainOptions& options, int rank, int gpus);

// Checks `options` and plans the job. Errors:
//  - InvalidArgument naming the flag for a value out of range, a NaN or
//    Inf hyper-parameter, flags that contradict each other (--init with
//    --resume, --save_every without --save, --rendezvous without --rank,
//    ...), a context longer than the --init file's positions, an --init
//    file holding Inf or NaN, or sizes the kernels cannot index;
//  - ResourceExhausted when the job needs more host memory than it may
//    hold (TrainOptions::memory_limit_bytes), naming the bytes and the
//    flags that drive the largest part, or more on the compute device than
//    TrainOptions::device_memory_limit or, with --device=cuda, than the
//    GPU has free for the ranks on it (DeviceMemoryNeeded), naming the
//    parts and the first lighter --storage / --offload that fits. With
//    --device=cuda only what lives on the host counts against host memory
//    (TrainMemoryEstimate::HostBytesPerRank);
//  - FailedPrecondition for --device=cuda when `gpus` sees no GPU;
//  - Unimplemented for --backend=nccl;
//  - the input files' errors (NotFound, DataLoss, ...), naming the file.
[[nodiscard]] absl::StatusOr<TrainPlan> PlanTraining(
    const TrainOptions& options, const GpuMemoryProbe& gpus = CudaGpus());

// The bytes per rank an estimate puts on the compute device with `offload`:
// the compute chunks (those in use only when the parameters rest on the
// host; never the host's reduce scratch), the activations and working
// buffers, and the masters and optimizer states unless offloaded.
double DeviceMemoryNeeded(const TrainMemoryEstimate& estimate,
                          OffloadPolicy offload);

// What each rank will hold, as planned, before step 1: on the compute
// device (a GPU or sim:0), in host memory (under --host_memory_limit, the
// least it can work in), and with --offload=nvme on disk; a line each,
// for the train tool to print before training starts.
std::string FormatPlan(const TrainPlan& plan);

// The checkpoint's record of the model and the data order: a resumed run
// must match these (world size and layout may differ).
std::map<std::string, std::string> CheckpointConfig(const TrainPlan& plan);

// The MLP width a Llama gets without --ffn: 8 d_model / 3 rounded up to
// a multiple of 64 (as Llama's own sizes are).
int64_t DefaultLlamaFfn(int64_t d_model);

// Compares the configuration a checkpoint was saved with to this run's
// (CheckpointConfig): a key both have must agree, and a checkpoint without
// "model" (saved before there was a choice) is GPT-2's. InvalidArgument
// naming --resume, the key and both values.
[[nodiscard]] absl::Status CheckSavedConfig(
    const std::map<std::string, std::string>& saved,
    const std::map<std::string, std::string>& ours, const std::string& resume);

// The Llama a job's flags describe (--model=llama): the shared sizes from
// options.model, the rest from options.llama with its defaults resolved.
LlamaConfig LlamaFromOptions(const TrainOptions& options);

// Whether --export writes a Hugging Face directory (an existing directory,
// or a path where nothing is yet that does not end in ".safetensors")
// rather than one GPT-2 safetensors file.
bool ExportsDirectory(const std::string& path);

// The files a directory --export of the plan's model creates
// (io/pretrained/pretrained_export.h), in the order written.
std::vector<std::string> ExportFiles(const TrainPlan& plan);

// Checks the destinations before step 1, creating nothing: that the
// --export file can be created or replaced, or that the --export directory
// (or its parent, when it is not there yet) lets this process create,
// replace and remove every file the export will (on the process running
// rank 0); and that the --save directory can be made and its manifest
// written. The model family is the plan's: a Llama from --init=DIR exports
// a directory even without --model. Errors name the flag and the file and
// carry errno's text.
[[nodiscard]] absl::Status CheckTrainOutputs(const TrainPlan& plan);

// Ranks over Gloo hold a socket per peer: as threads of one process,
// world_size * (world_size - 1) of them, plus a few per rank and for the
// process. The file descriptors this process needs for that.
int64_t FileDescriptorsNeeded(const TrainOptions& options);

// ResourceExhausted, naming --world_size and the numbers, if `limit` file
// descriptors (RLIMIT_NOFILE) are fewer than FileDescriptorsNeeded.
[[nodiscard]] absl::Status CheckFileDescriptorLimit(const TrainOptions& options,
                                                    int64_t limit);

}  // namespace chunkzero

#endif  // CHUNKZERO_TOOLS_TRAIN_TRAIN_PLAN_H_
