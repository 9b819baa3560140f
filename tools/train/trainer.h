// The train job as a library: trains a GPT-2 model (models/gpt2) with
// chunked ZeRO on `world_size` ranks and reports every step.
//
//   TrainOptions options;                          // the built-in defaults
//   options.steps = 20;
//   CZ_ASSIGN_OR_RETURN(TrainResult result,
//                       RunTraining(options, [](const StepMetrics& m) {
//                         std::cout << m.loss << "\n";
//                         return absl::OkStatus();
//                       }));
//
// The job is flags -> spec -> library: the ranks' process groups come from
// comm::MakeWorld (comm/world.h: threads over the in-process backend or
// over Gloo, one rank per process over Gloo at TrainOptions::rendezvous,
// NCCL or staging on GPUs), and each rank trains its GptModel through an
// Engine (engine/engine.h) built from EngineOptionsForRun
// (tools/train/engine_spec.h). --backend=nccl needs --device=cuda. Per-step
// figures and checkpoint indexes reach rank 0 through collectives, so every
// mode works alike.
//
// A step (Engine::Step): for each micro-batch, forward, backward with the
// loss scale as the seed, FinishBackward, and (but for the last)
// AccumulateGrads; then the optimizer step. The reported loss is the mean
// token cross-entropy over the global batch (mean over ranks and
// micro-batches). Data order: tools/train/token_data.h.
//
// Checkpoints (checkpoint/checkpoint.h): --save writes every rank's
// optimizer shard (fp32 masters included) and a manifest at the end and
// every save_every steps; --resume loads one saved at any world size or
// layout and continues from its step, so the losses equal those of an
// uninterrupted run bit for bit when the layout is the same.
#ifndef CHUNKZERO_TOOLS_TRAIN_TRAINER_H_
#define CHUNKZERO_TOOLS_TRAIN_TRAINER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/gemm.h"
#include "models/gpt2/gpt_model.h"
#include "tools/train/model_spec.h"
#include "tools/train/step_metrics.h"
#include "tools/train/train_options.h"
#include "tools/train/train_plan.h"

namespace chunkzero {

struct TrainResult {
  GptConfig model;         // GPT-2's shape (a Llama's shared sizes).
  ModelSpec spec;          // The architecture trained.
  int64_t parameters = 0;  // Ψ.
  int64_t chunk_size = 0;  // Chosen (0: one chunk per tensor).
  double chunk_utilisation = 1;
  int64_t first_step = 0;  // Steps already done at the start (resume).
  int seq_len = 0;         // T, the context trained on (model.seq_len: P).
  std::vector<StepMetrics> steps;
  // Bytes of one full compute-dtype chunk (the largest tensor's, with
  // chunking off), to count the chunks in flight in.
  int64_t chunk_bytes = 0;
  // Each rank's payload bytes between steps, when every chunk is at rest
  // (after the last step): shards, masters, states, buffers.
  std::vector<int64_t> at_rest_bytes;
  // ParallelFor threads each rank's kernels use (this process's share).
  int threads_per_rank = 1;
  // What runs the matrix products (gemm::GemmKernelName of the precision
  // they multiply in).
  std::string gemm_kernel;
  // How rank 0's collectives move their data: "in-process", "gloo over TCP"
  // or "gloo, shared memory for collectives from 1 MiB" (GlooProcessGroup's
  // ranks on one host; smaller collectives stay on TCP); on GPUs, NCCL or
  // the host group staged through pinned memory.
  std::string comm_transport;
  // --offload=nvme: what reads and writes rank 0's disk tier ("io_uring",
  // or "pread/pwrite threads (io_uring refused: ...)").
  std::string disk_io;
  // Where the model computes: "cpu", or "cuda (N GPUs, ...)".
  std::string compute_device = "cpu";
  // --offload=auto ran as params: the device limit left no room for chunks
  // to rest there (TrainPlan::auto_rests_on_host).
  bool auto_rests_on_host = false;
};

// Called after every step on rank 0; an error ends the run with it (for
// instance a metrics file that cannot be written).
using StepCallback = std::function<absl::Status(const StepMetrics&)>;
// Runs once, with the job planned and checked, before any rank starts; an
// error it returns ends the job there.
using PlanCallback = std::function<absl::Status(const TrainPlan&)>;

// Trains as described above; `on_step` runs after every step on rank 0's
// thread (in rank 0's process), and an error it returns ends the run on
// every rank. Before any rank starts, the options are checked and the job
// planned (train_plan.h: InvalidArgument naming the flag, ResourceExhausted
// naming the bytes, the input files' errors), the destinations checked
// (--export's directory, --save's), and --save's directory locked against
// a second job (FailedPrecondition naming the holder's pid). During the run:
// FailedPrecondition for a loss or grads that are not finite (the run
// diverged), for a state holding Inf or NaN at a save (nothing is written)
// or an export; DeadlineExceeded naming the ranks that did not come to a
// collective within comm_timeout_s. A save that fails anywhere removes the
// shards it wrote: the previous checkpoint stays whole. With one rank per
// process, the result's steps and at-rest bytes are filled in rank 0's
// process only.
// What the model's matrix products multiply for `precision` (the chunks'
// dtype): bf16 runs them as torch.autocast's bf16 does (bf16 inputs, f32
// accumulation); f32 and f16 multiply f32 (f16 inputs would need AVX512-FP16
// kernels that oneDNN 2.6 does not have for matmuls).
gemm::Precision MatmulPrecision(DType precision);

// The largest device peak of any rank in any step of `result` (0 when
// nothing was computed for a device).
int64_t DevicePeak(const TrainResult& result);

// `on_plan` (may be empty) runs in rank 0's process before any rank
// starts, once the plan and the destinations are checked (the train tool
// prints FormatPlan and creates its --metrics_out file there, so that a
// job refused before it leaves an old file as it was).
[[nodiscard]] absl::StatusOr<TrainResult> RunTraining(
    const TrainOptions& options, const StepCallback& on_step,
    const PlanCallback& on_plan = nullptr);

}  // namespace chunkzero

#endif  // CHUNKZERO_TOOLS_TRAIN_TRAINER_H_
