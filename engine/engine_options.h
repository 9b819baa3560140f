// EngineOptions: what an Engine (engine/engine.h) is told, and Placement,
// where the options put each kind of memory.
//
//   EngineOptions options;
//   options.chunk_size = 1 << 20;               // elements per chunk
//   options.precision = DType::kBF16;
//   options.device = Device::Simulated(0);      // or Device::Cuda(i)
//   options.offload = OffloadPolicy::kOptimizer;
//   CZ_ASSIGN_OR_RETURN(Placement where, PlaceMemory(options));
//
// One offload policy decides five settings spread over chunk/, ddp/ and
// optim/; PlaceMemory is the one place that turns it into them, so that
// every user of the engine places memory alike.
#ifndef CHUNKZERO_ENGINE_ENGINE_OPTIONS_H_
#define CHUNKZERO_ENGINE_ENGINE_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "chunk/chunk_layout.h"
#include "chunk/chunk_manager.h"
#include "comm/options.h"
#include "engine/activation_checkpointing.h"
#include "io/nvme/io_engine.h"
#include "optim/zero_optimizer.h"
#include "tensor/device.h"
#include "tensor/dtype.h"

namespace chunkzero {

struct EngineOptions {
  // Elements per chunk; std::nullopt: one chunk per tensor
  // (chunk/chunk_size_search.h picks a size with little padding).
  std::optional<int64_t> chunk_size;
  ChunkLayout layout = ChunkLayout::kSharded;
  // The dtype the parameters compute in (the chunks'): kF16 (with a dynamic
  // loss scale), kBF16 or kF32. Masters are always f32.
  DType precision = DType::kF16;
  // Where the model computes and the compute chunks live: the host
  // (Device::Cpu()), a GPU, or the host-backed simulated device sim:0,
  // which behaves as an accelerator (for offload and caps without a GPU).
  Device device = Device::Cpu();
  // Where the masters, optimizer states and resting parameter chunks live
  // (optim/zero_optimizer.h). Anything but kNone and kNvme needs a
  // `device` other than the host.
  OffloadPolicy offload = OffloadPolicy::kNone;
  // OffloadPolicy::kNvme: the directory (on a disk) each rank's scratch
  // file goes in (chunk/chunk_disk_tier.h), and how it is read and
  // written.
  std::string nvme_path;
  IoEngineKind nvme_io = IoEngineKind::kAuto;
  // Bytes `device` may hold (0: no limit): the chunks, the masters unless
  // offloaded, and whatever the model counts in the engine's tracker. A
  // request past it is ResourceExhausted naming what asked. Needs a
  // `device` other than the host.
  int64_t device_memory_limit = 0;
  // Bytes of host memory each rank may hold (0: no limit), with kNvme: the
  // 16-bit parameter chunks that rest in host memory rest on the disk tier
  // too, their payloads in memory while this limit leaves room, the one
  // used farthest ahead going to disk when room is needed, and the next
  // ones read ahead of use (chunk/chunk_disk_residency.h). Everything the
  // engine's tracker counts on the host counts against it: the chunks, the
  // model's buffers when it reports them there, the disk tier's buffers. A
  // request that cannot be met even with every parameter payload on disk
  // is ResourceExhausted naming what asked. With a `device` other than the
  // host the parameter chunks get all three tiers: they rest in host memory
  // (on disk beyond this limit) and on the device while
  // device_memory_limit leaves room, as kAuto places them, the one used
  // farthest ahead going down a tier when room is needed.
  int64_t host_memory_limit = 0;
  // Parameter chunks read from disk ahead of use, with host_memory_limit.
  int disk_lookahead = 2;
  // ZeroDdpOptions (ddp/zero_ddp.h): chunks gathered ahead, the order of
  // first use when the model knows it (empty: recorded in step 1), and
  // whether grads missing on some ranks count as zeros.
  int max_prefetch = 1;
  std::vector<std::string> first_use_order;
  bool find_unused_parameters = false;
  // Which of the model's blocks recompute their activations in backward
  // (engine/activation_checkpointing.h); anything but none needs a model
  // that implements ActivationCheckpointable.
  ActivationCheckpointing activation_checkpointing;
  // The optimizer; its `offload` field is ignored (`offload` above rules).
  ZeroOptimizerOptions optimizer;
  // How long a collective may wait for the other ranks.
  absl::Duration comm_timeout = comm::kDefaultCollectiveTimeout;
};

// Where an Engine's options put each kind of memory.
struct Placement {
  // Device, resting device and automatic residency of the compute chunks.
  ChunkManagerOptions chunks;
  // Where the f32 masters (and optimizer states) live; std::nullopt: with
  // the compute chunks.
  std::optional<Device> masters;
  // The device the memory limit applies to (std::nullopt: no limit).
  std::optional<Device> limited;
  // Whether host memory is limited (EngineOptions::host_memory_limit).
  bool host_limited = false;
};

// InvalidArgument naming the option for a combination that cannot be
// placed: an offload policy other than kNvme or a device memory limit
// with `device` the host, kNvme without an nvme_path, a host memory limit
// without kNvme, a negative limit, lookahead or chunk
// size, a compute dtype other than f16, bf16 or f32, a negative max_prefetch or
// checkpointing interval, a timeout that is not positive.
[[nodiscard]] absl::StatusOr<Placement> PlaceMemory(
    const EngineOptions& options);

}  // namespace chunkzero

#endif  // CHUNKZERO_ENGINE_ENGINE_OPTIONS_H_
