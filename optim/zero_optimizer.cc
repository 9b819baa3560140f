#include "optim/zero_optimizer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "chunk/chunk_layout.h"
#include "comm/process_group.h"
#include "optim/cuda_fused_kernels.h"
#include "optim/fused_kernels.h"
#include "optim/internal/disk_staging.h"
#include "optim/internal/host_range.h"
#include "optim/internal/param_staging.h"
#include "tensor/cpu/cast_kernels.h"
#include "tensor/cpu/reduction_kernels.h"
#include "tensor/cuda/cuda_reductions.h"
#include "tensor/memory/allocator.h"

namespace chunkzero {
namespace {

using optim_internal::CommonGpu;
using optim_internal::HostRange;
using optim_internal::PayloadAt;

constexpr char kAccumulatorGroup[] = "grad_accum";

double DefaultWeightDecay(OptimizerKind kind) {
  return kind == OptimizerKind::kAdamW ? 0.01 : 0.0;
}

absl::Status CheckOptions(const ZeroOptimizerOptions& o, double weight_decay) {
  auto bad = [](absl::string_view what, double value) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer option ", what, " = ", value, " is out of range"));
  };
  // Every option is finite: an Inf or NaN would make every weight NaN at the
  // first update.
  for (double value :
       {o.lr.lr(), o.lr.min_lr(), o.beta1, o.beta2, o.eps, weight_decay,
        o.momentum, o.dampening, o.max_grad_norm}) {
    if (!std::isfinite(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer options must be finite, got ", value, " (lr ",
                       o.lr.lr(), ", min_lr ", o.lr.min_lr(), ", weight_decay ",
                       weight_decay, ", max_grad_norm ", o.max_grad_norm, ")"));
    }
  }
  if (o.max_overflows_at_min_scale < 0) {
    return bad("max_overflows_at_min_scale", o.max_overflows_at_min_scale);
  }
  if (const std::optional<OptimizerRateProblem> problem =
          CheckOptimizerRates(o.kind, o.lr.lr(), o.lr.min_lr(), weight_decay);
      problem.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer option ", problem->option, " = ",
                     problem->value, ": ", problem->why));
  }
  if (!(o.beta1 >= 0 && o.beta1 < 1))
    return bad("beta1 (want [0, 1))", o.beta1);
  if (!(o.beta2 >= 0 && o.beta2 < 1))
    return bad("beta2 (want [0, 1))", o.beta2);
  if (!(o.eps >= 0)) return bad("eps", o.eps);
  if (!(weight_decay >= 0)) return bad("weight_decay", weight_decay);
  if (!(o.momentum >= 0)) return bad("momentum", o.momentum);
  if (!(o.dampening >= 0)) return bad("dampening", o.dampening);
  if (!(o.max_grad_norm >= 0)) return bad("max_grad_norm", o.max_grad_norm);
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0)) {
    return absl::InvalidArgumentError(
        "Nesterov momentum requires a momentum and zero dampening");
  }
  return absl::OkStatus();
}

}  // namespace

std::optional<OptimizerRateProblem> CheckOptimizerRates(
    OptimizerKind kind, double lr, double min_lr,
    std::optional<double> weight_decay) {
  const double decay = weight_decay.value_or(DefaultWeightDecay(kind));
  const struct {
    const char* option;
    double value;
  } rates[] = {{"lr", lr}, {"min_lr", min_lr}, {"weight_decay", decay}};
  constexpr double kF32Max = std::numeric_limits<float>::max();
  for (const auto& [option, value] : rates) {
    if (!std::isfinite(value) || value < 0) {
      return OptimizerRateProblem{option, value, "is not a finite number >= 0"};
    }
    if (value > kF32Max) {
      return OptimizerRateProblem{
          option, value,
          "is past the largest f32 (3.4e38), which the update computes in: "
          "it would be Inf"};
    }
  }
  if (min_lr > lr) {
    return OptimizerRateProblem{
        "min_lr", min_lr,
        absl::StrCat("is above lr (", lr,
                     "): the rate decays from lr down to min_lr")};
  }
  const bool factor =
      kind == OptimizerKind::kAdamW || kind == OptimizerKind::kSgd;
  if (factor && lr * decay >= 2) {
    return OptimizerRateProblem{
        "weight_decay", decay,
        absl::StrCat("times lr (", lr, ") is ", lr * decay,
                     ": each step multiplies the weights by 1 - lr x "
                     "weight_decay, <= -1 here, so they would grow without "
                     "bound; want lr x weight_decay < 2")};
  }
  return std::nullopt;
}

absl::string_view OffloadPolicyName(OffloadPolicy offload) {
  switch (offload) {
    case OffloadPolicy::kNone:
      return "none";
    case OffloadPolicy::kOptimizer:
      return "optimizer";
    case OffloadPolicy::kParams:
      return "params";
    case OffloadPolicy::kAuto:
      return "auto";
    case OffloadPolicy::kNvme:
      return "nvme";
  }
  return "";
}

absl::string_view OptimizerKindName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd:
      return "sgd";
    case OptimizerKind::kAdam:
      return "adam";
    case OptimizerKind::kAdamW:
      return "adamw";
  }
  return "unknown";
}

absl::StatusOr<OptimizerKind> ParseOptimizerKind(absl::string_view name) {
  for (OptimizerKind kind :
       {OptimizerKind::kSgd, OptimizerKind::kAdam, OptimizerKind::kAdamW}) {
    if (name == OptimizerKindName(kind)) return kind;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown optimizer '", name, "' (want sgd, adam or adamw)"));
}

absl::StatusOr<std::unique_ptr<ZeroOptimizer>> ZeroOptimizer::Create(
    ZeroDdp* ddp, const ZeroOptimizerOptions& options) {
  if (ddp == nullptr) {
    return absl::InvalidArgumentError("ZeroOptimizer needs a ZeroDdp");
  }
  const double wd =
      options.weight_decay.value_or(DefaultWeightDecay(options.kind));
  CZ_RETURN_IF_ERROR(CheckOptions(options, wd));
  if (options.offload == OffloadPolicy::kNvme && options.disk == nullptr) {
    return absl::InvalidArgumentError(
        "ZeroOptimizer: OffloadPolicy::kNvme needs a disk tier");
  }
  if (options.disk_piece_elements < 1024 ||
      options.disk_piece_elements % 1024 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ZeroOptimizerOptions::disk_piece_elements is ",
        options.disk_piece_elements,
        ": want a positive multiple of 1024 (whole 4 KiB blocks of f32)"));
  }
  std::optional<DynamicLossScaler> scaler;
  if (ddp->compute_dtype() == DType::kF16) {
    CZ_ASSIGN_OR_RETURN(DynamicLossScaler s,
                        DynamicLossScaler::Create(options.loss_scaler));
    scaler = s;
  }
  return std::unique_ptr<ZeroOptimizer>(
      new ZeroOptimizer(ddp, &ddp->chunks(), options, scaler));
}

ZeroOptimizer::ZeroOptimizer(ZeroDdp* ddp, ChunkManager* chunks,
                             const ZeroOptimizerOptions& options,
                             std::optional<DynamicLossScaler> scaler)
    : ddp_(ddp),
      chunks_(chunks),
      options_(options),
      weight_decay_(
          options.weight_decay.value_or(DefaultWeightDecay(options.kind))),
      scaler_(std::move(scaler)),
      backwards_seen_(ddp->steps_finished()) {
  if (options.kind == OptimizerKind::kSgd) {
    if (options.momentum != 0) state_names_ = {kMomentumState};
  } else {
    state_names_ = {kExpAvgState, kExpAvgSqState};
  }
  if (options.offload != OffloadPolicy::kNone) {
    states_device_ = Device::Cpu();
  }
}

double ZeroOptimizer::loss_scale() const {
  return scaler_.has_value() ? scaler_->scale() : 1.0;
}

int ZeroOptimizer::num_chunks() const {
  return chunks_->num_chunks(ddp_->param_group());
}

Chunk* ZeroOptimizer::ParamChunk(int i) const {
  return chunks_->chunk(ddp_->param_group(), i);
}

Chunk* ZeroOptimizer::GroupChunk(const std::string& group, int i) const {
  return chunks_->chunk(group, i);
}

std::pair<int64_t, int64_t> ZeroOptimizer::HeldRangeOf(const Chunk* c) {
  return UpdateRange(c->sharding(), c->used_elements());
}

std::pair<int64_t, int64_t> ZeroOptimizer::HeldRange(int i) const {
  return HeldRangeOf(ParamChunk(i));
}

bool ZeroOptimizer::HoldsAny(const std::string& param, int64_t begin,
                             int64_t numel) const {
  absl::StatusOr<TensorLocation> where =
      chunks_->Locate(ddp_->master_group(), param);
  if (!where.ok()) return false;
  const int64_t offset = where->chunk->tensor(where->index).offset;
  const auto [lo, hi] = IntersectRanges(
      HeldRangeOf(where->chunk), {offset + begin, offset + begin + numel});
  return lo < hi;
}

std::pair<int64_t, int64_t> ZeroOptimizer::AccountedRange(int i) const {
  // Replicated: rank r accounts for the r-th of world slices, so that sums
  // and saved pieces count each element once.
  const Chunk* chunk = ParamChunk(i);
  return AccountRange(chunk->sharding(), chunk->used_elements());
}

absl::Status ZeroOptimizer::ConsumeBackward(absl::string_view operation) {
  if (ddp_->steps_finished() == backwards_seen_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ZeroOptimizer::", operation,
        " without a backward: call ZeroDdp::FinishBackward first (",
        ddp_->steps_finished(), " backward passes finished, all consumed)"));
  }
  backwards_seen_ = ddp_->steps_finished();
  return absl::OkStatus();
}

absl::Status ZeroOptimizer::EnsureStates() {
  if (states_created_) return absl::OkStatus();
  if (!ddp_->registered()) {
    return absl::FailedPreconditionError(
        "ZeroOptimizer: the parameters are not in their chunks yet");
  }
  const std::string& masters = ddp_->master_group();
  const bool nvme = options_.offload == OffloadPolicy::kNvme;
  // The masters are on disk already (ZeroDdp spills them as it registers
  // them) or go there now, and each state chunk as soon as it is filled
  // (only the last chunk of a group is being filled, chunk_packing.h):
  // host memory holds one chunk of states at a time.
  auto spill = [&](const std::string& group, bool all) -> absl::Status {
    const int n = chunks_->num_chunks(group);
    for (int i = 0; i < (all ? n : n - 1); ++i) {
      Chunk* chunk = GroupChunk(group, i);
      if (chunk->rests_on_disk()) continue;
      if (chunk->device() != Device::Cpu()) {
        CZ_RETURN_IF_ERROR(chunks_->MoveChunk(chunk, Device::Cpu()));
      }
      CZ_RETURN_IF_ERROR(chunk->SpillRest(options_.disk));
    }
    return absl::OkStatus();
  };
  if (nvme) CZ_RETURN_IF_ERROR(spill(masters, true), "the masters to disk");
  for (const std::string& state : state_names_) {
    // States are created where they will live (offload: host memory).
    CZ_RETURN_IF_ERROR(chunks_->CreatePairedGroup(state, masters, DType::kF32,
                                                  MemoryCategory::kOptimState,
                                                  states_device_));
    for (const std::string& name : ddp_->registration_order()) {
      CZ_ASSIGN_OR_RETURN(TensorLocation where, chunks_->Locate(masters, name));
      CZ_ASSIGN_OR_RETURN(
          Tensor zeros,
          Tensor::Zeros(where.chunk->tensor(where.index).shape, DType::kF32));
      CZ_RETURN_IF_ERROR(chunks_->AppendTensor(state, name, zeros).status());
      if (nvme)
        CZ_RETURN_IF_ERROR(spill(state, false), "the ", state, " to disk");
    }
    CZ_RETURN_IF_ERROR(chunks_->CloseGroup(state));
    if (nvme) CZ_RETURN_IF_ERROR(spill(state, true), "the ", state, " to disk");
  }
  states_created_ = true;
  // (On the NVMe tier they went to disk from host memory already.)
  if (states_device_.has_value() && !nvme) {
    CZ_RETURN_IF_ERROR(MoveStates(*states_device_));
  }
  if (pending_.has_value()) {
    OptimizerState pending = std::move(*pending_);
    pending_.reset();
    CZ_RETURN_IF_ERROR(CheckPieces(pending, /*states_too=*/true),
                       "loading the optimizer state kept from before the "
                       "first step");
    // The masters loaded at once (and trained since, in this step's
    // backward); only the states were waiting. The compute-dtype chunks
    // hold this step's grads now: leave them.
    CZ_RETURN_IF_ERROR(
        LoadPieces(pending, /*masters_too=*/false, /*states_too=*/true));
  }
  return absl::OkStatus();
}

absl::Status ZeroOptimizer::EnsureAccumulator() {
  if (accumulator_created_) return absl::OkStatus();
  const std::string& masters = ddp_->master_group();
  CZ_RETURN_IF_ERROR(
      chunks_->CreatePairedGroup(kAccumulatorGroup, masters, DType::kF32,
                                 MemoryCategory::kGradAccum, states_device_));
  for (const std::string& name : ddp_->registration_order()) {
    CZ_ASSIGN_OR_RETURN(TensorLocation where, chunks_->Locate(masters, name));
    CZ_ASSIGN_OR_RETURN(
        Tensor zeros,
        Tensor::Zeros({where.chunk->tensor(where.index).numel}, DType::kF32));
    CZ_RETURN_IF_ERROR(
        chunks_->AppendTensor(kAccumulatorGroup, name, zeros).status());
  }
  CZ_RETURN_IF_ERROR(chunks_->CloseGroup(kAccumulatorGroup));
  accumulator_created_ = true;
  return absl::OkStatus();
}

absl::Status ZeroOptimizer::MoveStates(Device device) {
  // (The masters go to disk as they are registered: before the first step
  // too.)
  if (options_.offload == OffloadPolicy::kNvme &&
      (states_created_ ||
       (num_chunks() > 0 &&
        GroupChunk(ddp_->master_group(), 0)->rests_on_disk()))) {
    return absl::FailedPreconditionError(
        absl::StrCat("ZeroOptimizer::MoveStates to ", device.ToString(),
                     ": the masters and optimizer states rest on disk "
                     "(OffloadPolicy::kNvme) and do not move"));
  }
  std::vector<std::string> groups = {ddp_->master_group()};
  if (states_created_) {
    groups.insert(groups.end(), state_names_.begin(), state_names_.end());
  }
  if (accumulator_created_) groups.push_back(kAccumulatorGroup);
  for (const std::string& group : groups) {
    for (int i = 0; i < chunks_->num_chunks(group); ++i) {
      Chunk* chunk = GroupChunk(group, i);
      if (chunk->device() == device) continue;
      CZ_RETURN_IF_ERROR(chunks_->MoveChunk(chunk, device));
    }
  }
  states_device_ = device;
  return absl::OkStatus();
}

absl::Status ZeroOptimizer::FoldIntoAccumulator(bool restore_weights) {
  const bool first = micro_batches_ == 0;
  const DType dtype = ddp_->compute_dtype();
  for (int i = 0; i < num_chunks(); ++i) {
    const auto [begin, end] = HeldRange(i);
    if (begin == end) continue;
    Chunk* param = ParamChunk(i);
    Chunk* acc_chunk = GroupChunk(kAccumulatorGroup, i);
    Chunk* master_chunk = GroupChunk(ddp_->master_group(), i);
    if (CommonGpu({param, acc_chunk, master_chunk}).has_value()) {
      // All on one GPU: the kernel runs there, on the payloads.
      void* grad = PayloadAt(param, begin);
      CZ_RETURN_IF_ERROR(
          CudaAccumulateGradAndRestore(
              reinterpret_cast<float*>(PayloadAt(acc_chunk, begin)), grad,
              dtype, first,
              reinterpret_cast<const float*>(PayloadAt(master_chunk, begin)),
              restore_weights ? grad : nullptr, dtype,
              static_cast<size_t>(end - begin), /*stream=*/nullptr),
          "accumulating the grads of chunk ", param->name());
      continue;
    }
    CZ_ASSIGN_OR_RETURN(HostRange grad, HostRange::Open(param, begin, end));
    CZ_ASSIGN_OR_RETURN(
        HostRange acc,
        HostRange::Open(GroupChunk(kAccumulatorGroup, i), begin, end));
    // The masters only to restore the weights (on disk, they are a read).
    std::optional<HostRange> master;
    if (restore_weights) {
      CZ_ASSIGN_OR_RETURN(
          master,
          HostRange::Open(GroupChunk(ddp_->master_group(), i), begin, end));
    }
    CZ_RETURN_IF_ERROR(
        AccumulateGradAndRestore(
            acc.as<float>(), grad.get(), dtype, first,
            // Without a restore nothing is written from `master`: the
            // accumulator stands in (read, unused) rather than a read of the
            // masters from disk.
            master.has_value() ? master->as<float>() : acc.as<float>(),
            restore_weights ? grad.get() : nullptr, dtype,
            static_cast<size_t>(end - begin)),
        "accumulating the grads of chunk ", param->name());
    CZ_RETURN_IF_ERROR(acc.Finish());
    if (restore_weights) CZ_RETURN_IF_ERROR(grad.Finish());
  }
  ++micro_batches_;
  return absl::OkStatus();
}

absl::Status ZeroOptimizer::AccumulateGrads() {
  CZ_RETURN_IF_ERROR(ConsumeBackward("AccumulateGrads"));
  CZ_RETURN_IF_ERROR(EnsureStates());
  CZ_RETURN_IF_ERROR(EnsureAccumulator());
  CZ_RETURN_IF_ERROR(FoldIntoAccumulator(/*restore_weights=*/true));
  ddp_->ClearGrads();
  return absl::OkStatus();
}

absl::StatusOr<double> ZeroOptimizer::LocalSumOfSquares(bool from_accumulator) {
  // Each chunk's part, then their sum in chunk order (the CPU's and the
  // GPU's parts are the same bits, so the total does not depend on where a
  // chunk rests). A GPU's chunks go in one batch: one copy and one wait for
  // all of them, not one per chunk.
  std::vector<double> parts(static_cast<size_t>(num_chunks()), 0.0);
  struct GpuBatch {
    DType dtype = DType::kF32;
    std::vector<CudaReductionInput> inputs;
    std::vector<int> chunk_indices;
  };
  std::map<int, GpuBatch> on_gpus;
  for (int i = 0; i < num_chunks(); ++i) {
    const auto [begin, end] = AccountedRange(i);
    if (begin == end) continue;
    Chunk* chunk =
        from_accumulator ? GroupChunk(kAccumulatorGroup, i) : ParamChunk(i);
    if (const std::optional<Device> gpu = CommonGpu({chunk}); gpu.has_value()) {
      GpuBatch& batch = on_gpus[gpu->index()];
      batch.dtype = chunk->dtype();
      batch.inputs.push_back(
          {PayloadAt(chunk, begin), static_cast<size_t>(end - begin)});
      batch.chunk_indices.push_back(i);
      continue;
    }
    CZ_ASSIGN_OR_RETURN(HostRange grad, HostRange::Open(chunk, begin, end));
    CZ_ASSIGN_OR_RETURN(parts[static_cast<size_t>(i)],
                        SumOfSquares(grad.get(), chunk->dtype(),
                                     static_cast<size_t>(end - begin)));
  }
  for (const auto& [device_index, batch] : on_gpus) {
    absl::StatusOr<std::vector<double>> sums =
        CudaSumsOfSquares(device_index, batch.dtype, batch.inputs);
    CZ_RETURN_IF_ERROR(sums.status(), "the grad norm of ", batch.inputs.size(),
                       " chunks on cuda:", device_index);
    for (size_t k = 0; k < batch.chunk_indices.size(); ++k) {
      parts[static_cast<size_t>(batch.chunk_indices[k])] = (*sums)[k];
    }
  }
  double sum = 0;
  for (const double part : parts) sum += part;
  return sum;
}

absl::Status ZeroOptimizer::Update(float grad_scale, double lr,
                                   bool from_accumulator) {
  const DType dtype = ddp_->compute_dtype();
  const double t = static_cast<double>(updates_);
  AdamStep adam;
  SgdStep sgd;
  if (options_.kind == OptimizerKind::kSgd) {
    sgd.lr = static_cast<float>(lr);
    sgd.momentum = static_cast<float>(options_.momentum);
    sgd.dampening = static_cast<float>(options_.dampening);
    sgd.weight_decay = static_cast<float>(weight_decay_);
    sgd.nesterov = options_.nesterov;
    sgd.first_step = updates_ == 1;
    sgd.grad_scale = grad_scale;
  } else {
    adam.lr = static_cast<float>(lr);
    adam.beta1 = static_cast<float>(options_.beta1);
    adam.beta2 = static_cast<float>(options_.beta2);
    adam.eps = static_cast<float>(options_.eps);
    adam.weight_decay = static_cast<float>(weight_decay_);
    adam.decoupled_weight_decay = options_.kind == OptimizerKind::kAdamW;
    adam.bias_correction1 =
        static_cast<float>(1.0 - std::pow(options_.beta1, t));
    adam.bias_correction2_sqrt =
        static_cast<float>(std::sqrt(1.0 - std::pow(options_.beta2, t)));
    adam.grad_scale = grad_scale;
  }
  // Chunks to update, and whether each one's params travel: a param chunk
  // resting on a device while its master rests in host memory
  // (ZeRO-Offload). Those are fetched one chunk ahead, so that a chunk's
  // grads cross while the previous chunk updates, and go back while the
  // next one does.
  std::vector<int> todo;
  for (int i = 0; i < num_chunks(); ++i) {
    const auto [begin, end] = HeldRange(i);
    if (begin != end) todo.push_back(i);
  }
  // (Where the payload rests, not where the chunk computes: offloaded
  // parameter chunks rest on the host, maybe with their payload on disk,
  // which HostRange brings back and pins.)
  auto travels = [&](int i) {
    const Device param = ParamChunk(i)->rest_device();
    return param != Device::Cpu() &&
           GroupChunk(ddp_->master_group(), i)->device() == Device::Cpu();
  };
  // Masters and states resting on disk come through the disk pipeline,
  // each with its payload on disk first (an access that failed half way
  // could have left one in memory).
  const bool on_disk =
      !todo.empty() &&
      GroupChunk(ddp_->master_group(), todo[0])->rests_on_disk();
  for (size_t k = 0; on_disk && k < todo.size(); ++k) {
    CZ_RETURN_IF_ERROR(
        GroupChunk(ddp_->master_group(), todo[k])->SettleOnDisk());
    for (const std::string& state : state_names_) {
      CZ_RETURN_IF_ERROR(GroupChunk(state, todo[k])->SettleOnDisk());
    }
  }
  // They come in pieces of at most disk_piece_elements of a chunk, so that
  // the buffers hold pieces, not chunks (a chunk may be 195 M elements).
  const int64_t piece = options_.disk_piece_elements;
  struct DiskPiece {
    size_t k;
    int64_t begin, end;
  };
  std::vector<DiskPiece> pieces;
  for (size_t k = 0; on_disk && k < todo.size(); ++k) {
    const auto [begin, end] = HeldRange(todo[k]);
    for (int64_t b = begin; b < end; b += piece) {
      pieces.push_back({k, b, std::min(end, b + piece)});
    }
  }
  std::optional<optim_internal::DiskStaging> disk;
  auto fetch_disk = [&](size_t u) -> absl::Status {
    if (u >= pieces.size()) return absl::OkStatus();
    const int i = todo[pieces[u].k];
    std::vector<Chunk*> group = {GroupChunk(ddp_->master_group(), i)};
    for (const std::string& state : state_names_) {
      group.push_back(GroupChunk(state, i));
    }
    const int64_t first = group[0]->shard_begin();
    return disk->Fetch(group, (pieces[u].begin - first) * 4,
                       (pieces[u].end - pieces[u].begin) * 4);
  };
  if (on_disk) disk.emplace(options_.disk, chunks_->tracker());
  CZ_RETURN_IF_ERROR(fetch_disk(0));
  size_t next_piece = 0;
  std::optional<optim_internal::ParamStaging> staging;
  auto fetch = [&](size_t k) -> absl::Status {
    if (k >= todo.size() || !travels(todo[k])) return absl::OkStatus();
    Chunk* chunk = ParamChunk(todo[k]);
    if (!staging.has_value()) {
      CZ_ASSIGN_OR_RETURN(OffloadCopies copies,
                          OffloadCopiesFor(chunk->device()));
      staging.emplace(copies.copier, copies.host_memory);
    }
    const auto [begin, end] = HeldRange(todo[k]);
    // Grads from the accumulator: the range is only written.
    return staging->Fetch(chunk, begin, end,
                          /*copy_in=*/!from_accumulator);
  };
  CZ_RETURN_IF_ERROR(fetch(0));
  for (size_t k = 0; k < todo.size(); ++k) {
    const int i = todo[k];
    const auto [begin, end] = HeldRange(i);
    Chunk* param_chunk = ParamChunk(i);
    CZ_RETURN_IF_ERROR(fetch(k + 1));
    if (absl::StatusOr<bool> on_gpu =
            UpdateOnGpu(adam, sgd, i, begin, end, from_accumulator);
        !on_gpu.ok() || *on_gpu) {
      CZ_RETURN_IF_ERROR(on_gpu.status(), "updating chunk ",
                         param_chunk->name());
      continue;
    }
    const bool staged = travels(i);
    std::optional<HostRange> param_range;
    void* param_out = nullptr;
    if (staged) {
      CZ_ASSIGN_OR_RETURN(param_out, staging->Get(param_chunk));
    } else {
      CZ_ASSIGN_OR_RETURN(param_range,
                          HostRange::Open(param_chunk, begin, end));
      param_out = param_range->get();
    }
    std::optional<HostRange> acc;
    if (from_accumulator) {
      CZ_ASSIGN_OR_RETURN(
          acc, HostRange::Open(GroupChunk(kAccumulatorGroup, i), begin, end));
    }
    const DType grad_dtype = from_accumulator ? DType::kF32 : dtype;
    const char* grad =
        static_cast<const char*>(from_accumulator ? acc->get() : param_out);
    // Elements [from, to) of the chunk's held range, `first` its first (a
    // copy: C++17 lambdas cannot capture structured bindings).
    const int64_t first = begin;
    auto update = [&](float* master, const std::vector<float*>& states,
                      int64_t from, int64_t to) -> absl::Status {
      const void* g = grad + (from - first) * ElementSize(grad_dtype);
      void* out =
          static_cast<char*>(param_out) + (from - first) * ElementSize(dtype);
      const size_t m = static_cast<size_t>(to - from);
      const absl::Status status =
          options_.kind == OptimizerKind::kSgd
              ? FusedSgd(sgd, master, states.empty() ? nullptr : states[0], g,
                         grad_dtype, out, dtype, m)
              : FusedAdam(adam, master, states[0], states[1], g, grad_dtype,
                          out, dtype, m);
      CZ_RETURN_IF_ERROR(status, "updating chunk ", param_chunk->name());
      return absl::OkStatus();
    };
    if (on_disk) {
      // The masters and states from the disk pipeline, piece by piece: the
      // next piece (maybe the next chunk's) reads while this one updates.
      for (; next_piece < pieces.size() && pieces[next_piece].k == k;
           ++next_piece) {
        CZ_RETURN_IF_ERROR(fetch_disk(next_piece + 1));
        CZ_ASSIGN_OR_RETURN(std::vector<char*> p, disk->Get(next_piece));
        std::vector<float*> states;
        for (size_t s = 1; s < p.size(); ++s) {
          states.push_back(reinterpret_cast<float*>(p[s]));
        }
        CZ_RETURN_IF_ERROR(update(reinterpret_cast<float*>(p[0]), states,
                                  pieces[next_piece].begin,
                                  pieces[next_piece].end));
        CZ_RETURN_IF_ERROR(disk->Return(next_piece), "writing chunk ",
                           param_chunk->name(),
                           "'s masters and states to disk");
      }
    } else {
      CZ_ASSIGN_OR_RETURN(
          HostRange master,
          HostRange::Open(GroupChunk(ddp_->master_group(), i), begin, end));
      std::vector<HostRange> states;
      std::vector<float*> state_data;
      for (const std::string& state : state_names_) {
        CZ_ASSIGN_OR_RETURN(HostRange s,
                            HostRange::Open(GroupChunk(state, i), begin, end));
        state_data.push_back(s.as<float>());
        states.push_back(std::move(s));
      }
      CZ_RETURN_IF_ERROR(update(master.as<float>(), state_data, begin, end));
      CZ_RETURN_IF_ERROR(master.Finish());
      for (HostRange& s : states) CZ_RETURN_IF_ERROR(s.Finish());
    }
    if (staged) {
      CZ_RETURN_IF_ERROR(staging->Return(param_chunk));
    } else {
      CZ_RETURN_IF_ERROR(param_range->Finish());
    }
  }
  if (staging.has_value()) {
    CZ_RETURN_IF_ERROR(staging->Finish(), "writing the updated weights back");
  }
  if (disk.has_value()) {
    CZ_RETURN_IF_ERROR(disk->Finish(),
                       "writing the masters and states to disk");
  }
  return absl::OkStatus();
}

absl::StatusOr<ZeroOptimizer::OffloadCopies> ZeroOptimizer::OffloadCopiesFor(
    Device device) {
  auto it = copiers_.find(device);
  if (it == copiers_.end()) {
    CZ_ASSIGN_OR_RETURN(std::unique_ptr<AsyncCopier> copier,
                        AsyncCopier::Create(device));
    it = copiers_.emplace(device, std::move(copier)).first;
  }
  // Pinned memory for a GPU, so that the copies are asynchronous.
  const bool gpu = device.type() == DeviceType::kCuda;
  std::unique_ptr<CachingAllocator>& cache = gpu ? pinned_cache_ : host_cache_;
  if (cache == nullptr) {
    cache = std::make_unique<CachingAllocator>(
        gpu ? static_cast<Allocator*>(&pinned_) : &host_);
  }
  return OffloadCopies{it->second.get(), cache.get()};
}

absl::StatusOr<bool> ZeroOptimizer::UpdateOnGpu(const AdamStep& adam,
                                                const SgdStep& sgd, int i,
                                                int64_t begin, int64_t end,
                                                bool from_accumulator) {
  Chunk* param_chunk = ParamChunk(i);
  Chunk* master_chunk = GroupChunk(ddp_->master_group(), i);
  Chunk* acc_chunk =
      from_accumulator ? GroupChunk(kAccumulatorGroup, i) : nullptr;
  std::vector<Chunk*> states;
  for (const std::string& state : state_names_) {
    states.push_back(GroupChunk(state, i));
  }
  if (!CommonGpu({param_chunk, master_chunk, acc_chunk,
                  states.empty() ? nullptr : states[0],
                  states.size() < 2 ? nullptr : states[1]})
           .has_value()) {
    return false;  // Something rests elsewhere: the CPU kernel runs.
  }
  const DType dtype = ddp_->compute_dtype();
  const size_t n = static_cast<size_t>(end - begin);
  auto f32 = [&](Chunk* chunk) {
    return reinterpret_cast<float*>(PayloadAt(chunk, begin));
  };
  void* param_out = PayloadAt(param_chunk, begin);
  const void* grad = from_accumulator ? f32(acc_chunk) : param_out;
  const DType grad_dtype = from_accumulator ? DType::kF32 : dtype;
  if (options_.kind == OptimizerKind::kSgd) {
    CZ_RETURN_IF_ERROR(CudaFusedSgd(sgd, f32(master_chunk),
                                    states.empty() ? nullptr : f32(states[0]),
                                    grad, grad_dtype, param_out, dtype, n,
                                    /*stream=*/nullptr));
  } else {
    CZ_RETURN_IF_ERROR(CudaFusedAdam(adam, f32(master_chunk), f32(states[0]),
                                     f32(states[1]), grad, grad_dtype,
                                     param_out, dtype, n, /*stream=*/nullptr));
  }
  return true;
}

absl::StatusOr<StepResult> ZeroOptimizer::Step() {
  CZ_RETURN_IF_ERROR(ConsumeBackward("Step"));
  CZ_RETURN_IF_ERROR(EnsureStates());
  StepResult result;
  result.loss_scale = loss_scale();
  result.lr = options_.lr.At(iterations_);
  const bool accumulated = micro_batches_ > 0;
  if (accumulated) {
    // The last micro-batch joins the others; the update reads the sum.
    CZ_RETURN_IF_ERROR(FoldIntoAccumulator(/*restore_weights=*/false));
  }
  result.micro_batches = accumulated ? micro_batches_ : 1;
  micro_batches_ = 0;
  ++iterations_;

  // One f64 all-reduce gives the norm and the overflow verdict (a non-finite
  // sum on any rank makes the total non-finite).
  CZ_ASSIGN_OR_RETURN(double total, LocalSumOfSquares(accumulated));
  comm::AllReduceOptions sum_options;
  sum_options.timeout = chunks_->options().comm_timeout;
  CZ_RETURN_IF_ERROR(
      comm::AllReduce(chunks_->process_group(),
                      comm::MutableBuffer{&total, 1, DType::kF64}, sum_options),
      "agreeing on the grad norm");
  const double divisor = result.loss_scale * result.micro_batches;
  result.grad_norm = std::sqrt(total) / divisor;
  ddp_->ClearGrads();
  if (!std::isfinite(total)) {
    result.skipped = true;
    const bool at_min_scale =
        scaler_.has_value() && scaler_->scale() <= scaler_->options().min_scale;
    if (scaler_.has_value()) scaler_->Update(/*found_inf=*/true);
    overflows_at_min_scale_ = at_min_scale ? overflows_at_min_scale_ + 1 : 0;
    CZ_RETURN_IF_ERROR(ddp_->RestoreParamsFromMasters(),
                       "restoring the weights of a skipped step");
    if (!scaler_.has_value() && !options_.skip_nonfinite_without_scaler) {
      return absl::FailedPreconditionError(absl::StrCat(
          "step ", iterations_, ": the grads are not finite (norm ",
          result.grad_norm, ") and ", DTypeName(ddp_->compute_dtype()),
          " compute has no loss scale to lower: the run has diverged or "
          "its weights or data are not finite (a lower learning rate may "
          "help); nothing was updated"));
    }
    if (options_.max_overflows_at_min_scale > 0 &&
        overflows_at_min_scale_ >= options_.max_overflows_at_min_scale) {
      return absl::FailedPreconditionError(absl::StrCat(
          "step ", iterations_, ": the grads overflowed in ",
          overflows_at_min_scale_,
          " steps in a row with the loss scale at "
          "its minimum of ",
          scaler_->options().min_scale,
          ": the run has diverged or its weights or data are not finite (a "
          "lower learning rate may help); nothing was updated"));
    }
    return result;
  }
  overflows_at_min_scale_ = 0;
  double clip = 1.0;
  if (options_.max_grad_norm > 0 && result.grad_norm > options_.max_grad_norm) {
    clip = options_.max_grad_norm / (result.grad_norm + 1e-6);
  }
  ++updates_;
  CZ_RETURN_IF_ERROR(
      Update(static_cast<float>(clip / divisor), result.lr, accumulated));
  if (scaler_.has_value()) scaler_->Update(/*found_inf=*/false);
  return result;
}

}  // namespace chunkzero
