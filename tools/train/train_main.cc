// The train job: bazel run -c opt //tools:train [-- --flags]
//
// With no flags it trains a small GPT-2 on built-in text with 4 ranks (the
// in-process backend), sharded fp16 chunks and AdamW, and prints a summary
// of memory and traffic. The flag names are an interface other scripts use;
// see README.md.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "base/status_macros.h"
#include "tools/train/launch_environment.h"
#include "tools/train/report.h"
#include "tools/train/tensorboard_report.h"
#include "tools/train/train_flags.h"
#include "tools/train/train_plan.h"
#include "tools/train/trainer.h"

namespace {
const chunkzero::TrainOptions kDefaults;
}  // namespace

ABSL_FLAG(int, world_size, kDefaults.world_size, "Data-parallel ranks.");
ABSL_FLAG(std::string, backend,
          std::string(chunkzero::BackendFlagValue(kDefaults.backend)),
          "inproc (ranks as threads sharing memory), gloo (ranks as threads "
          "or processes talking TCP through Gloo) or nccl (one GPU per rank, "
          "--device=cuda).");
ABSL_FLAG(std::string, device,
          std::string(chunkzero::DeviceFlagValue(kDefaults.device)),
          "cpu, or cuda: the model, its chunks and the optimizer on GPUs "
          "(rank r on cuda:r mod the GPUs visible; ranks sharing a GPU use "
          "inproc or gloo, staged through the host).");
ABSL_FLAG(std::string, model,
          std::string(chunkzero::ModelFamilyName(kDefaults.model_family)),
          "gpt2, or llama (a Llama-family decoder: RMSNorm, rotary "
          "positions, grouped-query attention, SwiGLU).");
ABSL_FLAG(int, layers, kDefaults.model.layers, "Transformer blocks.");
ABSL_FLAG(int, d_model, kDefaults.model.d_model, "Model width C.");
ABSL_FLAG(int, heads, kDefaults.model.heads, "Attention heads.");
ABSL_FLAG(int, seq_len, 0,
          "Context length (and learned positions); 0: 64, or with --init all "
          "of the file's positions (a shorter context trains on the first "
          "seq_len and keeps the rest).");
ABSL_FLAG(int, vocab, kDefaults.model.vocab, "Vocabulary size.");
ABSL_FLAG(int, kv_heads, kDefaults.llama.kv_heads,
          "--model=llama: key/value heads (grouped-query attention); 0: "
          "--heads.");
ABSL_FLAG(int, ffn, kDefaults.llama.ffn,
          "--model=llama: the MLP's width; 0: 8 d_model / 3 rounded up to a "
          "multiple of 64.");
ABSL_FLAG(double, rope_theta, kDefaults.llama.rope_theta,
          "--model=llama: the rotary embedding's base.");
ABSL_FLAG(int, batch, kDefaults.batch, "Sequences per rank per micro-batch.");
ABSL_FLAG(int, grad_accum, kDefaults.grad_accum, "Micro-batches per step.");
ABSL_FLAG(int, steps, kDefaults.steps, "Optimizer steps.");
ABSL_FLAG(double, lr, kDefaults.lr, "Peak learning rate.");
ABSL_FLAG(double, min_lr, kDefaults.min_lr,
          "Rate at the end of the cosine decay (= lr for a constant rate).");
ABSL_FLAG(int, warmup, kDefaults.warmup, "Linear warm-up steps.");
ABSL_FLAG(double, weight_decay, kDefaults.weight_decay,
          "Weight decay; negative: PyTorch's default (AdamW 0.01, else 0).");
ABSL_FLAG(std::string, optimizer,
          std::string(chunkzero::OptimizerKindName(kDefaults.optimizer)),
          "adamw, adam or sgd.");
ABSL_FLAG(double, clip, kDefaults.clip, "Max global grad norm; 0 disables.");
ABSL_FLAG(uint64_t, seed, kDefaults.seed, "Initialisation seed.");
ABSL_FLAG(int64_t, chunk_size, kDefaults.chunk_size,
          "Elements per chunk; 0: one chunk per tensor; -1: the size with "
          "the least padding.");
ABSL_FLAG(std::string, storage,
          std::string(chunkzero::ChunkLayoutName(kDefaults.storage)),
          "replicated, owner or sharded.");
ABSL_FLAG(std::string, precision,
          std::string(chunkzero::PrecisionFlagValue(kDefaults.precision)),
          "fp32, fp16 or bf16.");
ABSL_FLAG(std::string, offload,
          std::string(chunkzero::OffloadFlagValue(kDefaults.offload)),
          "none; optimizer: fp32 masters and optimizer states in host "
          "memory, compute chunks on the device (the simulated device here); "
          "params: the compute chunks also rest in host memory; auto: they "
          "rest on the device while it has room; nvme: masters and optimizer "
          "states on disk under --nvme_path, read and written around each "
          "chunk's update.");
ABSL_FLAG(std::string, nvme_path, kDefaults.nvme_path,
          "With --offload=nvme: a directory on a disk for each rank's "
          "scratch file (unnamed, so nothing is left behind however the run "
          "ends).");
ABSL_FLAG(std::string, nvme_io,
          std::string(chunkzero::NvmeIoFlagValue(kDefaults.nvme_io)),
          "With --offload=nvme: auto (io_uring, or pread/pwrite threads "
          "where io_uring is refused), io_uring or threads.");
ABSL_FLAG(std::string, param_order,
          std::string(chunkzero::ParamOrderFlagValue(kDefaults.param_order)),
          "layers: give GPT-2's layer order up front; record: let step 1 "
          "record the order of first use, as for a model whose order is not "
          "known.");
ABSL_FLAG(std::string, device_memory_limit, "0",
          "Bytes each rank's compute device may hold, e.g. 512MiB; 0: no "
          "limit. With a limit the job computes for the simulated device "
          "sim:0, and a layout that cannot fit is refused before step 1.");
ABSL_FLAG(std::string, host_memory_limit, "0",
          "With --offload=nvme: bytes of host memory each rank may hold, "
          "e.g. 6GiB; 0: no limit. The parameter chunks go to disk too as "
          "the limit demands (the one used farthest ahead first) and are "
          "read back ahead of use.");
ABSL_FLAG(int, max_prefetch, kDefaults.max_prefetch,
          "Chunks gathered ahead of use.");
ABSL_FLAG(std::string, activation_checkpointing,
          kDefaults.activation_checkpointing.ToString(),
          "none: keep every block's activations for backward; layers: keep "
          "only each block's output and run the block's forward again just "
          "before its backward (less memory, one more forward per step); "
          "every:K: the same for blocks 0, K, 2K, ... The losses are the "
          "same bits either way.");
ABSL_FLAG(bool, fused_attention, kDefaults.fused_attention,
          "With --device=cuda: the attention fused, keeping a log-sum-exp per "
          "query row instead of the T x T probabilities (less memory; simple "
          "CUDA-core kernels, not yet tuned).");
ABSL_FLAG(std::string, data, "", "A file read as bytes (vocab 256).");
ABSL_FLAG(std::string, tokens, "",
          "A file of little-endian token ids (--token_dtype).");
ABSL_FLAG(std::string, token_dtype,
          std::string(chunkzero::TokenDTypeFlagValue(kDefaults.token_dtype)),
          "How --tokens stores ids: u16 (vocabularies up to 65,536) or u32 "
          "(larger ones, such as Llama 3's 128,256), little-endian.");
ABSL_FLAG(std::string, init, "",
          "Weights to start from: a Hugging Face directory (GPT-2 or Llama, "
          "architecture from its config.json) or a GPT-2 safetensors file "
          "(architecture from its shapes plus --heads).");
ABSL_FLAG(std::string, export, "",
          "Write the final consolidated f32 weights here: a Hugging Face "
          "directory (config.json and safetensors, what from_pretrained "
          "reads), or for GPT-2 a path ending in .safetensors: one file.");
ABSL_FLAG(std::string, export_shard_size, "5000000000",
          "The largest weights file of an exported directory (bytes, or with "
          "K, M, G, T: powers of 1024); past it the weights are sharded with "
          "an index, as save_pretrained does.");
ABSL_FLAG(std::string, save, "", "Checkpoint directory.");
ABSL_FLAG(int, save_every, 0, "Also save every this many steps.");
ABSL_FLAG(std::string, resume, "", "Checkpoint directory to continue from.");
ABSL_FLAG(int, rank, -1,
          "Run only this rank in this process (the launcher, "
          "tools/train/launch.sh, sets it); -1 runs every rank as a thread.");
ABSL_FLAG(std::string, rendezvous, "",
          "With --rank: a fresh directory every rank of the job can reach "
          "(Gloo FileStore).");
ABSL_FLAG(std::string, metrics_out, "",
          "Write one JSON object per step to this file.");
ABSL_FLAG(std::string, tensorboard_dir, "",
          "Write TensorBoard event files here (loss, learning rate, grad "
          "norm, loss scale, tokens/s, device and host peaks, copy bytes per "
          "step), so that `tensorboard --logdir` shows the run as it trains.");
ABSL_FLAG(std::string, interface, "",
          "With one rank per process: the network interface (e.g. eth1) "
          "whose address this rank listens on and gives its peers; default "
          "$GLOO_SOCKET_IFNAME, else the address of the route to the "
          "rendezvous server.");
ABSL_FLAG(double, comm_timeout_s, kDefaults.comm_timeout_s,
          "Seconds a rank waits for its peers in a collective (and at the "
          "rendezvous) before the job fails naming the ranks that did not "
          "come.");

namespace {

// --metrics_out: one JSON line per step, every write checked (a full disk
// ends the run instead of losing the figures silently).
class MetricsFile {
 public:
  // Before anything else: that the file can be created, leaving what is
  // there untouched (a job refused later keeps an earlier run's figures).
  static absl::Status Check(const std::string& path) {
    const absl::Status can = chunkzero::CheckCanCreateFile(path);
    if (can.ok()) return can;
    return absl::Status(
        can.code(), absl::StrCat("--metrics_out=", path, ": ", can.message()));
  }
  // Creates or truncates it, once the job is planned.
  absl::Status Open(const std::string& path) {
    path_ = path;
    // A FIFO or a device is refused before it is opened: opening a FIFO
    // for writing would wait for a reader forever.
    absl::StatusOr<std::unique_ptr<chunkzero::FileDescriptor>> opened =
        chunkzero::CreateOrTruncateFile(path);
    if (!opened.ok()) {
      return absl::Status(opened.status().code(),
                          absl::StrCat("--metrics_out=", path, ": ",
                                       opened.status().message()));
    }
    fd_ = *std::move(opened);
    return absl::OkStatus();
  }
  bool is_open() const { return fd_ != nullptr; }
  absl::Status Append(const std::string& line) {
    const std::string text = line + "\n";
    const absl::Status written =
        chunkzero::WriteAll(fd_->get(), text.data(), text.size(), path_);
    if (written.ok()) return written;
    return absl::Status(written.code(),
                        absl::StrCat("--metrics_out: ", written.message()));
  }
  absl::Status Close() {
    if (!is_open()) return absl::OkStatus();
    const absl::Status closed = fd_->Close(path_);
    if (closed.ok()) return closed;
    return absl::Status(closed.code(),
                        absl::StrCat("--metrics_out: ", closed.message()));
  }

 private:
  std::string path_;
  std::unique_ptr<chunkzero::FileDescriptor> fd_;
};

absl::Status ParseEnumFlags(chunkzero::TrainOptions* o) {
  CZ_ASSIGN_OR_RETURN(o->token_dtype, chunkzero::ParseTokenDTypeFlag(
                                          absl::GetFlag(FLAGS_token_dtype)));
  CZ_ASSIGN_OR_RETURN(o->model_family,
                      chunkzero::ParseModelFamily(absl::GetFlag(FLAGS_model)));
  CZ_ASSIGN_OR_RETURN(
      o->backend, chunkzero::ParseBackendFlag(absl::GetFlag(FLAGS_backend)));
  CZ_ASSIGN_OR_RETURN(o->device,
                      chunkzero::ParseDeviceFlag(absl::GetFlag(FLAGS_device)));
  CZ_ASSIGN_OR_RETURN(o->optimizer, chunkzero::ParseOptimizerFlag(
                                        absl::GetFlag(FLAGS_optimizer)));
  CZ_ASSIGN_OR_RETURN(
      o->storage, chunkzero::ParseStorageFlag(absl::GetFlag(FLAGS_storage)));
  CZ_ASSIGN_OR_RETURN(o->precision, chunkzero::ParsePrecisionFlag(
                                        absl::GetFlag(FLAGS_precision)));
  CZ_ASSIGN_OR_RETURN(
      o->offload, chunkzero::ParseOffloadFlag(absl::GetFlag(FLAGS_offload)));
  CZ_ASSIGN_OR_RETURN(o->nvme_io,
                      chunkzero::ParseNvmeIoFlag(absl::GetFlag(FLAGS_nvme_io)));
  CZ_ASSIGN_OR_RETURN(o->param_order, chunkzero::ParseParamOrderFlag(
                                          absl::GetFlag(FLAGS_param_order)));
  CZ_ASSIGN_OR_RETURN(o->activation_checkpointing,
                      chunkzero::ParseActivationCheckpointingFlag(
                          absl::GetFlag(FLAGS_activation_checkpointing)));
  CZ_ASSIGN_OR_RETURN(
      o->export_shard_size,
      chunkzero::ParseByteCountFlag("export_shard_size",
                                    absl::GetFlag(FLAGS_export_shard_size)));
  CZ_ASSIGN_OR_RETURN(
      o->device_memory_limit,
      chunkzero::ParseByteCountFlag("device_memory_limit",
                                    absl::GetFlag(FLAGS_device_memory_limit)));
  CZ_ASSIGN_OR_RETURN(
      o->host_memory_limit,
      chunkzero::ParseByteCountFlag("host_memory_limit",
                                    absl::GetFlag(FLAGS_host_memory_limit)));
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Trains a GPT-2 (or Llama) model with chunked ZeRO. With no flags: 4 "
      "ranks, "
      "built-in text, sharded fp16, AdamW.");
  const std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::cerr << "error: unexpected argument \"" << rest[1]
              << "\": every setting is a --flag=value (--help lists them)\n";
    return 2;
  }
  chunkzero::TrainOptions o;
  // The enumerated flags are parsed here, once; nothing below compares
  // strings.
  if (absl::Status parsed = ParseEnumFlags(&o); !parsed.ok()) {
    std::cerr << "error: " << parsed << "\n";
    return 1;
  }
  o.world_size = absl::GetFlag(FLAGS_world_size);

  o.model.layers = absl::GetFlag(FLAGS_layers);
  o.model.d_model = absl::GetFlag(FLAGS_d_model);
  o.model.heads = absl::GetFlag(FLAGS_heads);
  o.model.vocab = absl::GetFlag(FLAGS_vocab);
  o.llama.kv_heads = absl::GetFlag(FLAGS_kv_heads);
  o.llama.ffn = absl::GetFlag(FLAGS_ffn);
  o.llama.rope_theta = absl::GetFlag(FLAGS_rope_theta);
  // Without --init the context is also the model's number of positions.
  o.seq_len = absl::GetFlag(FLAGS_seq_len);
  if (o.seq_len != 0) o.model.seq_len = o.seq_len;
  o.batch = absl::GetFlag(FLAGS_batch);
  o.grad_accum = absl::GetFlag(FLAGS_grad_accum);
  o.steps = absl::GetFlag(FLAGS_steps);
  o.lr = absl::GetFlag(FLAGS_lr);
  o.min_lr = absl::GetFlag(FLAGS_min_lr);
  o.warmup = absl::GetFlag(FLAGS_warmup);
  o.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  o.clip = absl::GetFlag(FLAGS_clip);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.chunk_size = absl::GetFlag(FLAGS_chunk_size);
  o.max_prefetch = absl::GetFlag(FLAGS_max_prefetch);
  o.fused_attention = absl::GetFlag(FLAGS_fused_attention);
  o.data = absl::GetFlag(FLAGS_data);
  o.tokens = absl::GetFlag(FLAGS_tokens);
  o.init = absl::GetFlag(FLAGS_init);
  o.export_path = absl::GetFlag(FLAGS_export);
  o.save = absl::GetFlag(FLAGS_save);
  o.nvme_path = absl::GetFlag(FLAGS_nvme_path);
  o.save_every = absl::GetFlag(FLAGS_save_every);
  o.resume = absl::GetFlag(FLAGS_resume);
  o.rank = absl::GetFlag(FLAGS_rank);
  o.rendezvous = absl::GetFlag(FLAGS_rendezvous);
  o.comm_timeout_s = absl::GetFlag(FLAGS_comm_timeout_s);
  o.interface = absl::GetFlag(FLAGS_interface);
  // torchrun's RANK, WORLD_SIZE, MASTER_ADDR, ... where the command line
  // leaves them open.
  o.given_flags = chunkzero::FlagsOnCommandLine(argc, argv);
  if (absl::Status s = chunkzero::ApplyLaunchEnvironment(
          [](const char* name) { return std::getenv(name); }, o.given_flags,
          &o);
      !s.ok()) {
    std::cerr << "error: " << s << "\n";
    return 1;
  }
  o.tool_flags = {{"metrics_out", absl::GetFlag(FLAGS_metrics_out)},
                  {"tensorboard_dir", absl::GetFlag(FLAGS_tensorboard_dir)}};
  // With one rank per process, rank 0 reports; the others stay quiet.
  const bool reporter = o.rank <= 0;

  MetricsFile metrics;
  const std::string metrics_path = absl::GetFlag(FLAGS_metrics_out);
  if (!metrics_path.empty() && reporter) {
    if (absl::Status can = MetricsFile::Check(metrics_path); !can.ok()) {
      std::cerr << "error: " << can << "\n";
      return 2;
    }
  }
  // Created once the job is planned (a refused job leaves no event file).
  std::unique_ptr<chunkzero::TensorBoardReport> tensorboard;
  const std::string tensorboard_dir = absl::GetFlag(FLAGS_tensorboard_dir);
  if (!tensorboard_dir.empty() && reporter) {
    if (absl::Status can = chunkzero::TensorBoardReport::Check(tensorboard_dir);
        !can.ok()) {
      std::cerr << "error: " << can << "\n";
      return 1;
    }
  }
  chunkzero::ProgressPrinter progress(stderr, isatty(fileno(stderr)) != 0);
  auto result = chunkzero::RunTraining(
      o,
      [&](const chunkzero::StepMetrics& m) -> absl::Status {
        progress.OnStep(m);
        if (tensorboard != nullptr) CZ_RETURN_IF_ERROR(tensorboard->OnStep(m));
        if (!metrics.is_open()) return absl::OkStatus();
        return metrics.Append(chunkzero::StepMetricsJson(m));
      },
      [&](const chunkzero::TrainPlan& plan) -> absl::Status {
        std::cerr << chunkzero::FormatPlan(plan);
        std::cerr.flush();
        if (!reporter) return absl::OkStatus();
        if (!tensorboard_dir.empty()) {
          CZ_ASSIGN_OR_RETURN(tensorboard, chunkzero::TensorBoardReport::Create(
                                               tensorboard_dir));
        }
        if (metrics_path.empty()) return absl::OkStatus();
        return metrics.Open(metrics_path);
      });
  progress.Finish();
  absl::Status status = result.status();
  const absl::Status closed = metrics.Close();
  if (status.ok()) status = closed;
  if (tensorboard != nullptr) {
    if (status.ok()) {
      status = tensorboard->Close();
    } else {
      tensorboard->CloseAfterFailure();
    }
  }
  if (!status.ok()) {
    std::cerr << "error: " << status << "\n";
    return 1;
  }
  if (reporter) {
    std::cout << chunkzero::FormatSummary(o, *result);
    std::cout.flush();
    if (!std::cout) {
      std::cerr << "error: cannot write the summary to standard output\n";
      return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // A write to a socket or pipe whose reader has gone (a peer rank that
  // failed, Gloo's writev to it; `train | head`) must be an error the
  // caller reports, not SIGPIPE ending the process.
  std::signal(SIGPIPE, SIG_IGN);
  // A write past the file size limit (ulimit -f) must fail with EFBIG, which
  // every writer reports naming the file and cleans up after, rather than
  // SIGXFSZ killing the process with its temporary files in place.
  std::signal(SIGXFSZ, SIG_IGN);
  // Nothing may escape as an exception (an abort, exit code 134): what the
  // checks could not foresee is reported like any other error.
  try {
    return Main(argc, argv);
  } catch (const std::bad_alloc&) {
    std::cerr << "error: RESOURCE_EXHAUSTED: out of memory (an allocation "
                 "failed)\n";
  } catch (const std::exception& e) {
    std::cerr << "error: INTERNAL: unexpected exception: " << e.what() << "\n";
  } catch (...) {
    std::cerr << "error: INTERNAL: unexpected exception\n";
  }
  return 1;
}
