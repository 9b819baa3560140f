#include "tools/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gloo/rendezvous/hash_store.h"
#include "base/mutex.h"
#include "base/status_macros.h"
#include "chunk/chunk_manager.h"
#include "chunk/chunk_size_search.h"
#include "comm/gloo/gloo_process_group.h"
#include "comm/inprocess/in_process_group.h"
#include "comm/recording_process_group.h"
#include "ddp/zero_ddp.h"
#include "optim/zero_optimizer.h"
#include "tensor/memory_tracker.h"
#include "tools/gpt/gpt_checkpoint.h"
#include "tools/train/checkpoint.h"
#include "tools/train/gather.h"
#include "tools/train/token_data.h"

namespace chunkzero {

TrainOptions::TrainOptions() {
  model.layers = 2;
  model.d_model = 128;
  model.heads = 4;
  model.seq_len = 64;
  model.vocab = 256;
}

namespace {

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

// "AllGather" -> "all_gather".
std::string SnakeCase(absl::string_view camel) {
  std::string out;
  for (char c : camel) {
    if (c >= 'A' && c <= 'Z') {
      if (!out.empty()) out += '_';
      out += static_cast<char>(c - 'A' + 'a');
    } else {
      out += c;
    }
  }
  return out;
}

absl::StatusOr<DType> ParsePrecision(const std::string& name) {
  if (name == "fp32") return DType::kF32;
  if (name == "fp16") return DType::kF16;
  if (name == "bf16") return DType::kBF16;
  return absl::InvalidArgumentError(absl::StrCat(
      "--precision=", name, " is not one of fp32, fp16, bf16"));
}

// Everything derived from the options before the ranks start.
struct Plan {
  TrainOptions options;
  GptConfig model;
  DType dtype = DType::kF16;
  ChunkLayout layout = ChunkLayout::kSharded;
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  std::optional<int64_t> chunk_size;
  double utilisation = 1;
  TokenData data = TokenData::FromTokens({});
  std::optional<GptCheckpoint> init;
  std::optional<CheckpointMeta> resume_meta;
  std::vector<std::string> order;  // Declaration = first-use order.
  int64_t largest_tensor = 0;      // Elements of the largest parameter.
};

// The checkpoint's record of the model and the data order: a resumed run
// must match these (world size and layout may differ).
std::map<std::string, std::string> CheckpointConfig(const Plan& plan) {
  const GptConfig& m = plan.model;
  return {{"layers", absl::StrCat(m.layers)},
          {"d_model", absl::StrCat(m.d_model)},
          {"heads", absl::StrCat(m.heads)},
          {"seq_len", absl::StrCat(m.seq_len)},
          {"vocab", absl::StrCat(m.vocab)},
          {"optimizer", plan.options.optimizer},
          {"precision", plan.options.precision}};
}

absl::Status CheckOptions(const TrainOptions& o) {
  auto bad = [](absl::string_view flag, auto value, absl::string_view want) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", value, ": ", want));
  };
  if (o.backend == "nccl") {
    return absl::UnimplementedError(
        "--backend=nccl is not built: the model computes on the CPU, and "
        "NCCL needs GPUs (use inproc or gloo)");
  }
  if (o.backend != "inproc" && o.backend != "gloo") {
    return bad("backend", o.backend, "want inproc or gloo");
  }
  if (o.rank >= 0 &&
      (o.rank >= o.world_size || o.backend != "gloo" || o.rendezvous.empty())) {
    return bad("rank", o.rank,
               "one rank per process needs 0 <= rank < world_size, "
               "--backend=gloo and a --rendezvous directory");
  }
  if (o.world_size < 1) return bad("world_size", o.world_size, "want >= 1");
  if (o.batch < 1) return bad("batch", o.batch, "want >= 1");
  if (o.grad_accum < 1) return bad("grad_accum", o.grad_accum, "want >= 1");
  if (o.steps < 0) return bad("steps", o.steps, "want >= 0");
  if (o.warmup < 0) return bad("warmup", o.warmup, "want >= 0");
  if (o.save_every < 0) return bad("save_every", o.save_every, "want >= 0");
  if (o.chunk_size < -1) {
    return bad("chunk_size", o.chunk_size, "want -1 (search), 0 or a size");
  }
  if (o.offload != "none" && o.offload != "optimizer") {
    return bad("offload", o.offload, "want none or optimizer");
  }
  if (o.max_prefetch < 0) return bad("max_prefetch", o.max_prefetch, ">= 0");
  if (!o.data.empty() && !o.tokens.empty()) {
    return absl::InvalidArgumentError("give --data or --tokens, not both");
  }
  return absl::OkStatus();
}

absl::StatusOr<Plan> MakePlan(const TrainOptions& options) {
  CZ_RETURN_IF_ERROR(CheckOptions(options));
  Plan plan;
  plan.options = options;
  plan.model = options.model;
  CZ_ASSIGN_OR_RETURN(plan.dtype, ParsePrecision(options.precision));
  absl::StatusOr<ChunkLayout> layout = ParseChunkLayout(options.storage);
  if (!layout.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--storage: ", layout.status().message()));
  }
  plan.layout = *layout;
  absl::StatusOr<OptimizerKind> kind = ParseOptimizerKind(options.optimizer);
  if (!kind.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--optimizer: ", kind.status().message()));
  }
  plan.optimizer = *kind;
  if (!options.init.empty()) {
    CZ_ASSIGN_OR_RETURN(GptCheckpoint ckpt,
                        ReadGptCheckpoint(options.init, options.model.heads));
    // The architecture comes from the file (plus --heads); the context
    // length may be shorter than the learned positions.
    const int seq = std::min(options.model.seq_len, ckpt.config.seq_len);
    plan.model = ckpt.config;
    plan.model.seq_len = seq;
    if (seq != ckpt.config.seq_len) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--seq_len=", options.model.seq_len, " differs from the ",
          ckpt.config.seq_len, " positions of ", options.init,
          "; give --seq_len=", ckpt.config.seq_len));
    }
    plan.init = std::move(ckpt);
  }
  CZ_RETURN_IF_ERROR(plan.model.Validate());
  if (!options.tokens.empty()) {
    CZ_ASSIGN_OR_RETURN(plan.data, TokenData::FromTokenFile(
                                       options.tokens, plan.model.vocab));
  } else if (!options.data.empty()) {
    CZ_ASSIGN_OR_RETURN(plan.data, TokenData::FromByteFile(options.data));
  } else {
    plan.data = TokenData::BuiltIn();
  }
  if (plan.data.vocab_used() > plan.model.vocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the data uses token ids up to ", plan.data.vocab_used() - 1,
        " but --vocab is ", plan.model.vocab));
  }
  if (plan.data.size() <= plan.model.seq_len) {
    return absl::InvalidArgumentError(
        absl::StrCat("the data has ", plan.data.size(), " tokens, fewer than "
                     "one sequence of --seq_len=", plan.model.seq_len,
                     " plus one"));
  }
  std::vector<int64_t> sizes;
  for (const auto& [name, shape] : GptParameterShapes(plan.model)) {
    plan.order.push_back(name);
    sizes.push_back(NumElements(shape));
    plan.largest_tensor = std::max(plan.largest_tensor, sizes.back());
  }
  if (options.chunk_size > 0) {
    plan.chunk_size = options.chunk_size;
  } else if (options.chunk_size < 0) {
    // The size with the least padding, from the largest tensor up to 4x it.
    const int64_t largest = plan.largest_tensor;
    ChunkSizeSearchOptions search;
    search.min_chunk_size = largest;
    search.max_chunk_size = 4 * largest;
    search.grid = std::max<int64_t>(1, largest / 64);
    search.alignment = options.world_size;
    CZ_ASSIGN_OR_RETURN(ChunkSizeReport report,
                        SearchChunkSize(sizes, search));
    plan.chunk_size = report.best.chunk_size;
    plan.utilisation = report.best.utilisation;
  }
  if (plan.chunk_size.has_value() && options.chunk_size > 0) {
    ChunkSizeSearchOptions one;
    one.min_chunk_size = one.max_chunk_size = *plan.chunk_size;
    one.grid = 1;
    absl::StatusOr<ChunkSizeReport> report = SearchChunkSize(sizes, one);
    if (!report.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--chunk_size=", *plan.chunk_size, ": ", report.status().message()));
    }
    plan.utilisation = report->best.utilisation;
  }
  if (!options.resume.empty()) {
    CZ_ASSIGN_OR_RETURN(CheckpointMeta meta, ReadCheckpointMeta(options.resume));
    const auto want = CheckpointConfig(plan);
    for (const auto& [key, value] : want) {
      auto it = meta.config.find(key);
      if (it != meta.config.end() && it->second != value) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--resume=", options.resume, " was saved with ", key, "=",
            it->second, ", this run has ", key, "=", value));
      }
    }
    plan.resume_meta = std::move(meta);
  }
  return plan;
}

// RankStepMetrics as a fixed list of integers, to gather on rank 0: the peak
// of every category, the two totals, then (present, bytes) per collective.
std::vector<int64_t> Encode(const RankStepMetrics& m) {
  std::vector<int64_t> v;
  for (int k = 0; k < kNumMemoryCategories; ++k) {
    auto it = m.peak_bytes.find(
        std::string(MemoryCategoryName(static_cast<MemoryCategory>(k))));
    v.push_back(it == m.peak_bytes.end() ? 0 : it->second);
  }
  v.push_back(m.peak_total_bytes);
  v.push_back(m.peak_device_bytes);
  for (int k = 0; k < comm::kNumCollectiveKinds; ++k) {
    auto it = m.comm_bytes.find(SnakeCase(
        comm::CollectiveKindName(static_cast<comm::CollectiveKind>(k))));
    v.push_back(it != m.comm_bytes.end());
    v.push_back(it == m.comm_bytes.end() ? 0 : it->second);
  }
  return v;
}

RankStepMetrics Decode(const std::vector<int64_t>& v) {
  RankStepMetrics m;
  size_t i = 0;
  for (int k = 0; k < kNumMemoryCategories; ++k) {
    m.peak_bytes[std::string(
        MemoryCategoryName(static_cast<MemoryCategory>(k)))] = v[i++];
  }
  m.peak_total_bytes = v[i++];
  m.peak_device_bytes = v[i++];
  for (int k = 0; k < comm::kNumCollectiveKinds; ++k) {
    const bool present = v[i++] != 0;
    const int64_t bytes = v[i++];
    if (present) {
      m.comm_bytes[SnakeCase(comm::CollectiveKindName(
          static_cast<comm::CollectiveKind>(k)))] = bytes;
    }
  }
  return m;
}

RankStepMetrics Measure(const MemoryTracker& tracker,
                        const comm::RecordingSnapshot& comm) {
  RankStepMetrics m;
  for (Device d : {Device::Cpu(), Device::Simulated(0)}) {
    for (int k = 0; k < kNumMemoryCategories; ++k) {
      const auto category = static_cast<MemoryCategory>(k);
      const int64_t peak = tracker.Peak(d, category);
      if (peak > 0 || d == Device::Cpu()) {
        m.peak_bytes[std::string(MemoryCategoryName(category))] += peak;
      }
    }
    m.peak_total_bytes += tracker.PeakTotal(d);
    if (d != Device::Cpu()) m.peak_device_bytes += tracker.PeakTotal(d);
  }
  for (int k = 0; k < comm::kNumCollectiveKinds; ++k) {
    const auto kind = static_cast<comm::CollectiveKind>(k);
    if (comm[kind].calls == 0) continue;
    m.comm_bytes[SnakeCase(comm::CollectiveKindName(kind))] =
        std::llround(comm[kind].bus_bytes);
  }
  return m;
}

// One rank's whole run.
class RankRunner {
 public:
  // `result` is filled on rank 0 only.
  RankRunner(const Plan& plan, comm::ProcessGroup& group,
             const StepCallback& on_step, TrainResult* result)
      : plan_(plan),
        o_(plan.options),
        raw_(group),
        recorded_(group),
        on_step_(on_step),
        result_(result) {}

  absl::Status Run() {
    CZ_RETURN_IF_ERROR(SetUp());
    const int64_t first = plan_.resume_meta ? plan_.resume_meta->step : 0;
    if (rank() == 0) result_->first_step = first;
    for (int64_t step = first; step < o_.steps; ++step) {
      CZ_RETURN_IF_ERROR(TrainStep(step), "step ", step + 1);
      const bool last = step + 1 == o_.steps;
      if (!o_.save.empty() &&
          (last || (o_.save_every > 0 && (step + 1) % o_.save_every == 0))) {
        CZ_RETURN_IF_ERROR(Save(step + 1), "saving to ", o_.save);
      }
    }
    int64_t at_rest = 0;
    for (Device d : {Device::Cpu(), Device::Simulated(0)}) {
      at_rest += tracker_.CurrentTotal(d);
    }
    CZ_ASSIGN_OR_RETURN(std::vector<std::vector<int64_t>> all,
                        AllGatherInt64(raw_, {at_rest}));
    if (rank() == 0) {
      result_->at_rest_bytes.clear();
      for (const auto& r : all) result_->at_rest_bytes.push_back(r[0]);
    }
    if (!o_.export_path.empty()) {
      CZ_ASSIGN_OR_RETURN(auto dict, ddp_->GatherStateDict(false));
      if (rank() == 0) {
        CZ_RETURN_IF_ERROR(WriteGptCheckpoint(o_.export_path, dict));
      }
    }
    return absl::OkStatus();
  }

 private:
  int rank() const { return raw_.rank(); }

  absl::Status SetUp() {
    ChunkManagerOptions chunk_options;
    chunk_options.chunk_size = plan_.chunk_size;
    chunk_options.layout = plan_.layout;
    // ZeRO-Offload: the compute-dtype chunks live on the "accelerator" (the
    // host-backed simulated device on machines without a GPU), the masters
    // and optimizer states in host memory.
    if (o_.offload == "optimizer") chunk_options.device = Device::Simulated(0);
    chunks_ = std::make_unique<ChunkManager>(&recorded_, chunk_options,
                                             &tracker_);
    CZ_ASSIGN_OR_RETURN(model_, GptModel::Create(plan_.model, o_.seed));
    if (plan_.init.has_value()) {
      CZ_RETURN_IF_ERROR(model_->LoadStateDict(plan_.init->state),
                         "--init=", o_.init);
    }
    ZeroDdpOptions ddp_options;
    ddp_options.compute_dtype = plan_.dtype;
    ddp_options.max_prefetch = o_.max_prefetch;
    ddp_options.first_use_order = plan_.order;
    if (o_.offload == "optimizer") ddp_options.master_device = Device::Cpu();
    CZ_ASSIGN_OR_RETURN(ddp_,
                        ZeroDdp::Create(model_.get(), chunks_.get(),
                                        ddp_options));
    ZeroOptimizerOptions opt;
    opt.kind = plan_.optimizer;
    CZ_ASSIGN_OR_RETURN(opt.lr, LrSchedule::WarmupCosine(
                                    o_.lr, o_.min_lr, o_.warmup,
                                    std::max(o_.steps, 1)));
    if (o_.weight_decay >= 0) opt.weight_decay = o_.weight_decay;
    opt.max_grad_norm = o_.clip;
    opt.offload = o_.offload == "optimizer" ? OffloadPolicy::kOptimizer
                                            : OffloadPolicy::kNone;
    CZ_ASSIGN_OR_RETURN(optimizer_,
                        ZeroOptimizer::Create(ddp_.get(), chunks_.get(), opt));
    if (!o_.resume.empty()) {
      // Only the pieces this rank holds are read (and verified).
      CZ_ASSIGN_OR_RETURN(
          Checkpoint ckpt,
          ReadCheckpoint(o_.resume,
                         [&](const std::string& param, const std::string&,
                             int64_t begin, int64_t numel) {
                           return optimizer_->HoldsAny(param, begin, numel);
                         }));
      CZ_RETURN_IF_ERROR(optimizer_->LoadState(ckpt.state), "--resume=",
                         o_.resume);
    }
    tokens_per_rank_ = static_cast<size_t>(o_.batch) * plan_.model.seq_len;
    inputs_.resize(tokens_per_rank_);
    targets_.resize(tokens_per_rank_);
    recorded_.Reset();
    return absl::OkStatus();
  }

  absl::Status TrainStep(int64_t step) {
    const absl::Time start = absl::Now();
    absl::Duration forward, backward, optimizer;
    const BatchOrder order{o_.batch, o_.world_size, o_.grad_accum,
                           plan_.model.seq_len};
    double loss = 0;
    for (int m = 0; m < o_.grad_accum; ++m) {
      CZ_RETURN_IF_ERROR(plan_.data.FillBatch(order, step, m, rank(),
                                              absl::MakeSpan(inputs_),
                                              absl::MakeSpan(targets_)));
      absl::Time t = absl::Now();
      CZ_ASSIGN_OR_RETURN(float l,
                          model_->Forward(*ddp_, o_.batch, plan_.model.seq_len,
                                          inputs_, targets_));
      loss += l;
      forward += absl::Now() - t;
      t = absl::Now();
      CZ_RETURN_IF_ERROR(model_->Backward(
          *ddp_, static_cast<float>(optimizer_->loss_scale())));
      CZ_RETURN_IF_ERROR(ddp_->FinishBackward());
      backward += absl::Now() - t;
      if (m + 1 < o_.grad_accum) {
        t = absl::Now();
        CZ_RETURN_IF_ERROR(optimizer_->AccumulateGrads());
        optimizer += absl::Now() - t;
      }
    }
    absl::Time t = absl::Now();
    CZ_ASSIGN_OR_RETURN(StepResult result, optimizer_->Step());
    optimizer += absl::Now() - t;
    const absl::Duration step_time = absl::Now() - start;
    const comm::RecordingSnapshot comm = recorded_.SnapshotAndReset();

    // The global loss, and every rank's figures to rank 0: on the raw
    // group, so this bookkeeping is not counted as training traffic.
    std::vector<float> sum = {static_cast<float>(loss / o_.grad_accum)};
    CZ_RETURN_IF_ERROR(comm::AllReduce(raw_, comm::MutableBuffer::Of(sum)));
    CZ_ASSIGN_OR_RETURN(std::vector<std::vector<int64_t>> figures,
                        AllGatherInt64(raw_, Encode(Measure(tracker_, comm))));
    if (rank() == 0) {
      StepMetrics m;
      m.step = step + 1;
      m.steps = o_.steps;
      m.loss = sum[0] / o_.world_size;
      m.lr = result.lr;
      m.loss_scale = result.loss_scale;
      m.skipped = result.skipped;
      m.grad_norm = result.grad_norm;
      m.step_time_s = Seconds(step_time);
      m.tokens_per_s = static_cast<double>(tokens_per_rank_) *
                       o_.world_size * o_.grad_accum / m.step_time_s;
      m.forward_s = Seconds(forward);
      m.backward_s = Seconds(backward);
      m.optimizer_s = Seconds(optimizer);
      m.comm_wait_s = Seconds(comm.blocked);
      for (const std::vector<int64_t>& f : figures) m.ranks.push_back(Decode(f));
      result_->steps.push_back(m);
      if (on_step_) on_step_(m);
    }
    return absl::OkStatus();
  }

  absl::Status Save(int64_t step) {
    CZ_ASSIGN_OR_RETURN(OptimizerState shard, optimizer_->SaveShard());
    ChunkPlacementMap placement;
    for (const std::string& name : plan_.order) {
      CZ_ASSIGN_OR_RETURN(TensorLocation where,
                          chunks_->Locate(ddp_->master_group(), name));
      placement[name] = {where.chunk->name(),
                         where.chunk->tensor(where.index).offset};
    }
    CZ_ASSIGN_OR_RETURN(ShardIndex index,
                        WriteCheckpointShard(o_.save, step, rank(),
                                             o_.world_size, shard, &placement));
    // Every shard is durable once the gather returns; rank 0 commits.
    CZ_ASSIGN_OR_RETURN(std::vector<std::string> serialized,
                        AllGatherBytes(raw_, index.SerializeAsString()));
    absl::Status status;
    if (rank() == 0) {
      CheckpointMeta meta;
      meta.step = step;
      meta.world_size = o_.world_size;
      meta.layout = o_.storage;
      CopyOptimizerScalars(shard, &meta);
      meta.config = CheckpointConfig(plan_);
      std::vector<ShardIndex> indexes(serialized.size());
      for (size_t r = 0; r < serialized.size(); ++r) {
        if (!indexes[r].ParseFromString(serialized[r])) {
          status = absl::InternalError(
              absl::StrCat("rank ", r, "'s shard index did not arrive intact"));
        }
      }
      if (status.ok()) status = WriteCheckpointManifest(o_.save, meta, indexes);
    }
    // Every rank learns whether the commit worked, so that all of them
    // succeed or fail together.
    CZ_ASSIGN_OR_RETURN(
        std::vector<std::vector<int64_t>> committed,
        AllGatherInt64(raw_, {static_cast<int64_t>(status.code())}));
    if (!status.ok()) return status;
    if (committed[0][0] != 0) {
      return absl::Status(static_cast<absl::StatusCode>(committed[0][0]),
                          "rank 0 could not commit the checkpoint manifest");
    }
    return absl::OkStatus();
  }

  const Plan& plan_;
  const TrainOptions& o_;
  comm::ProcessGroup& raw_;
  comm::RecordingProcessGroup recorded_;
  const StepCallback& on_step_;
  TrainResult* result_;
  MemoryTracker tracker_;
  std::unique_ptr<ChunkManager> chunks_;
  std::unique_ptr<GptModel> model_;
  std::unique_ptr<ZeroDdp> ddp_;
  std::unique_ptr<ZeroOptimizer> optimizer_;
  size_t tokens_per_rank_ = 0;
  std::vector<int32_t> inputs_, targets_;
};

std::string JsonNumber(double x) {
  if (!std::isfinite(x)) return std::isnan(x) ? "NaN" : (x > 0 ? "Infinity" : "-Infinity");
  return absl::StrFormat("%.9g", x);
}

std::string JsonMap(const std::map<std::string, int64_t>& m) {
  std::vector<std::string> parts;
  for (const auto& [k, v] : m) parts.push_back(absl::StrCat("\"", k, "\":", v));
  return absl::StrCat("{", absl::StrJoin(parts, ","), "}");
}

}  // namespace

std::string StepMetricsJson(const StepMetrics& m) {
  std::vector<std::string> ranks;
  for (const RankStepMetrics& r : m.ranks) {
    ranks.push_back(absl::StrCat("{\"peak_bytes\":", JsonMap(r.peak_bytes),
                                 ",\"comm_bytes\":", JsonMap(r.comm_bytes),
                                 "}"));
  }
  return absl::StrCat(
      "{\"step\":", m.step, ",\"loss\":", JsonNumber(m.loss),
      ",\"lr\":", JsonNumber(m.lr), ",\"loss_scale\":",
      JsonNumber(m.loss_scale), ",\"skipped\":", m.skipped ? "true" : "false",
      ",\"grad_norm\":", JsonNumber(m.grad_norm),
      ",\"step_time_s\":", JsonNumber(m.step_time_s),
      ",\"tokens_per_s\":", JsonNumber(m.tokens_per_s),
      ",\"time_s\":{\"forward\":", JsonNumber(m.forward_s),
      ",\"backward\":", JsonNumber(m.backward_s),
      ",\"optimizer\":", JsonNumber(m.optimizer_s),
      ",\"comm_wait\":", JsonNumber(m.comm_wait_s), "},\"ranks\":[",
      absl::StrJoin(ranks, ","), "]}");
}

absl::StatusOr<TrainResult> RunTraining(const TrainOptions& options,
                                        const StepCallback& on_step) {
  CZ_ASSIGN_OR_RETURN(Plan plan, MakePlan(options));
  TrainResult result;
  result.model = plan.model;
  result.parameters = GptParameterCount(plan.model);
  result.chunk_size = plan.chunk_size.value_or(0);
  result.chunk_utilisation = plan.utilisation;
  result.chunk_bytes =
      plan.chunk_size.value_or(plan.largest_tensor) * ElementSize(plan.dtype);

  // The ranks' process groups: one in-process world, or one Gloo group per
  // rank over TCP, rendezvousing through a shared in-memory store (threads)
  // or a FileStore directory (one rank per process).
  std::unique_ptr<comm::InProcessWorld> world;
  std::unique_ptr<gloo::rendezvous::HashStore> store;
  if (options.backend == "inproc") {
    world = std::make_unique<comm::InProcessWorld>(options.world_size);
  } else if (options.rank < 0) {
    store = std::make_unique<gloo::rendezvous::HashStore>();
  }
  // The first failure is the cause; later ones are what it did to the others.
  Mutex failure_mu;
  absl::Status first_failure;
  auto run_rank = [&](int r) {
    absl::Status status;
    std::unique_ptr<comm::GlooProcessGroup> gloo_group;
    comm::ProcessGroup* group = world ? &world->group(r) : nullptr;
    if (group == nullptr) {
      absl::StatusOr<std::unique_ptr<comm::GlooProcessGroup>> created =
          store ? comm::GlooProcessGroup::Create(r, options.world_size, *store)
                : comm::GlooProcessGroup::CreateWithFileStore(
                      r, options.world_size, options.rendezvous);
      if (created.ok()) {
        gloo_group = *std::move(created);
        group = gloo_group.get();
      } else {
        status = created.status();
      }
    }
    if (group != nullptr) {
      RankRunner runner(plan, *group, on_step, &result);
      status = runner.Run();
    }
    if (status.ok()) return;
    {
      MutexLock lock(&failure_mu);
      if (first_failure.ok()) {
        first_failure = absl::Status(
            status.code(), absl::StrCat("rank ", r, ": ", status.message()));
      }
    }
    // A failed rank must not leave the others waiting in a collective:
    // abort the in-process world; a Gloo group resets its connections when
    // it is destroyed (at the end of this scope).
    if (world) world->Abort(first_failure);
  };
  std::vector<std::thread> threads;
  if (options.rank >= 0) {
    run_rank(options.rank);  // This process is one rank.
  } else {
    for (int r = 0; r < options.world_size; ++r) {
      threads.emplace_back(run_rank, r);
    }
  }
  for (std::thread& t : threads) t.join();
  MutexLock lock(&failure_mu);
  CZ_RETURN_IF_ERROR(first_failure);
  return result;
}

}  // namespace chunkzero
