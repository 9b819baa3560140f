#include "engine/engine_options.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace chunkzero {

absl::StatusOr<Placement> PlaceMemory(const EngineOptions& options) {
  const bool on_host = options.device == Device::Cpu();
  if (options.chunk_size.has_value() && *options.chunk_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("EngineOptions::chunk_size is ", *options.chunk_size,
                     ": a chunk holds at least one element (std::nullopt: "
                     "one chunk per tensor)"));
  }
  if (options.precision != DType::kF16 && options.precision != DType::kBF16 &&
      options.precision != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(
        "EngineOptions::precision is ", DTypeName(options.precision),
        ": parameters compute in f16, bf16 or f32"));
  }
  if (options.offload == OffloadPolicy::kNvme && options.nvme_path.empty()) {
    return absl::InvalidArgumentError(
        "EngineOptions::offload is kNvme but EngineOptions::nvme_path is "
        "empty: give a directory on a disk");
  }
  if (options.offload != OffloadPolicy::kNone &&
      options.offload != OffloadPolicy::kNvme && on_host) {
    return absl::InvalidArgumentError(
        "EngineOptions::offload moves memory off the compute device to the "
        "host, but EngineOptions::device is the host: compute on a GPU or "
        "the simulated device sim:0");
  }
  if (options.device_memory_limit < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("EngineOptions::device_memory_limit is ",
                     options.device_memory_limit, " bytes (0: no limit)"));
  }
  if (options.device_memory_limit > 0 && on_host) {
    return absl::InvalidArgumentError(
        "EngineOptions::device_memory_limit caps the compute device, but "
        "EngineOptions::device is the host: compute on a GPU or the "
        "simulated device sim:0");
  }
  if (options.host_memory_limit < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("EngineOptions::host_memory_limit is ",
                     options.host_memory_limit, " bytes (0: no limit)"));
  }
  if (options.host_memory_limit > 0 &&
      options.offload != OffloadPolicy::kNvme) {
    return absl::InvalidArgumentError(
        "EngineOptions::host_memory_limit needs EngineOptions::offload "
        "kNvme: what does not fit in host memory goes to the disk tier");
  }
  if (options.disk_lookahead < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "EngineOptions::disk_lookahead is ", options.disk_lookahead,
        " (0: read each chunk from disk when it is used)"));
  }
  if (options.max_prefetch < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("EngineOptions::max_prefetch is ", options.max_prefetch,
                     " (0: gather each chunk when its op needs it)"));
  }
  if (options.activation_checkpointing.every < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("EngineOptions::activation_checkpointing.every is ",
                     options.activation_checkpointing.every,
                     " (0: no block checkpointed; K: blocks 0, K, 2K, ...)"));
  }
  if (options.comm_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("EngineOptions::comm_timeout is ",
                     absl::FormatDuration(options.comm_timeout),
                     ": a collective needs time to complete"));
  }
  Placement where;
  where.chunks.chunk_size = options.chunk_size;
  where.chunks.layout = options.layout;
  where.chunks.device = options.device;
  where.chunks.comm_timeout = options.comm_timeout;
  // Parameter offload: the compute chunks rest in host memory and only the
  // chunks in use occupy the device (with kAuto, they rest on the device
  // while its limit leaves room, the one used farthest ahead going back).
  if (OffloadsParams(options.offload)) {
    where.chunks.rest_device = Device::Cpu();
    where.chunks.auto_residency = options.offload == OffloadPolicy::kAuto;
  }
  // ZeRO-Offload: masters and optimizer states in host memory.
  if (options.offload != OffloadPolicy::kNone) where.masters = Device::Cpu();
  if (options.device_memory_limit > 0) where.limited = options.device;
  if (options.host_memory_limit > 0) {
    where.host_limited = true;
    where.chunks.disk_residency = true;
    where.chunks.disk_lookahead = options.disk_lookahead;
    // Computing on a device, the parameter chunks get all three tiers:
    // they rest in host memory, on the device while its limit leaves room
    // (kAuto's rule), and on disk beyond the host's.
    if (!on_host) {
      where.chunks.rest_device = Device::Cpu();
      where.chunks.auto_residency = true;
    }
  }
  return where;
}

}  // namespace chunkzero
