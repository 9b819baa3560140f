#include "tools/train/report.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "engine/cost_model.h"
#include "tools/train/engine_spec.h"
#include "tools/train/train_flags.h"

namespace chunkzero {
namespace {

int ComputeBytes(const TrainOptions& o) {
  return static_cast<int>(ElementSize(o.precision));
}

std::string Bytes(double b) {
  if (b >= 1 << 30) return absl::StrFormat("%.2f GiB", b / (1 << 30));
  if (b >= 1 << 20) return absl::StrFormat("%.2f MiB", b / (1 << 20));
  if (b >= 1 << 10) return absl::StrFormat("%.1f KiB", b / (1 << 10));
  return absl::StrFormat("%.0f B", b);
}

std::string Duration(double seconds) {
  const int64_t s = std::llround(std::max(0.0, seconds));
  return absl::StrFormat("%d:%02d", s / 60, s % 60);
}

}  // namespace

int64_t ModelBytesPerParameter(const TrainOptions& o) {
  return ModelBytesPerParameter(EngineOptionsFromFlags(o), o.grad_accum);
}

int64_t ReplicatedBytesPerParameter(const TrainOptions& o) {
  return ReplicatedBytesPerParameter(EngineOptionsFromFlags(o), o.grad_accum);
}

double ExpectedCommBytesPerStep(const TrainOptions& o, int64_t psi) {
  return ExpectedCommBytesPerStep(EngineOptionsFromFlags(o), o.world_size,
                                  o.grad_accum, psi);
}

// What an offload keeps in host memory, for the summary's device lines.
const char* OffloadNote(OffloadPolicy offload, bool auto_rests_on_host,
                        bool three_tiers) {
  if (three_tiers) {
    return "; parameters rest on the device while it has room, else in host "
           "memory, and on disk beyond --host_memory_limit; masters and "
           "optimizer states on disk (--nvme_path)";
  }
  if (offload == OffloadPolicy::kAuto && auto_rests_on_host) {
    return "; parameters, masters and optimizer states rest in host memory "
           "(--offload=auto as params: the limit leaves no room for chunks "
           "to rest on the device)";
  }
  switch (offload) {
    case OffloadPolicy::kNone:
      return "";
    case OffloadPolicy::kOptimizer:
      return "; masters and optimizer states live in host memory";
    case OffloadPolicy::kParams:
      return "; parameters, masters and optimizer states rest in host memory";
    case OffloadPolicy::kAuto:
      return "; parameters rest on the device while it has room, else in "
             "host memory; masters and optimizer states in host memory";
    case OffloadPolicy::kNvme:
      return "; masters and optimizer states rest on disk (--nvme_path)";
  }
  return "";
}

// A rank's peak of model data (chunk payloads) in a step: its total peak
// less the model's working buffers, which a device memory limit has the
// tracker count too. Those are held whole from the first forward on, so in
// any later step the difference is exact.
int64_t ModelDataPeak(const RankStepMetrics& r) {
  const auto it = r.peak_bytes.find("activation");
  return r.peak_total_bytes - (it == r.peak_bytes.end() ? 0 : it->second);
}

MemoryCheck CheckMemory(const TrainOptions& o, const TrainResult& r) {
  MemoryCheck check;
  if (!r.steps.empty()) {
    const std::vector<RankStepMetrics>& ranks = r.steps.back().ranks;
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (ModelDataPeak(ranks[i]) > check.peak) {
        check.rank = static_cast<int>(i);
        check.peak = ModelDataPeak(ranks[i]);
      }
    }
  }
  if (check.rank < static_cast<int>(r.at_rest_bytes.size())) {
    check.at_rest = r.at_rest_bytes[check.rank];
  }
  check.sharded_bytes = static_cast<double>(ModelBytesPerParameter(o)) *
                        r.parameters / o.world_size;
  if (o.storage == ChunkLayout::kReplicated) {
    check.sharded_bytes *= o.world_size;
  }
  check.in_flight_bytes = static_cast<double>(check.peak - check.at_rest);
  const double bound = check.sharded_bytes + check.in_flight_bytes;
  check.ratio = bound > 0 ? check.peak / bound : 0;
  return check;
}

std::string FormatSummary(const TrainOptions& o, const TrainResult& r) {
  std::string s;
  const ModelSpec& m = r.spec;
  const int context = r.seq_len > 0 ? r.seq_len : m.positions();
  absl::StrAppendFormat(
      &s, "\n%s, context %d%s, vocab %d: Psi = %d parameters\n", m.Describe(),
      context,
      context == m.positions()
          ? ""
          : absl::StrCat(" (of ", m.positions(), " positions)"),
      m.vocab(), r.parameters);
  absl::StrAppendFormat(
      &s,
      "%d ranks, %s storage, %s, %s, chunks of %s elements "
      "(%.1f%% used)\n",
      o.world_size, ChunkLayoutName(o.storage), PrecisionFlagValue(o.precision),
      OptimizerKindName(o.optimizer),
      r.chunk_size > 0 ? absl::StrCat(r.chunk_size) : "one tensor",
      100 * r.chunk_utilisation);
  if (r.compute_device != "cpu") {
    absl::StrAppendFormat(&s, "device: %s\n", r.compute_device);
  }
  absl::StrAppendFormat(&s, "matmuls: %s on %s, %d thread%s per rank\n",
                        MatmulPrecision(o.precision) == gemm::Precision::kBf16
                            ? "bf16 (inputs rounded to bf16, f32 accumulation)"
                            : "f32",
                        r.gemm_kernel.empty() ? "?" : r.gemm_kernel,
                        r.threads_per_rank, r.threads_per_rank == 1 ? "" : "s");
  if (r.steps.empty()) {
    s += "no steps run\n";
    return s;
  }
  absl::StrAppendFormat(&s, "loss %.4f (step %d) -> %.4f (step %d)\n",
                        r.steps.front().loss, r.steps.front().step,
                        r.steps.back().loss, r.steps.back().step);

  // Memory.
  const MemoryCheck check = CheckMemory(o, r);
  const int64_t k = ModelBytesPerParameter(o);
  absl::StrAppendFormat(
      &s,
      "\nModel data per rank (chunk payloads: params and grads, fp32 "
      "masters, optimizer states):\n"
      "  %-5s %12s %12s %22s %12s\n",
      "rank", "peak", "at rest",
      absl::StrCat("replicated DDP ", ReplicatedBytesPerParameter(o), "Psi"),
      absl::StrCat(k, "Psi/N"));
  const std::vector<RankStepMetrics>& ranks = r.steps.back().ranks;
  for (size_t i = 0; i < ranks.size(); ++i) {
    absl::StrAppendFormat(
        &s, "  %-5d %12s %12s %22s %12s\n", i,
        Bytes(static_cast<double>(ModelDataPeak(ranks[i]))),
        Bytes(i < r.at_rest_bytes.size()
                  ? static_cast<double>(r.at_rest_bytes[i])
                  : 0.0),
        Bytes(static_cast<double>(ReplicatedBytesPerParameter(o)) *
              r.parameters),
        Bytes(static_cast<double>(k) * r.parameters / o.world_size));
  }
  if (o.device_memory_limit > 0) {
    const auto activations = ranks[0].peak_bytes.find("activation");
    absl::StrAppendFormat(
        &s,
        "  device: sim:0 peaks at %s of its %s limit on rank 0 (%s of it "
        "the model's activations and working buffers)%s\n",
        Bytes(static_cast<double>(ranks[0].peak_device_bytes)),
        Bytes(static_cast<double>(o.device_memory_limit)),
        Bytes(activations == ranks[0].peak_bytes.end()
                  ? 0.0
                  : static_cast<double>(activations->second)),
        // (A host limit needs --offload=nvme: three tiers.)
        OffloadNote(o.offload, r.auto_rests_on_host, o.host_memory_limit > 0));
  } else if (OffloadsParams(o.offload)) {
    absl::StrAppendFormat(
        &s,
        "  offload: the device (sim:0) peaks at %s on rank 0 (the chunks in "
        "use only)%s\n",
        Bytes(static_cast<double>(ranks[0].peak_device_bytes)),
        OffloadNote(o.offload, r.auto_rests_on_host, false));
  } else if (o.offload == OffloadPolicy::kOptimizer) {
    absl::StrAppendFormat(
        &s,
        "  offload: the device (sim:0) peaks at %s on rank 0 (compute "
        "chunks only; %dPsi/N of it would be %s); masters and optimizer "
        "states live in host memory\n",
        Bytes(static_cast<double>(ranks[0].peak_device_bytes)), ComputeBytes(o),
        Bytes(static_cast<double>(ComputeBytes(o)) * r.parameters /
              o.world_size));
  }
  if (o.offload == OffloadPolicy::kNvme) {
    absl::StrAppendFormat(
        &s,
        "  NVMe tier (%s, %s): rank 0 reads %s and writes %s per step there; "
        "the disk works %.3f s of the step, %.3f s of it hidden behind "
        "compute, and the rank waits %.3f s for it (the optimizer takes "
        "%.3f s); masters and optimizer states rest on disk\n",
        o.nvme_path, r.disk_io.empty() ? "?" : r.disk_io,
        Bytes(static_cast<double>(ranks[0].disk_read_bytes)),
        Bytes(static_cast<double>(ranks[0].disk_written_bytes)),
        ranks[0].disk_busy_s, ranks[0].disk_hidden_s(), ranks[0].disk_wait_s,
        r.steps.back().optimizer_s);
  }
  if (o.host_memory_limit > 0) {
    absl::StrAppendFormat(
        &s,
        "  host: rank 0 peaks at %s of its %s limit (--host_memory_limit); "
        "parameter chunks go to disk as it demands\n",
        Bytes(static_cast<double>(ranks[0].peak_host_bytes)),
        Bytes(static_cast<double>(o.host_memory_limit)));
  }
  if (OffloadsParams(o.offload)) {
    absl::StrAppendFormat(
        &s,
        "  rank 0 copies %s from host to device and %s back per step; the "
        "host peaks at %s\n",
        Bytes(static_cast<double>(ranks[0].h2d_bytes)),
        Bytes(static_cast<double>(ranks[0].d2h_bytes)),
        Bytes(static_cast<double>(ranks[0].peak_host_bytes)));
  }
  absl::StrAppendFormat(
      &s,
      "  rank %d: %s at rest between steps (%.3f x %dPsi/N: chunk "
      "padding), %s in flight at the peak (%.1f chunks of %s)\n",
      check.rank, Bytes(check.at_rest), check.at_rest / check.sharded_bytes, k,
      Bytes(check.in_flight_bytes),
      r.chunk_bytes > 0 ? check.in_flight_bytes / r.chunk_bytes : 0.0,
      Bytes(r.chunk_bytes));
  absl::StrAppendFormat(
      &s,
      "  the largest peak is %.1f%% of replicated DDP's model data; "
      "target peak <= 1.05 x (%dPsi/N + in flight): %.3f, %s\n",
      100.0 * check.peak /
          (static_cast<double>(ReplicatedBytesPerParameter(o)) * r.parameters),
      k, check.ratio, check.ratio <= 1.05 ? "met" : "NOT MET");
  const StepMetrics& last = r.steps.back();
  if (o.activation_checkpointing.enabled()) {
    absl::StrAppendFormat(
        &s,
        "  activations per micro-batch: %s kept, %s recomputed in backward "
        "(--activation_checkpointing=%s; rank 0 materialised %d chunks "
        "again for it in the last step)\n",
        Bytes(static_cast<double>(last.activation_kept_bytes)),
        Bytes(static_cast<double>(last.activation_recomputed_bytes)),
        o.activation_checkpointing.ToString(), last.recompute_accesses);
  } else {
    absl::StrAppendFormat(
        &s, "  activations per micro-batch: %s kept for backward\n",
        Bytes(static_cast<double>(last.activation_kept_bytes)));
  }

  // Traffic: the mean over the steps after the first.
  const size_t from = r.steps.size() > 1 ? 1 : 0;
  double comm = 0;
  for (size_t i = from; i < r.steps.size(); ++i) {
    for (const auto& [kind, bytes] : r.steps[i].ranks[0].comm_bytes) {
      comm += bytes;
    }
  }
  comm /= static_cast<double>(r.steps.size() - from);
  const double expected = ExpectedCommBytesPerStep(o, r.parameters);
  const bool tied =
      r.spec.family == ModelFamily::kGpt2 || r.spec.llama.tie_word_embeddings;
  absl::StrAppendFormat(
      &s,
      "\nComm per step, rank 0 (bus bytes, %s): %s; DESIGN.md section 7 "
      "gives %s for Psi (ratio %.3f: chunk padding, %sand the small "
      "agreement all-reduces make up the difference)\n",
      r.comm_transport.empty() ? "?" : r.comm_transport, Bytes(comm),
      Bytes(expected), expected > 0 ? comm / expected : 0.0,
      tied ? "the tied embedding's chunk gathered again for the output "
             "layer, "
           : "");

  // Speed, over the steps after the first (which builds the states).
  double time = 0, tokens_per_s = 0;
  for (size_t i = from; i < r.steps.size(); ++i) {
    time += r.steps[i].step_time_s;
    tokens_per_s += r.steps[i].tokens_per_s;
  }
  const double steps = static_cast<double>(r.steps.size() - from);
  const double tokens =
      static_cast<double>(o.batch) * o.world_size * o.grad_accum * context;
  absl::StrAppendFormat(
      &s,
      "Speed: %.3f s per step, %.0f tokens/s, %.2f model GFLOP/s "
      "(all ranks)\n",
      time / steps, tokens_per_s / steps,
      m.FlopsPerStep(context, static_cast<int64_t>(tokens)) / (time / steps) /
          1e9);
  return s;
}

void ProgressPrinter::OnStep(const StepMetrics& m) {
  if (!started_) {
    started_ = true;
    start_ = absl::Now();
    first_step_ = m.step - 1;
  }
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start_);
  const double done = static_cast<double>(m.step - first_step_);
  const double eta = elapsed / done * static_cast<double>(m.steps - m.step);
  // Every rank's peak; past 8 ranks the smallest and the largest.
  std::string memory;
  if (m.ranks.size() <= 8) {
    for (const RankStepMetrics& r : m.ranks) {
      if (!memory.empty()) memory += ", ";
      memory += Bytes(static_cast<double>(r.peak_total_bytes));
    }
  } else {
    int64_t lo = m.ranks[0].peak_total_bytes, hi = lo;
    for (const RankStepMetrics& r : m.ranks) {
      lo = std::min(lo, r.peak_total_bytes);
      hi = std::max(hi, r.peak_total_bytes);
    }
    memory = absl::StrCat(Bytes(static_cast<double>(lo)), " .. ",
                          Bytes(static_cast<double>(hi)));
  }
  const std::string line = absl::StrFormat(
      "step %*d/%d  loss %.4f  %s%.0f tokens/s  ETA %s  peak/rank %s",
      static_cast<int>(absl::StrCat(m.steps).size()), m.step, m.steps, m.loss,
      m.skipped ? "(skipped: overflow)  " : "", m.tokens_per_s, Duration(eta),
      memory);
  if (terminal_) {
    std::fprintf(out_, "\r%s\033[K", line.c_str());
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

void ProgressPrinter::Finish() {
  if (terminal_ && started_) std::fprintf(out_, "\n");
  std::fflush(out_);
}

}  // namespace chunkzero
