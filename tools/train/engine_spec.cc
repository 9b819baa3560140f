#include "tools/train/engine_spec.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_replace.h"
#include "base/status_macros.h"

namespace chunkzero {

EngineOptions EngineOptionsFromFlags(const TrainOptions& o) {
  EngineOptions e;
  e.layout = o.storage;
  e.precision = o.precision;
  e.offload = o.offload;
  e.nvme_path = o.nvme_path;
  e.nvme_io = o.nvme_io;
  if (o.nvme_piece_elements > 0) {
    e.optimizer.disk_piece_elements = o.nvme_piece_elements;
  }
  e.device_memory_limit = o.device_memory_limit;
  e.host_memory_limit = o.host_memory_limit;
  e.max_prefetch = o.max_prefetch;
  e.activation_checkpointing = o.activation_checkpointing;
  e.comm_timeout = absl::Seconds(o.comm_timeout_s);
  e.optimizer.kind = o.optimizer;
  if (o.weight_decay >= 0) e.optimizer.weight_decay = o.weight_decay;
  e.optimizer.max_grad_norm = o.clip;
  return e;
}

absl::StatusOr<EngineOptions> EngineOptionsForRun(const TrainPlan& plan,
                                                  Device rank_device) {
  const TrainOptions& o = plan.options;
  EngineOptions e = EngineOptionsFromFlags(o);
  const bool gpu = o.device == ComputeDevice::kCuda;
  const bool capped = o.device_memory_limit > 0;
  // On the host, offload and caps need the simulated device to move memory
  // off; the NVMe tier moves it to disk from the host itself.
  const bool moves_off_device =
      o.offload != OffloadPolicy::kNone && o.offload != OffloadPolicy::kNvme;
  e.device = gpu || moves_off_device || capped ? rank_device : Device::Cpu();
  if (o.offload == OffloadPolicy::kAuto && plan.auto_rests_on_host) {
    e.offload = OffloadPolicy::kParams;
  }
  e.chunk_size = plan.chunk_size;
  if (o.param_order == ParamOrder::kLayers) e.first_use_order = plan.order;
  CZ_ASSIGN_OR_RETURN(
      e.optimizer.lr,
      LrSchedule::WarmupCosine(o.lr, o.min_lr, o.warmup, std::max(o.steps, 1)));
  return e;
}

absl::Status EngineErrorInFlags(const absl::Status& status) {
  if (status.ok()) return status;
  // Longest first: "device_memory_limit" before "device".
  static const std::pair<const char*, const char*> kFlags[] = {
      {"EngineOptions::activation_checkpointing.every",
       "--activation_checkpointing"},
      {"EngineOptions::activation_checkpointing", "--activation_checkpointing"},
      {"EngineOptions::device_memory_limit", "--device_memory_limit"},
      {"EngineOptions::host_memory_limit", "--host_memory_limit"},
      {"EngineOptions::max_prefetch", "--max_prefetch"},
      {"EngineOptions::comm_timeout", "--comm_timeout_s"},
      {"EngineOptions::chunk_size", "--chunk_size"},
      {"EngineOptions::nvme_path", "--nvme_path"},
      {"EngineOptions::nvme_io", "--nvme_io"},
      {"EngineOptions::precision", "--precision"},
      {"EngineOptions::offload", "--offload"},
      {"EngineOptions::device", "--device"},
  };
  std::string message(status.message());
  for (const auto& [field, flag] : kFlags) {
    message = absl::StrReplaceAll(message, {{field, flag}});
  }
  return absl::Status(status.code(), message);
}

}  // namespace chunkzero
