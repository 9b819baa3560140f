// TrainOptions: everything a train job is told (the train binary's flags,
// README.md lists them; train_flags.h spells the enumerated ones). Checked
// by PlanTraining (train_plan.h).
#ifndef CHUNKZERO_TOOLS_TRAIN_TRAIN_OPTIONS_H_
#define CHUNKZERO_TOOLS_TRAIN_TRAIN_OPTIONS_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "chunk/chunk_layout.h"
#include "engine/activation_checkpointing.h"
#include "models/gpt2/gpt_model.h"
#include "optim/zero_optimizer.h"
#include "tensor/dtype.h"
#include "tools/train/model_spec.h"
#include "tools/train/token_data.h"

namespace chunkzero {

// Where the ranks' collectives run (--backend).
enum class Backend {
  kInProcess,  // Threads sharing memory.
  kGloo,       // Threads or processes over TCP.
  kNccl,       // One GPU per rank (--device=cuda); host-side agreements
               // run in-process (threads) or over Gloo (processes).
};

// Where each rank's model computes (--device).
enum class ComputeDevice {
  kCpu,   // The host; with --offload or --device_memory_limit its chunks go
          // to the host-backed simulated device sim:0.
  kCuda,  // A GPU: rank r computes on cuda:(r mod the GPUs visible).
};

// How ZeroDdp learns the order in which forward first uses the parameters
// (--param_order).
enum class ParamOrder {
  kLayers,  // Given up front: GPT-2's layer order.
  kRecord,  // Recorded in step 1, as for a model whose order is not known.
};

struct TrainOptions {
  TrainOptions();

  int world_size = 4;
  Backend backend = Backend::kInProcess;
  ComputeDevice device = ComputeDevice::kCpu;
  // The architecture (--model): GPT-2, or a Llama-family decoder.
  ModelFamily model_family = ModelFamily::kGpt2;
  // Defaults: 2 x 128, 4 heads, 64 positions, V 256. With `init`, the
  // shape comes from the file (heads from here). A Llama takes its
  // layers, width, heads, positions and vocabulary from here too.
  GptConfig model;
  // What only a Llama has (--kv_heads, --ffn, --rope_theta): kv_heads 0 is
  // `model.heads` (no grouping); ffn 0 is 8 d_model / 3 rounded up to a
  // multiple of 64, as Llama's sizes are.
  struct LlamaShape {
    int kv_heads = 0;
    int ffn = 0;
    double rope_theta = 10000;
    double rms_norm_eps = 1e-5;
    bool tie_word_embeddings = false;
  } llama;
  // Context length T trained on; 0: all of the model's positions. With
  // `init` it may be shorter than the file's positions (every position row
  // is kept and exported; the first T are trained), never longer.
  int seq_len = 0;
  int batch = 4;  // Sequences per rank per micro-batch.
  int grad_accum = 1;
  int steps = 60;
  double lr = 1e-3;
  double min_lr = 1e-4;
  int warmup = 5;
  double weight_decay = -1;  // < 0: PyTorch's default for the optimizer.
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  double clip = 1.0;  // Max global grad norm; 0 disables.
  uint64_t seed = 1234;
  // Elements per chunk; 0: one chunk per tensor; -1: the size with the
  // least padding (chunk/chunk_size_search.h).
  int64_t chunk_size = -1;
  ChunkLayout storage = ChunkLayout::kSharded;
  DType precision = DType::kF16;  // The compute dtype.
  // kOptimizer: masters and states in host memory, compute chunks on the
  // (simulated) device. kParams: the compute chunks also rest in host
  // memory, and only those in use are on the device. kNvme: masters and
  // states on disk under nvme_path.
  OffloadPolicy offload = OffloadPolicy::kNone;
  // kNvme: the directory (on a disk) each rank's scratch file of masters
  // and optimizer states goes in, and how it is read and written.
  std::string nvme_path;
  IoEngineKind nvme_io = IoEngineKind::kAuto;
  // Elements of a chunk the NVMe update moves at a time (0: the
  // optimizer's default, 8 Mi); no flag: tests make it small.
  int64_t nvme_piece_elements = 0;
  ParamOrder param_order = ParamOrder::kLayers;
  std::string data;    // File read as bytes (vocab 256).
  std::string tokens;  // Little-endian token ids of token_dtype.
  TokenDType token_dtype = TokenDType::kU16;
  std::string init;  // A GPT-2 safetensors file to start from.
  // The flags given explicitly (on the command line or in a --flagfile),
  // without dashes. With `init` the shape comes from the file, and a
  // --layers, --d_model or --vocab given that disagrees with it is refused
  // (a library caller names here the model fields it set).
  std::set<std::string> given_flags;
  // Flags of the calling tool that the library never reads but the ranks
  // must agree on, compared at the rendezvous by name (the train tool's
  // --metrics_out and --tensorboard_dir, which only rank 0 writes).
  std::map<std::string, std::string> tool_flags;
  // Where to write the final f32 weights: a Hugging Face directory, or
  // for GPT-2 one safetensors file (train_plan.h's ExportsDirectory).
  std::string export_path;
  // The largest weights file of an exported directory; past it the
  // weights are sharded (--export_shard_size).
  int64_t export_shard_size = 5'000'000'000;
  std::string save;  // Checkpoint directory.
  int save_every = 0;
  std::string resume;  // Checkpoint directory to continue from.
  int max_prefetch = 1;
  // The fused attention on GPUs (--fused_attention): no T x T matrix kept.
  bool fused_attention = false;
  // Blocks that keep only their input and recompute their activations in
  // backward (--activation_checkpointing).
  ActivationCheckpointing activation_checkpointing;
  // One rank per process (tools/train/launch.sh starts them through
  // //tools/launch:launch, or a cluster launcher through the environment,
  // tools/train/launch_environment.h): this process runs only rank `rank`
  // (-1: every rank, as threads), over Gloo, meeting its peers at
  // `rendezvous`: a directory (fresh per job), redis://HOST:PORT/PREFIX or
  // tcp://HOST:PORT (rank 0 hosts it; comm/rendezvous/rendezvous_store.h). Only
  // rank 0 reports steps and writes the manifest and the export.
  int rank = -1;
  std::string rendezvous;
  // This rank's index among the ranks on its host (LOCAL_RANK): its GPU is
  // cuda:(local_rank mod the GPUs visible). -1: rank mod the GPUs visible.
  int local_rank = -1;
  // How many rank processes run on this host (LOCAL_WORLD_SIZE; 0: not
  // known); with fewer than world_size, ranks on other hosts must reach
  // this one, so it may not listen on loopback.
  int local_world_size = 0;
  // How many rank processes share this host's cores: each rank's kernels
  // use that share (local_world_size, unless CHUNKZERO_NUM_THREADS already
  // gives each process its threads).
  int core_sharing_ranks = 1;
  // The network interface whose address this rank listens on and gives its
  // peers (--interface, GLOO_SOCKET_IFNAME); empty: the address of the
  // route to the rendezvous server (loopback for a directory).
  std::string interface;
  // Where `interface` came from, for errors: "--interface", or
  // "GLOO_SOCKET_IFNAME" when the environment gave it.
  std::string interface_source = "--interface";
  // How long a rank waits for its peers in a collective (and at the
  // rendezvous) before the job fails naming the ranks that did not come.
  double comm_timeout_s = 300;
  // The memory the job may plan on, in bytes; 0: what the machine has
  // available now (base/system_memory.h). A configuration that needs more
  // is refused before anything is allocated.
  int64_t memory_limit_bytes = 0;
  // Bytes each rank's compute device may hold (--device_memory_limit); 0:
  // no limit. With a limit a CPU job computes for the host-backed simulated
  // device sim:0, as it would on an accelerator (a GPU job for its GPU):
  // the compute chunks, the
  // model's activations and working buffers, and (without
  // --offload=optimizer) the masters and optimizer states live there and
  // count against it. A configuration whose estimate does not fit is
  // refused before anything is allocated; a request past the limit while
  // training is ResourceExhausted naming what asked.
  int64_t device_memory_limit = 0;
  // Bytes of host memory each rank may hold (--host_memory_limit; 0: no
  // limit), with --offload=nvme: the parameter chunks resting in host
  // memory go to disk too as the limit demands, the one used farthest ahead
  // first, and come back ahead of use (engine/engine_options.h). A limit
  // below what a rank needs with every parameter chunk on disk is refused
  // before anything is allocated.
  int64_t host_memory_limit = 0;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_TOOLS_TRAIN_TRAIN_OPTIONS_H_
