// ChunkManager: the groups of chunks of one rank, and the operations that
// drive them (docs/DESIGN.md §3-4).
//
//   ChunkManagerOptions options;           // sharded, chunk_size = none
//   options.chunk_size = 1 << 22;
//   ChunkManager manager(&group, options, &tracker);
//   CZ_RETURN_IF_ERROR(manager.CreateGroup("f16_param", DType::kF16,
//                                          MemoryCategory::kParam));
//   CZ_ASSIGN_OR_RETURN(Tensor w, manager.AppendTensor("f16_param",
//                                                      "h.0.w", w16));
//   CZ_RETURN_IF_ERROR(manager.CloseGroup("f16_param"));
//   CZ_RETURN_IF_ERROR(manager.AccessTensor("f16_param", "h.0.w"));
//
// Groups. A group is an ordered list of chunks of one dtype and memory
// category. Tensors are appended in call order (the caller passes first-use
// order); with a fixed chunk size a tensor that does not fit opens a new
// chunk, with chunking off every tensor gets a chunk of its own size. A
// paired group (e.g. the fp32 masters of f16_param) mirrors its source:
// the same tensors at the same offsets in chunks of the same capacity and
// owner; tensors must be appended to it in the source's order.
//
// Owners (kOwner layout): round-robin over the ranks per group for a fixed
// chunk size; least-loaded by elements (lowest rank on a tie) with chunking
// off. Every rank computes the same assignment from the same calls.
//
// Memory: every chunk's storage goes through one CachingAllocator per
// device (so materialising a chunk again reuses its block) and reports to
// `tracker`, whose per-device, per-category figures are then exactly the
// payload this rank holds. When the chunks compute on a GPU, the host memory
// they rest in (offload) is pinned.
//
// Accessed chunks: the manager keeps the set of chunks currently
// materialised by Access; Access of a chunk in the set is skipped, and only
// then (DESIGN.md §3).
//
// Lifetime: views of chunks (parameters' data and grads) may outlive the
// manager; its destructor frees every payload, after which they read as not
// materialised. A manager destroyed with collectives of its chunks still in
// flight (a failure returned in the middle of a step, with prefetches
// issued) first aborts its group (ProcessGroup::Abort): a peer that comes
// to such a collective later must not write into freed memory. So
// destroying a manager after a failure ends the group for everyone who uses
// it; after a step that returned OK nothing is in flight and the group
// stays usable.
//
// Thread-safety: one manager per rank, used by that rank's thread. Every
// rank must make the same sequence of collective-issuing calls (Access*,
// Release*, Reduce*) on the same chunks.
#ifndef CHUNKZERO_CHUNK_CHUNK_MANAGER_H_
#define CHUNKZERO_CHUNK_CHUNK_MANAGER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "chunk/chunk.h"
#include "chunk/chunk_config.pb.h"
#include "chunk/chunk_disk_residency.h"
#include "chunk/chunk_layout.h"
#include "chunk/chunk_packing.h"
#include "chunk/chunk_residency.h"
#include "comm/in_flight_tracker.h"
#include "comm/process_group.h"
#include "tensor/copy_stream.h"
#include "tensor/memory/allocator.h"
#include "tensor/memory/caching_allocator.h"
#include "tensor/memory/memory_tracker.h"

namespace chunkzero {

struct ChunkManagerOptions {
  // Elements per chunk; std::nullopt turns chunking off (one chunk per
  // tensor, sized to it).
  std::optional<int64_t> chunk_size;
  ChunkLayout layout = ChunkLayout::kSharded;
  // Where new chunks are created (where they compute).
  Device device = Device::Cpu();
  // Where the chunks of groups created without a device of their own rest
  // between uses (ChunkOptions::rest_device); none: `device`. Device::Cpu()
  // with an accelerator `device` offloads the parameters: only chunks being
  // accessed occupy the device.
  std::optional<Device> rest_device;
  // With chunks resting on rest_device away from `device`: let those chunks
  // rest on `device` instead while its memory allows, sending back the one
  // used farthest ahead when room is needed (ChunkResidency, the `auto`
  // placement). Room is what the tracker's limit on `device` leaves; the
  // tracker's reclaimer for `device` is this manager's while it lives.
  bool auto_residency = false;
  // The disk tier under host memory (chunk/chunk_disk_tier.h; null: none),
  // and whether parameter chunks (MemoryCategory::kParam) resting in host
  // memory rest on it under the host's limit, their payloads in memory
  // while the tracker's limit on Device::Cpu() leaves room and read
  // `disk_lookahead` chunks ahead of use (ChunkDiskResidency). The
  // tracker's reclaimer for the host is this manager's while it lives.
  ChunkDiskTier* disk = nullptr;
  bool disk_residency = false;
  int disk_lookahead = 2;
  absl::Duration comm_timeout = comm::kDefaultCollectiveTimeout;
};

// Reads options from a ChunkManagerConfig message / its text format.
// InvalidArgument for a negative chunk size, a bad device or bad text.
[[nodiscard]] absl::StatusOr<ChunkManagerOptions> ChunkManagerOptionsFromProto(
    const ChunkManagerConfig& config);
[[nodiscard]] absl::StatusOr<ChunkManagerOptions> ParseChunkManagerOptions(
    absl::string_view text_proto);

// Where a tensor lives.
struct TensorLocation {
  Chunk* chunk = nullptr;
  int index = -1;  // Within chunk->tensor(i).
};

class ChunkManager {
 public:
  // `group` and `tracker` (may be null) must outlive the manager; chunk
  // memory comes from caching allocators over `allocators` (null: the
  // process-wide default registry).
  ChunkManager(comm::ProcessGroup* group, const ChunkManagerOptions& options,
               MemoryTracker* tracker = nullptr,
               AllocatorRegistry* allocators = nullptr);
  ~ChunkManager();
  ChunkManager(const ChunkManager&) = delete;
  ChunkManager& operator=(const ChunkManager&) = delete;

  const ChunkManagerOptions& options() const { return options_; }
  // The tracker the chunks count in (null: none).
  MemoryTracker* tracker() const { return tracker_; }
  comm::ProcessGroup& process_group() const { return *group_; }

  // AlreadyExists if the name is taken. The group's chunks are created on
  // `device` (default: options().device), e.g. the fp32 masters in host
  // memory while the fp16 chunks live on the accelerator (ZeRO-Offload).
  [[nodiscard]] absl::Status CreateGroup(
      absl::string_view name, DType dtype, MemoryCategory category,
      std::optional<Device> device = std::nullopt);
  // NotFound for an unknown source. A paired group may live on another
  // device than its source.
  [[nodiscard]] absl::Status CreatePairedGroup(
      absl::string_view name, absl::string_view source, DType dtype,
      MemoryCategory category, std::optional<Device> device = std::nullopt);

  // From now on each chunk of `group` goes to `disk` for good
  // (Chunk::SpillRest) as soon as it is complete: when the next one opens,
  // before that one is allocated, and at CloseGroup; chunks complete
  // already go now. So a group filled in order never holds more than one
  // chunk in memory (ZeroDdp's masters under the NVMe tier). NotFound for
  // an unknown group, InvalidArgument for no disk; SpillRest's errors.
  [[nodiscard]] absl::Status SpillWhenComplete(absl::string_view group,
                                               ChunkDiskTier* disk);

  // Copies `values` into the group's chunks and returns the view that is
  // the tensor's data from now on. Errors: NotFound (group), AlreadyExists
  // (tensor name in the group), InvalidArgument (dtype; a tensor larger
  // than the chunk size, with a hint; a paired tensor out of the source's
  // order or of another shape), FailedPrecondition (group closed).
  [[nodiscard]] absl::StatusOr<Tensor> AppendTensor(absl::string_view group,
                                                    absl::string_view name,
                                                    const Tensor& values);

  // Frees every chunk of the group and forgets it (views of its tensors
  // then read as not materialised). FailedPrecondition while another group
  // is paired to it; NotFound for an unknown name.
  [[nodiscard]] absl::Status RemoveGroup(absl::string_view group);

  // Gives the group, its chunks and the pairing of groups paired to it the
  // name `to`. NotFound for an unknown group, AlreadyExists if `to` is
  // taken; nothing changes then.
  [[nodiscard]] absl::Status RenameGroup(absl::string_view from,
                                         absl::string_view to);

  // Closes every chunk of the group: no more appends; non-holders drop
  // their payload.
  [[nodiscard]] absl::Status CloseGroup(absl::string_view group);

  [[nodiscard]] absl::StatusOr<TensorLocation> Locate(
      absl::string_view group, absl::string_view name) const;
  int num_chunks(absl::string_view group) const;
  // REQUIRES: 0 <= i < num_chunks(group).
  Chunk* chunk(absl::string_view group, int i) const;
  // Every chunk of every group, groups in creation order.
  std::vector<Chunk*> AllChunks() const;

  // Materialises the chunk unless it is in the accessed set.
  [[nodiscard]] absl::Status AccessChunk(Chunk* chunk);
  // Starts materialising (prefetch); the chunk joins the accessed set at
  // once; its data is valid once the Work completes.
  [[nodiscard]] absl::StatusOr<std::unique_ptr<comm::Work>> StartAccessChunk(
      Chunk* chunk);
  [[nodiscard]] absl::Status AccessTensor(absl::string_view group,
                                          absl::string_view name);
  // Releases the chunk and takes it out of the accessed set.
  [[nodiscard]] absl::Status ReleaseChunk(Chunk* chunk);
  // Lazy release: releases every accessed chunk that can be released
  // (CanRelease) and is not in `keep` (e.g. the chunks the next op needs),
  // in access order. Returns how many were released.
  [[nodiscard]] absl::StatusOr<int> ReleaseAccessedExcept(
      absl::Span<Chunk* const> keep);
  // Frees the chunk's payload for good, whatever its tensors' states, and
  // takes it out of the accessed set: for a group being replaced, whose
  // views are about to point elsewhere. Issues no collective.
  void DropChunkPayload(Chunk* chunk);
  // Reduces the chunk (then it is released) and takes it out of the set.
  [[nodiscard]] absl::Status ReduceChunk(
      Chunk* chunk, comm::ReduceOp op = comm::ReduceOp::kSum);
  [[nodiscard]] absl::Status MoveChunk(Chunk* chunk, Device device);
  [[nodiscard]] absl::Status SetTensorState(absl::string_view group,
                                            absl::string_view name,
                                            TensorState to);
  // Writes `values` into the tensor's slice (see Chunk).
  [[nodiscard]] absl::Status CopyTensorToChunkSlice(absl::string_view group,
                                                    absl::string_view name,
                                                    const Tensor& values);

  // The order in which one step uses the chunks, a chunk once per use
  // (forward, then backward), for the auto residency; ignored without it.
  void SetUseSchedule(std::vector<Chunk*> uses);
  // Where the residencies' use clocks stand, and putting them back: for a
  // pass that is not a step's (a forward-only evaluation between steps),
  // so that the step after it places chunks as if it had not run.
  struct UseClocks {
    ScheduledChunks::Clock device, disk;
  };
  UseClocks SaveUseClocks() const;
  void RestoreUseClocks(const UseClocks& clocks);
  // The auto residency, or null.
  const ChunkResidency* residency() const { return residency_.get(); }
  // The host/disk residency, or null.
  const ChunkDiskResidency* disk_residency() const {
    return disk_residency_.get();
  }

  // The chunks materialised by Access, in access order.
  const std::vector<Chunk*>& accessed_chunks() const { return accessed_; }

  // Payload bytes this rank holds on `device`, summed over chunks.
  int64_t PayloadBytes(Device device) const;
  // Chunk::rest_to_device_bytes and device_to_rest_bytes summed over the
  // chunks: what this rank's chunks have copied so far between where they
  // rest and where they compute.
  struct Transfers {
    int64_t rest_to_device = 0;
    int64_t device_to_rest = 0;
  };
  Transfers TransferredBytes() const;

 private:
  struct Group {
    std::string name;
    DType dtype;
    MemoryCategory category;
    Device device = Device::Cpu();       // Where new chunks are created.
    Device rest_device = Device::Cpu();  // Where they rest between uses.
    std::string source;                  // Non-empty for a paired group.
    bool closed = false;
    std::vector<std::unique_ptr<Chunk>> chunks;
    absl::flat_hash_map<std::string, TensorLocation> tensors;
    std::vector<std::string> order;          // Tensor names in append order.
    std::vector<int64_t> elements_per_rank;  // For least-loaded owners.
    // Where the next tensor goes (unpaired groups; chunk_packing.h).
    std::optional<ChunkPacker> packer;
    ChunkDiskTier* spill_to = nullptr;  // SpillWhenComplete.
  };

  [[nodiscard]] absl::StatusOr<Group*> FindGroup(absl::string_view name) const;
  StorageOptions StorageFor(const Group& group);
  [[nodiscard]] absl::StatusOr<Chunk*> NewChunk(Group& group, int64_t capacity,
                                                int owner);
  [[nodiscard]] absl::StatusOr<Tensor> AppendPaired(Group& group,
                                                    absl::string_view name,
                                                    const Tensor& values);
  // Records a tensor appended to `chunk` and returns its view.
  Tensor Record(Group& group, absl::string_view name, Chunk* chunk,
                Tensor view);
  int NextOwner(const Group& group) const;
  // Registers a CachingAllocator for `device` in allocators_ if missing:
  // over the base allocators, except host memory for chunks that compute on
  // a GPU, which is pinned (so that copies to and from the GPU are
  // asynchronous and run at bus speed).
  [[nodiscard]] absl::Status EnsureCache(Device device);
  void Forget(Chunk* chunk);
  // Hands a complete chunk of `group` to the disk residency if it takes
  // the group's chunks.
  [[nodiscard]] absl::Status ManageOnDisk(const Group& group, Chunk* chunk);

  // Every collective of the chunks goes through tracked_ (group_ points to
  // it), so that the destructor can stop those still running before it
  // frees their buffers. Declared first: destroyed last.
  comm::InFlightTracker tracked_;
  comm::ProcessGroup* const group_;
  const ChunkManagerOptions options_;
  MemoryTracker* const tracker_;
  AllocatorRegistry* const base_allocators_;
  // Caching allocators per device, registered in allocators_.
  std::map<Device, std::unique_ptr<CachingAllocator>> caches_;
  PinnedHostAllocator pinned_;
  AllocatorRegistry allocators_;
  std::vector<std::unique_ptr<Group>> groups_;
  std::vector<Chunk*> accessed_;
  std::unique_ptr<ChunkResidency> residency_;
  std::unique_ptr<ChunkDiskResidency> disk_residency_;
  // Copies of holders' buffers between rest and compute devices, ahead of
  // compute (groups that rest away from where they compute).
  std::unique_ptr<CopyStream> copy_stream_;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_CHUNK_CHUNK_MANAGER_H_
