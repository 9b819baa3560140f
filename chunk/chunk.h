// Chunk: one flat buffer of one dtype holding several tensors back to back,
// spread over the ranks by a ChunkLayout (docs/DESIGN.md §1-4).
//
//   CZ_ASSIGN_OR_RETURN(std::unique_ptr<Chunk> c, Chunk::Create(opts, &group));
//   CZ_ASSIGN_OR_RETURN(Tensor w, c->Append("h.0.attn.c_attn.weight", values));
//   CZ_RETURN_IF_ERROR(c->Close());   // non-holders drop their payload
//   CZ_RETURN_IF_ERROR(c->Access());  // materialise: broadcast / all-gather
//   ... use w (a view of the chunk's memory) ...
//   CZ_RETURN_IF_ERROR(c->Release());
//
// Memory. A chunk has up to two storages on its device:
//  - the full buffer, capacity() elements, of which every appended tensor is
//    a view. Replicated: always held. Owner: held by the owner; other ranks
//    hold it only while accessed. Sharded: held only while accessed.
//  - the shard (sharded layout only): elements [rank * shard_size(),
//    (rank + 1) * shard_size()) of the full buffer, always held after Close.
//    Writes made to this rank's part of the full buffer while accessed are
//    copied back into the shard on Release if the chunk was marked modified
//    (CopyTensorToChunkSlice does it; code writing through a view calls
//    MarkModified()). An unmodified chunk skips the copy: release is free.
// A chunk being built holds only what this rank keeps at rest: Append
// writes a tensor's values into a holder's full buffer, into this rank's
// part of the shard (sharded), or nowhere (a non-owner), so packing a model
// never needs a full chunk on a rank that does not keep one.
// Both go through StorageOptions (category, tracker, allocators), so payload
// accounting is exact, and a CachingAllocator there makes repeated
// access/release reuse the same blocks. For the sharded layout capacity() is
// the requested capacity rounded up to a multiple of the world size; the
// padding is zero.
//
// Tensor states follow tensor_state.h; an illegal move is an error naming
// the tensor, this chunk and both states, and changes nothing.
//
// Collectives: every rank must call Access, Release, Reduce in the same
// order on the same chunks (ChunkManager guarantees it); Access and Reduce
// issue at most one collective each, on `group`.
//
// Thread-safety: a Chunk is used by one thread (its rank's) at a time. The
// ProcessGroup, allocators and tracker must outlive it.
#ifndef CHUNKZERO_CHUNK_CHUNK_H_
#define CHUNKZERO_CHUNK_CHUNK_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/mutex.h"
#include "chunk/chunk_disk_tier.h"
#include "chunk/chunk_layout.h"
#include "chunk/tensor_state.h"
#include "comm/options.h"
#include "comm/process_group.h"
#include "comm/types.h"
#include "comm/work.h"
#include "tensor/copy_stream.h"
#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/storage.h"
#include "tensor/tensor.h"

namespace chunkzero {

struct ChunkOptions {
  std::string group = "chunk";  // Group name, for messages ("f16_param").
  int index = 0;                // Position in the group.
  DType dtype = DType::kF16;
  int64_t capacity = 0;  // Elements; rounded up for kSharded.
  ChunkLayout layout = ChunkLayout::kSharded;
  int owner = 0;  // The holder rank for kOwner.
  // Where the chunk computes: its full buffer while accessed.
  Device device = Device::Cpu();
  // Where the payload rests between uses (the shard, or a holder's full
  // buffer); none: `device`. Parameters offloaded to the host
  // (--offload=params) rest on Device::Cpu() and are brought to `device`
  // by each Access: a sharded rank copies its shard into its part of the
  // device buffer and gathers in place there (Reduce reduce-scatters in
  // place and copies the part back), so every collective's buffers are on
  // `device`, as NCCL needs; a holder's buffer moves there and back
  // (replicated, owner).
  std::optional<Device> rest_device;
  StorageOptions storage;  // Category, tracker and allocators.
  // Where a holder's buffer is copied between rest_device and device on
  // each use (null: on the calling thread). With a stream, an access (a
  // prefetch) returns at once and its Work completes once the copy has.
  // Host-backed devices only: on a GPU the copy runs on the calling thread
  // (a copy thread is ordered against neither its compute stream nor its
  // current device), and the owner broadcasts from the device.
  CopyStream* copy_stream = nullptr;
  absl::Duration comm_timeout = comm::kDefaultCollectiveTimeout;
};

// One tensor's place in a chunk.
struct ChunkTensor {
  std::string name;
  int64_t offset = 0;  // First element within the full buffer.
  Shape shape;
  int64_t numel = 0;
  TensorState state = TensorState::kHold;
};

// True for the status Append returns when the tensor does not fit in the
// room left (the manager then opens a new chunk).
bool IsChunkFull(const absl::Status& status);

class Chunk {
 public:
  // InvalidArgument for a capacity below 1 or an owner outside the group.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Chunk>> Create(
      const ChunkOptions& options, comm::ProcessGroup* group);

  Chunk(const Chunk&) = delete;
  Chunk& operator=(const Chunk&) = delete;
  // Waits for a copy still running on the copy stream.
  ~Chunk();

  // "f16_param#3".
  const std::string& name() const { return name_; }
  // Takes the name of the group it now belongs to ("f16_param#3" for
  // "f16_param"). The name tags the chunk's collectives, so every rank must
  // rename alike, between collectives.
  void RenameGroup(absl::string_view group);
  DType dtype() const { return options_.dtype; }
  ChunkLayout layout() const { return options_.layout; }
  int owner() const { return options_.owner; }
  // Where the chunk computes, and where its payload rests between uses
  // (ChunkOptions::rest_device).
  Device device() const { return device_; }
  Device rest_device() const { return rest_device_; }
  int64_t capacity() const { return capacity_; }
  // Where this rank stands in the chunk's layout, for the rules of
  // chunk/chunk_layout.h (IsHolder, RankPart, UpdateRange, ...).
  ChunkSharding sharding() const;
  // Elements per rank for kSharded; capacity() otherwise.
  int64_t shard_size() const { return shard_size_; }
  // This rank's shard as [begin, end) of the full buffer (whole buffer for
  // the other layouts).
  int64_t shard_begin() const;
  int64_t shard_end() const { return shard_begin() + shard_size_; }
  int64_t used_elements() const { return used_; }
  // used / capacity.
  double utilisation() const;
  bool closed() const { return closed_; }

  // True when this rank holds the chunk's full payload at rest (replicated
  // everywhere, owner on the owner); sharded chunks have no such holder.
  bool is_holder() const;
  // True while the full buffer is present on this rank.
  bool is_materialised() const { return full_->allocated(); }
  // True between Access and Release/Reduce. The owner's tensors are HOLD
  // before access too, so only this flag says whether the broadcast to the
  // other ranks has happened.
  bool is_accessed() const { return accessed_; }
  // Payload bytes this rank holds now (full buffer and shard), in all or
  // on one device.
  int64_t payload_bytes() const;
  int64_t payload_bytes(Device device) const;
  // Bytes this rank's payload has moved so far from where it rests to where
  // it computes (its own shard before each all-gather, a holder's whole
  // buffer) and back (a modified or reduced shard, a holder's buffer); 0
  // while the two devices are one.
  int64_t rest_to_device_bytes() const { return rest_to_device_bytes_; }
  int64_t device_to_rest_bytes() const { return device_to_rest_bytes_; }

  int num_tensors() const { return static_cast<int>(tensors_.size()); }
  const ChunkTensor& tensor(int i) const { return tensors_[i]; }
  // Index of the tensor called `name`, or -1.
  int FindTensor(absl::string_view name) const;

  // Copies `values` into the next slice (the part this rank keeps: see
  // Memory); from then on the returned view is the tensor's data, readable
  // at once on a holder and while accessed elsewhere (its tensor is FREE
  // until then). Errors: IsChunkFull when it does not fit in the room
  // left; InvalidArgument for a dtype other than dtype(), or more elements
  // than capacity(); FailedPrecondition after Close.
  [[nodiscard]] absl::StatusOr<Tensor> Append(absl::string_view name,
                                              const Tensor& values);

  // No more appends; the chunk can be accessed. A full buffer materialised
  // on a non-holder since creation is dropped (sharded: after copying this
  // rank's part into the shard). Tensors without payload are FREE.
  [[nodiscard]] absl::Status Close();

  // Materialises the chunk on this rank: allocates the full buffer and
  // starts the broadcast from the owner or the all-gather of the shards.
  // Tensors FREE become HOLD at once; their data is valid once the returned
  // Work completes. An already accessed chunk (and any replicated chunk)
  // returns a completed Work and issues nothing. FailedPrecondition before
  // Close.
  [[nodiscard]] absl::StatusOr<std::unique_ptr<comm::Work>> StartAccess();
  // StartAccess, then WaitBeforeCompute.
  [[nodiscard]] absl::Status Access();

  // Orders this rank's use of the chunk after `work`, one of its
  // collectives (StartAccess's). A chunk that computes and rests on one
  // device other than the CPU (a GPU, or the simulated device standing in
  // for one) asks for Work::WaitOnStream(kComputeStream): on NCCL the
  // compute stream (the legacy default stream, where chunkzero's kernels,
  // copies and frees run) waits for the collective's event and the host
  // runs on; host backends wait on the host. Anywhere else the host waits,
  // because it reads the result itself (a shard resting on the host, a
  // holder's buffer going back to it). A stream wait returns the
  // collective's error only when it is already known; a later one fails
  // the backend's next collective (NCCL aborts the group).
  [[nodiscard]] absl::Status WaitBeforeCompute(comm::Work& work) const;
  // True when WaitBeforeCompute leaves the waiting to the GPU.
  bool ComputeWaitsOnStream() const;

  // Allocates the full buffer filled with zeros, without any collective:
  // for a rank that must join the reduction of grads it never computed
  // (a parameter unused on this rank). No-op when materialised;
  // FailedPrecondition before Close.
  [[nodiscard]] absl::Status MaterialiseZeros();

  // Drops the full buffer where this rank is not a holder (sharded: after
  // copying this rank's part back into the shard); those tensors become
  // FREE. Requires CanRelease(): FailedPrecondition naming the first tensor
  // that is not HOLD otherwise.
  [[nodiscard]] absl::Status Release();

  // Reduces the grads held in the chunk across ranks: all-reduce
  // (replicated), reduce to the owner (owner), reduce-scatter into the
  // shard (sharded), waited for as WaitBeforeCompute does; then releases.
  // Tensors become HOLD where the payload stays, FREE elsewhere. Requires
  // CanReduce() and a materialised chunk.
  [[nodiscard]] absl::Status Reduce(comm::ReduceOp op = comm::ReduceOp::kSum);

  // Moves the payload to `device`, which becomes where the chunk computes
  // and rests; every view follows. Requires CanMove().
  [[nodiscard]] absl::Status MoveTo(Device device);

  // Changes where the payload rests between uses (the shard, or a holder's
  // full buffer), moving it now; where the chunk computes stays. A chunk
  // attached to disk (AttachToDisk) brings its payload from there first
  // and stays attached: while it rests off the host the disk tier leaves
  // it alone (CanEvictPayload is false), and once back it may go to disk
  // again. FailedPrecondition for a chunk spilled to disk (SpillRest) or
  // a pinned payload. The copy
  // counts in rest_to_device_bytes() when it brings the payload to
  // device() and in device_to_rest_bytes() when it takes it away, like the
  // copies of each use it saves or causes. Views and grads follow.
  // FailedPrecondition while accessed (a gather may be reading the shard).
  [[nodiscard]] absl::Status MoveRestTo(Device rest);

  // While accessed, before Release: from now on the chunk rests on
  // device(), its payload taken from the full buffer already there rather
  // than copied from the host: a holder's buffer simply stays; a sharded
  // rank's shard is refilled from its part of the full buffer. No
  // host-device copy. REQUIRES the access's collective to have been waited
  // for (WaitBeforeCompute), as Release does. FailedPrecondition when not
  // accessed.
  [[nodiscard]] absl::Status RestWhereItComputes();

  // Moves tensor `i` to state `to` (tensor_state.h).
  [[nodiscard]] absl::Status SetTensorState(int i, TensorState to);

  // Writes `values` (same dtype and element count) into tensor i's slice:
  // the full buffer when materialised, else this rank's shard part of it
  // (sharded), else nothing (a non-owner holds no copy).
  [[nodiscard]] absl::Status CopyTensorToChunkSlice(int i,
                                                    const Tensor& values);

  // Writes `values` (f32, same element count) times `scale` into tensor i's
  // slice as CopyTensorToChunkSlice does, multiplied in f32 and rounded once
  // to the chunk's dtype (tensor/cpu/cast_kernels.h CastScaled), with no
  // intermediate tensor: a rank's share of an averaged gradient. On a GPU
  // the kernel runs there (tensor/cuda/cuda_elementwise.h) when `values` is on
  // the same GPU; between the host and a GPU the product is formed on the
  // host and copied.
  [[nodiscard]] absl::Status WriteTensorScaled(int i, const Tensor& values,
                                               float scale);

  // Declares that tensor data was written through a view while the chunk
  // is materialised, so that Release keeps this rank's part (sharded).
  void MarkModified() { modified_ = true; }
  bool is_modified() const { return modified_; }

  // ---- The disk tier (chunk/chunk_disk_tier.h: the NVMe tier).
  // Writes the payload this rank keeps at rest (a holder's full buffer, the
  // shard) into its region of `disk` (reserved at the first spill, kept
  // after) and frees it: from now on the chunk rests on disk. Its views
  // read as not materialised while it is there; Access brings the payload
  // back first and Release writes it out again. A rank that keeps nothing
  // at rest (an owner-layout non-owner) writes nothing. FailedPrecondition
  // while accessed, when the payload rests on a GPU, or when the chunk
  // rests on another tier's disk.
  [[nodiscard]] absl::Status SpillRest(ChunkDiskTier* disk);
  // Reads the payload back into memory where it rested before, for good:
  // the chunk no longer rests on disk. OK if it does not.
  [[nodiscard]] absl::Status UnspillRest();
  // For a chunk resting on disk whose payload is in memory (an access
  // that failed half way, or one kept between uses): writes it out, unless
  // the disk holds it already, and frees it. OK otherwise.
  [[nodiscard]] absl::Status SettleOnDisk() { return ReturnToDisk(); }

  // The host tier's way (chunk/chunk_disk_residency.h): from now on the
  // chunk rests on `disk` but its payload stays in memory, between uses
  // too, until EvictPayload sends it there; LoadPayload (or an access)
  // brings it back. Nothing is written now. Errors as SpillRest's.
  [[nodiscard]] absl::Status AttachToDisk(ChunkDiskTier* disk);
  // Whether the payload stays in memory after a use (AttachToDisk) rather
  // than going back to disk (SpillRest).
  bool keeps_payload_between_uses() const { return keep_payload_; }
  // Brings the payload from disk into memory, finishing the read
  // StartLoadPayload began if there is one. OK when it is in memory.
  [[nodiscard]] absl::Status LoadPayload() { return BringFromDisk(); }
  // Starts reading the payload into an aligned buffer of its own (counted
  // in the payload's tracker, like the payload), for LoadPayload or an
  // access to finish; until then the chunk is loading. OK and nothing
  // started when the payload is not on disk or a read is under way.
  // ResourceExhausted when the buffer does not fit.
  [[nodiscard]] absl::Status StartLoadPayload();
  bool payload_loading() const { return pending_read_ != nullptr; }
  // Writes the payload out, unless the disk holds it already (nothing has
  // been written to it since it was last read or written), and frees it.
  // FailedPrecondition unless CanEvictPayload(); OK when not in memory.
  [[nodiscard]] absl::Status EvictPayload();
  // Whether the payload may go to disk now: it rests in host memory and
  // nothing is using it (not accessed or pinned, no tensor computing or
  // waiting to be reduced, no full buffer: a reduction gathers into it and
  // scatters into the payload).
  bool CanEvictPayload() const;
  // While pinned (a count), the payload stays in memory: EvictPayload is
  // FailedPrecondition. For code holding a pointer into it outside an
  // access (the optimizer's update).
  void PinPayload() { ++pins_; }
  void UnpinPayload() { --pins_; }
  bool payload_pinned() const { return pins_ > 0; }
  // Whether the disk holds the payload as it is in memory: no write is
  // needed to evict it. Any write through the chunk's API or a view of it
  // (ShardView, ShardStorageView, FullView) clears it.
  bool disk_copy_current() const { return disk_copy_current_; }
  // Whether the chunk rests on disk, and whether its payload is there now
  // (not while accessed).
  bool rests_on_disk() const { return disk_ != nullptr; }
  bool payload_on_disk() const { return payload_on_disk_; }
  ChunkDiskTier* disk_tier() const { return disk_; }
  // The region of the payload on disk (valid once spilled), and the
  // payload's bytes (a holder's capacity() or shard_size() elements).
  const DiskRegion& disk_region() const { return disk_region_; }
  int64_t rest_payload_bytes() const;
  // Copies the payload at rest (rest_payload_bytes(), from disk or from
  // memory) into host memory `dst`. FailedPrecondition for a payload that
  // is in neither (an access's released shard is always somewhere).
  [[nodiscard]] absl::Status ReadRestPayload(void* dst) const;

  // Frees the full buffer and the shard now, whatever the states. For
  // owners going away: views of the chunk may outlive it (a model keeps its
  // parameters), but its memory must go back to the allocators while they
  // still exist. The views then read as not materialised.
  void DropPayload();

  // DESIGN.md §2 predicates.
  bool CanRelease() const;  // Every tensor HOLD.
  bool CanReduce() const;   // Every tensor READY_FOR_REDUCE.
  bool CanMove() const;     // No tensor COMPUTE or READY_FOR_REDUCE.

  // Whether this rank's payload (full buffer when materialised, else shard)
  // holds an Inf or NaN in its used elements; checked where it is (the GPU
  // kernel for a chunk on a GPU).
  [[nodiscard]] absl::StatusOr<bool> HasInfOrNan() const;

  // The elements of tensor i inside this rank's shard, as [first, last) of
  // the full buffer (first == last when none). For the other layouts: the
  // whole tensor.
  std::pair<int64_t, int64_t> ShardRange(int i) const;

  // Tensor i as a view of the full buffer (valid while materialised).
  Tensor TensorView(int i) const;
  // The part of tensor i inside this rank's shard, flat, as a view of the
  // shard (sharded), of the full buffer (holders), or empty (non-holders).
  Tensor ShardView(int i) const;
  // The whole full buffer and the shard as flat views.
  Tensor FullView() const;
  Tensor ShardStorageView() const;

 private:
  Chunk(const ChunkOptions& options, comm::ProcessGroup* group,
        int64_t capacity, int64_t shard_size);

  // What an operation needs of every tensor's state.
  enum class Requirement { kAllHold, kAllReadyForReduce, kNoneBusy };
  // OK if every tensor meets `requirement`; else FailedPrecondition naming
  // the operation, this chunk and the first tensor that does not.
  [[nodiscard]] absl::Status StateError(absl::string_view operation,
                                        Requirement requirement) const;
  // Sets every tensor to `state` (used where the move is known legal).
  void SetAllStates(TensorState state);
  // At creation: zeros in what this rank keeps at rest (a holder's full
  // buffer, the shard), which is where Append writes.
  [[nodiscard]] absl::Status AllocateForAppends();
  // Waits for the copy an access left on the copy stream, if any: done
  // before anything frees or moves the buffers it writes.
  [[nodiscard]] absl::Status FinishPendingCopy();
  // A holder's buffer on its way to the device on the copy stream, and the
  // collective (the owner's broadcast) reading the resting copy meanwhile.
  struct HolderCopy {
    explicit HolderCopy(std::string description)
        : done(std::move(description)) {}
    Notification issued;  // `collective` is set (or will never be).
    std::unique_ptr<comm::Work> collective;
    comm::WorkCompletion done;
  };

  // The payload at rest (full_ for holders, shard_ for sharded; null for
  // an owner-layout non-owner).
  Storage* RestPayload() const;
  // For a chunk resting on disk: its payload read back into memory, or
  // written out and freed (what Access and Release do).
  [[nodiscard]] absl::Status BringFromDisk();
  [[nodiscard]] absl::Status ReturnToDisk();
  // fn() with the payload of a chunk resting on disk brought into memory
  // and written back after (writes made between accesses).
  [[nodiscard]] absl::Status WithPayloadInMemory(
      const std::function<absl::Status()>& fn);
  // After a use of a chunk resting on disk (Release, Reduce, a failed
  // access, a write between uses): its payload goes back to disk, unless
  // it is kept between uses.
  [[nodiscard]] absl::Status AfterUseOnDisk();
  // A read StartLoadPayload began: the buffer is the tier's until Wait.
  struct PendingRead;
  // Waits for a pending read and drops it (its bytes are not used).
  void AbandonPendingRead();
  // StartAccess but for taking a chunk resting on disk back there on
  // failure.
  [[nodiscard]] absl::StatusOr<std::unique_ptr<comm::Work>>
  StartAccessInMemory();
  // The release of a chunk whatever its tier (Release adds the disk).
  [[nodiscard]] absl::Status ReleaseInMemory();
  // FailedPrecondition naming `operation` for a chunk resting on disk.
  [[nodiscard]] absl::Status NotOnDisk(absl::string_view operation) const;

  // Allocates `storage` (full_ or shard_) filled with zeros.
  [[nodiscard]] absl::Status MaterialiseZerosIn(Storage& storage);
  // This rank's part of the full buffer: shard_size() elements from
  // shard_begin() (valid while materialised).
  char* OwnPart() const;
  // Sharded: copies this rank's part of the full buffer into the shard.
  [[nodiscard]] absl::Status CopyOwnPartToShard();
  // True when a holder's full buffer rests elsewhere than it computes.
  bool HolderMoves() const;
  // Moves a holder's full buffer back to rest_device() after a use and
  // counts the bytes; `operation` ("releasing") names the use in errors.
  [[nodiscard]] absl::Status ReturnHolderToRest(absl::string_view operation);

  // Where a write of tensor i's values lands: `count` elements from element
  // `first` of the tensor, at `dst` (count == 0: nowhere, a non-holder).
  struct SliceTarget {
    void* dst = nullptr;
    Device device = Device::Cpu();  // Where dst is.
    int64_t first = 0;
    int64_t count = 0;
  };
  // Checks i and `values` (of `dtype`, tensor i's element count, and
  // materialised when anything is to be written) and finds the target,
  // marking the chunk modified when it is the full buffer.
  [[nodiscard]] absl::StatusOr<SliceTarget> TargetForWrite(int i,
                                                           const Tensor& values,
                                                           DType dtype);

  const ChunkOptions options_;
  comm::ProcessGroup* const group_;
  std::string name_;
  const int64_t capacity_;
  const int64_t shard_size_;
  Device device_;
  Device rest_device_;
  std::shared_ptr<Storage> full_;
  std::shared_ptr<Storage> shard_;  // kSharded only.
  std::vector<ChunkTensor> tensors_;
  int64_t used_ = 0;
  bool closed_ = false;
  bool accessed_ = false;
  // Full buffer written since it was materialised (see MarkModified).
  bool modified_ = false;
  std::unique_ptr<comm::Work> pending_copy_;  // See FinishPendingCopy.
  ChunkDiskTier* disk_ = nullptr;  // Set while the chunk rests on disk.
  // The payload's region, kept for later spills to the same tier.
  DiskRegion disk_region_;
  ChunkDiskTier* region_tier_ = nullptr;
  bool payload_on_disk_ = false;
  bool keep_payload_ = false;  // AttachToDisk.
  int pins_ = 0;
  // See disk_copy_current(); mutable: views handed out clear it.
  mutable bool disk_copy_current_ = false;
  std::unique_ptr<PendingRead> pending_read_;
  int64_t rest_to_device_bytes_ = 0;
  int64_t device_to_rest_bytes_ = 0;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_CHUNK_CHUNK_H_
