// Chunk: creation, appends, tensor states, moves, writes and views. The
// collectives that gather and reduce a chunk by its layout are in
// chunk_collectives.cc.
#include "chunk/chunk.h"

#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "tensor/cpu/cast_kernels.h"
#include "tensor/cpu/reduction_kernels.h"
#include "tensor/cuda/cuda_elementwise.h"
#include "tensor/cuda/cuda_reductions.h"
#include "tensor/memory/allocator.h"

namespace chunkzero {
namespace {

// The payload that marks Append's "chunk full" status.
constexpr char kChunkFullUrl[] = "chunkzero/chunk_full";

}  // namespace

bool IsChunkFull(const absl::Status& status) {
  return status.code() == absl::StatusCode::kResourceExhausted &&
         status.GetPayload(kChunkFullUrl).has_value();
}

absl::StatusOr<std::unique_ptr<Chunk>> Chunk::Create(
    const ChunkOptions& options, comm::ProcessGroup* group) {
  const std::string name = absl::StrCat(options.group, "#", options.index);
  if (options.capacity < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk ", name, ": capacity must be positive, got ", options.capacity));
  }
  if (options.layout == ChunkLayout::kOwner &&
      (options.owner < 0 || options.owner >= group->size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", name, ": owner rank ", options.owner,
                     " is outside a group of ", group->size()));
  }
  const int world = group->size();
  const int64_t shard_size = ShardSize(options.layout, options.capacity, world);
  const int64_t capacity =
      PaddedCapacity(options.layout, options.capacity, world);
  std::unique_ptr<Chunk> chunk(new Chunk(options, group, capacity, shard_size));
  CZ_RETURN_IF_ERROR(chunk->AllocateForAppends(), "creating chunk ", name);
  return chunk;
}

Chunk::Chunk(const ChunkOptions& options, comm::ProcessGroup* group,
             int64_t capacity, int64_t shard_size)
    : options_(options),
      group_(group),
      name_(absl::StrCat(options.group, "#", options.index)),
      capacity_(capacity),
      shard_size_(shard_size),
      device_(options.device),
      rest_device_(options.rest_device.value_or(options.device)) {
  const size_t element = ElementSize(options.dtype);
  // A holder's buffer is made where it rests; everyone else's only ever
  // lives where the chunk computes.
  full_ = Storage::CreateUnallocated(capacity * element,
                                     is_holder() ? rest_device_ : device_,
                                     options.storage);
  if (const int64_t shard = ShardStorageElements(sharding()); shard > 0) {
    shard_ = Storage::CreateUnallocated(shard * element, rest_device_,
                                        options.storage);
  }
}

void Chunk::RenameGroup(absl::string_view group) {
  name_ = absl::StrCat(group, "#", options_.index);
}

ChunkSharding Chunk::sharding() const {
  // The capacity as requested: the padded one gives the same shards, except
  // where padding passes the int64 range.
  return ChunkSharding{options_.layout, options_.capacity, group_->size(),
                       group_->rank(), options_.owner};
}

int64_t Chunk::shard_begin() const { return RankPart(sharding()).first; }

double Chunk::utilisation() const {
  return static_cast<double>(used_) / static_cast<double>(capacity_);
}

bool Chunk::is_holder() const { return IsHolder(sharding()); }

int64_t Chunk::payload_bytes() const {
  int64_t bytes = full_->allocated() ? full_->nbytes() : 0;
  if (shard_ != nullptr && shard_->allocated()) bytes += shard_->nbytes();
  return bytes;
}

int64_t Chunk::payload_bytes(Device device) const {
  int64_t bytes = 0;
  if (full_->allocated() && full_->device() == device) bytes += full_->nbytes();
  if (shard_ != nullptr && shard_->allocated() && shard_->device() == device) {
    bytes += shard_->nbytes();
  }
  return bytes;
}

int Chunk::FindTensor(absl::string_view name) const {
  for (int i = 0; i < num_tensors(); ++i) {
    if (tensors_[i].name == name) return i;
  }
  return -1;
}

absl::Status Chunk::AllocateForAppends() {
  // A new chunk starts as zeros so that padding and unused room are
  // deterministic on every rank; Access overwrites every byte. Only what
  // this rank keeps at rest is allocated: building a chunk never costs a
  // sharded rank (or a non-owner) the full buffer.
  if (is_holder()) return MaterialiseZerosIn(*full_);
  if (shard_ != nullptr) return MaterialiseZerosIn(*shard_);
  return absl::OkStatus();
}

absl::Status Chunk::MaterialiseZerosIn(Storage& storage) {
  CZ_RETURN_IF_ERROR(storage.Allocate(), "materialising chunk ", name_);
  if (storage.device().is_host_accessible()) {
    std::memset(storage.data(), 0, storage.nbytes());
    return absl::OkStatus();
  }
  std::vector<char> zeros(storage.nbytes());
  return CopyBytes(storage.data(), storage.device(), zeros.data(),
                   Device::Cpu(), zeros.size());
}

absl::StatusOr<Tensor> Chunk::Append(absl::string_view name,
                                     const Tensor& values) {
  if (closed_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot append tensor '", name, "' to closed chunk ", name_));
  }
  if (values.dtype() != options_.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", name, "' is ", DTypeName(values.dtype()), " but chunk ",
        name_, " holds ", DTypeName(options_.dtype)));
  }
  const int64_t n = values.numel();
  if (n > capacity_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", name, "' ", ShapeToString(values.shape()), " has ", n,
        " elements, more than the chunk size ", capacity_, " of chunk ", name_,
        "; use a chunk size of at least ", n, " or turn chunking off"));
  }
  if (used_ + n > capacity_) {
    absl::Status full = absl::ResourceExhaustedError(
        absl::StrCat("chunk ", name_, " is full: tensor '", name, "' needs ", n,
                     " elements, ", capacity_ - used_, " left"));
    full.SetPayload(kChunkFullUrl, absl::Cord(name_));
    return full;
  }
  CZ_ASSIGN_OR_RETURN(Tensor view,
                      Tensor::View(full_, used_ * ElementSize(options_.dtype),
                                   values.shape(), options_.dtype));
  // The values land where this rank keeps them: the full buffer of a
  // holder, else this rank's part of the shard (or nowhere).
  tensors_.push_back(ChunkTensor{
      std::string(name), used_, values.shape(), n,
      full_->allocated() ? TensorState::kHold : TensorState::kFree});
  absl::Status copied =
      CopyTensorToChunkSlice(static_cast<int>(tensors_.size()) - 1, values);
  if (!copied.ok()) {
    tensors_.pop_back();
    return absl::Status(copied.code(),
                        absl::StrCat("appending tensor '", name, "' to chunk ",
                                     name_, ": ", copied.message()));
  }
  used_ += n;
  return view;
}

void Chunk::SetAllStates(TensorState state) {
  for (ChunkTensor& t : tensors_) t.state = state;
}

char* Chunk::OwnPart() const {
  return static_cast<char*>(full_->data()) +
         shard_begin() * ElementSize(options_.dtype);
}

absl::Status Chunk::CopyOwnPartToShard() {
  return CopyBytes(shard_->data(), shard_->device(), OwnPart(), full_->device(),
                   shard_->nbytes());
}

absl::Status Chunk::Close() {
  if (closed_) return absl::OkStatus();
  if (!is_holder()) {
    // A sharded rank's appends wrote into the shard; a full buffer exists
    // only if someone materialised it since (then it holds the latest
    // values).
    if (shard_ != nullptr && full_->allocated()) {
      CZ_RETURN_IF_ERROR(CopyOwnPartToShard(), "closing chunk ", name_);
    }
    full_->Free();
    SetAllStates(TensorState::kFree);
  }
  closed_ = true;
  modified_ = false;
  return absl::OkStatus();
}

struct Chunk::PendingRead {
  AlignedBuffer buffer;
  IoBatch batch;
  std::string what;
  int64_t counted = 0;  // Bytes counted in the payload's tracker.
};

Chunk::~Chunk() {
  FinishPendingCopy().IgnoreError();
  AbandonPendingRead();
}

void Chunk::AbandonPendingRead() {
  if (pending_read_ == nullptr) return;
  // The buffer is the tier's until its read is waited for.
  disk_->Wait(pending_read_->batch).IgnoreError();
  if (options_.storage.tracker != nullptr) {
    options_.storage.tracker->Subtract(Device::Cpu(), options_.storage.category,
                                       pending_read_->counted);
  }
  pending_read_.reset();
}

absl::Status Chunk::MaterialiseZeros() {
  disk_copy_current_ = false;
  if (!closed_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot materialise chunk ", name_, " before it is closed"));
  }
  if (full_->allocated()) return absl::OkStatus();
  return MaterialiseZerosIn(*full_);
}

Storage* Chunk::RestPayload() const {
  if (is_holder()) return full_.get();
  return shard_.get();
}

int64_t Chunk::rest_payload_bytes() const {
  const Storage* payload = RestPayload();
  return payload == nullptr ? 0 : static_cast<int64_t>(payload->nbytes());
}

absl::Status Chunk::NotOnDisk(absl::string_view operation) const {
  if (disk_ == nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("cannot ", operation, " chunk ", name_,
                   ": it rests on disk (", disk_->file().description(), ")"));
}

absl::Status Chunk::SpillRest(ChunkDiskTier* disk) {
  if (disk == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("spilling chunk ", name_, " to no disk tier"));
  }
  if (disk_ != nullptr && disk_ != disk) return NotOnDisk("spill");
  if (accessed_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot spill chunk ", name_, " to disk while it is accessed"));
  }
  if (!rest_device_.is_host_accessible()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot spill chunk ", name_, " to disk from ",
                     rest_device_.ToString(), ": it must rest in host memory"));
  }
  CZ_RETURN_IF_ERROR(FinishPendingCopy(), "spilling chunk ", name_);
  // A region of another tier (the chunk rested on one before) is not this
  // tier's.
  if (region_tier_ != disk) {
    disk_region_ = DiskRegion();
    disk_copy_current_ = false;
  }
  disk_ = disk;
  keep_payload_ = false;
  return ReturnToDisk();
}

absl::Status Chunk::AttachToDisk(ChunkDiskTier* disk) {
  if (disk == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("attaching chunk ", name_, " to no disk tier"));
  }
  if (disk_ != nullptr && disk_ != disk) return NotOnDisk("attach");
  // (Not the simulated device's memory, which stands for a GPU's.)
  if (rest_device_ != Device::Cpu()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot attach chunk ", name_, " to disk from ",
                     rest_device_.ToString(), ": it must rest in host memory"));
  }
  if (region_tier_ != disk) {
    disk_region_ = DiskRegion();
    disk_copy_current_ = false;
  }
  disk_ = disk;
  keep_payload_ = true;
  return absl::OkStatus();
}

absl::Status Chunk::AfterUseOnDisk() {
  if (keep_payload_) return absl::OkStatus();
  return ReturnToDisk();
}

bool Chunk::CanEvictPayload() const {
  // A payload resting on the device (the auto placement keeps it there)
  // leaves for the host first, never straight for disk.
  return !accessed_ && pins_ == 0 && rest_device_ == Device::Cpu() &&
         CanMove() && (is_holder() || !full_->allocated());
}

absl::Status Chunk::EvictPayload() {
  if (!CanEvictPayload()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot evict chunk ", name_, " to disk while it is ",
                     accessed_   ? "accessed"
                     : pins_ > 0 ? "pinned"
                     : rest_device_ != Device::Cpu()
                         ? absl::StrCat("resting on ", rest_device_.ToString())
                         : "in use"));
  }
  AbandonPendingRead();
  return ReturnToDisk();
}

absl::Status Chunk::ReturnToDisk() {
  if (disk_ == nullptr || payload_on_disk_) return absl::OkStatus();
  // Attached to disk but resting on the device for now (MoveRestTo): the
  // disk takes it once it is back in host memory.
  if (rest_device_ != Device::Cpu()) return absl::OkStatus();
  Storage* payload = RestPayload();
  if (payload == nullptr || !payload->allocated()) return absl::OkStatus();
  if (!disk_region_.valid()) {
    absl::StatusOr<DiskRegion> region =
        disk_->Reserve(static_cast<int64_t>(payload->nbytes()));
    CZ_RETURN_IF_ERROR(region.status(), "spilling chunk ", name_);
    disk_region_ = *region;
    region_tier_ = disk_;
    disk_copy_current_ = false;
  }
  // Read and not written since: the disk holds these bytes already.
  if (!disk_copy_current_) {
    CZ_RETURN_IF_ERROR(disk_->Write(disk_region_, payload->data(),
                                    payload->nbytes(),
                                    absl::StrCat("chunk ", name_)));
    disk_copy_current_ = true;
  }
  payload->Free();
  payload_on_disk_ = true;
  return absl::OkStatus();
}

absl::Status Chunk::StartLoadPayload() {
  if (!payload_on_disk_ || pending_read_ != nullptr) return absl::OkStatus();
  auto pending = std::make_unique<PendingRead>();
  pending->what = absl::StrCat("chunk ", name_);
  MemoryTracker* const tracker = options_.storage.tracker;
  const int64_t bytes = disk_region_.bytes;
  if (tracker != nullptr) {
    CZ_RETURN_IF_ERROR(
        tracker->TryAdd(Device::Cpu(), options_.storage.category, bytes),
        "reading chunk ", name_, " ahead");
    pending->counted = bytes;
  }
  absl::StatusOr<AlignedBuffer> buffer =
      AlignedBuffer::Create(static_cast<size_t>(bytes));
  absl::StatusOr<IoBatch> batch =
      buffer.ok()
          ? disk_->StartRead(disk_region_, 0, bytes, *buffer, &pending->what)
          : absl::StatusOr<IoBatch>(buffer.status());
  if (!batch.ok()) {
    if (tracker != nullptr) {
      tracker->Subtract(Device::Cpu(), options_.storage.category, bytes);
    }
    return batch.status();
  }
  pending->buffer = *std::move(buffer);
  pending->batch = *std::move(batch);
  pending_read_ = std::move(pending);
  return absl::OkStatus();
}

absl::Status Chunk::BringFromDisk() {
  if (!payload_on_disk_) return absl::OkStatus();
  Storage* payload = RestPayload();
  std::unique_ptr<PendingRead> pending = std::move(pending_read_);
  auto uncount = [&] {
    if (pending != nullptr && options_.storage.tracker != nullptr) {
      options_.storage.tracker->Subtract(
          Device::Cpu(), options_.storage.category, pending->counted);
    }
  };
  // A read under way finishes first, whatever follows: its buffer is the
  // tier's until then.
  absl::Status read =
      pending != nullptr ? disk_->Wait(pending->batch) : absl::OkStatus();
  absl::Status allocated = payload->Allocate();
  if (!allocated.ok()) {
    uncount();
    return absl::Status(allocated.code(),
                        absl::StrCat("bringing chunk ", name_,
                                     " from disk: ", allocated.message()));
  }
  if (pending == nullptr) {
    read = disk_->Read(disk_region_, payload->data(), payload->nbytes(),
                       absl::StrCat("chunk ", name_));
  } else if (read.ok()) {
    std::memcpy(payload->data(), pending->buffer.data(), payload->nbytes());
  }
  uncount();
  if (!read.ok()) {
    payload->Free();
    return read;
  }
  payload_on_disk_ = false;
  disk_copy_current_ = true;
  return absl::OkStatus();
}

absl::Status Chunk::WithPayloadInMemory(
    const std::function<absl::Status()>& fn) {
  CZ_RETURN_IF_ERROR(BringFromDisk());
  const absl::Status done = fn();
  disk_copy_current_ = false;
  const absl::Status back = AfterUseOnDisk();
  return done.ok() ? back : done;
}

absl::Status Chunk::ReadRestPayload(void* dst) const {
  const Storage* payload = RestPayload();
  if (payload == nullptr) return absl::OkStatus();
  if (payload_on_disk_) {
    return disk_->Read(disk_region_, dst, payload->nbytes(),
                       absl::StrCat("chunk ", name_));
  }
  if (!payload->allocated()) {
    return absl::FailedPreconditionError(
        absl::StrCat("chunk ", name_, " holds no payload at rest to read"));
  }
  return CopyBytes(dst, Device::Cpu(), payload->data(), payload->device(),
                   payload->nbytes());
}

absl::Status Chunk::UnspillRest() {
  CZ_RETURN_IF_ERROR(BringFromDisk());
  disk_ = nullptr;
  keep_payload_ = false;
  // Written in memory from now on without the disk knowing.
  disk_copy_current_ = false;
  return absl::OkStatus();
}

void Chunk::DropPayload() {
  FinishPendingCopy().IgnoreError();  // Its buffers are about to go.
  AbandonPendingRead();
  keep_payload_ = false;
  disk_copy_current_ = false;
  full_->Free();
  if (shard_ != nullptr) shard_->Free();
  accessed_ = false;
  modified_ = false;
  payload_on_disk_ = false;
  disk_ = nullptr;
  SetAllStates(TensorState::kFree);
}

absl::Status Chunk::StateError(absl::string_view operation,
                               Requirement requirement) const {
  for (const ChunkTensor& t : tensors_) {
    bool ok = false;
    absl::string_view needs;
    switch (requirement) {
      case Requirement::kAllHold:
        ok = t.state == TensorState::kHold;
        needs = "every tensor HOLD";
        break;
      case Requirement::kAllReadyForReduce:
        ok = t.state == TensorState::kReadyForReduce;
        needs = "every tensor READY_FOR_REDUCE";
        break;
      case Requirement::kNoneBusy:
        ok = t.state != TensorState::kCompute &&
             t.state != TensorState::kReadyForReduce;
        needs = "no tensor COMPUTE or READY_FOR_REDUCE";
        break;
    }
    if (!ok) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot ", operation, " chunk ", name_, ": tensor '", t.name, "' is ",
          TensorStateName(t.state), " (needs ", needs, ")"));
    }
  }
  return absl::OkStatus();
}

bool Chunk::CanRelease() const {
  return StateError("release", Requirement::kAllHold).ok();
}

bool Chunk::CanReduce() const {
  return StateError("reduce", Requirement::kAllReadyForReduce).ok();
}

bool Chunk::CanMove() const {
  return StateError("move", Requirement::kNoneBusy).ok();
}

absl::Status Chunk::MoveTo(Device device) {
  CZ_RETURN_IF_ERROR(NotOnDisk(absl::StrCat("move to ", device.ToString())));
  CZ_RETURN_IF_ERROR(FinishPendingCopy(), "moving chunk ", name_);
  CZ_RETURN_IF_ERROR(StateError("move", Requirement::kNoneBusy));
  if (shard_ != nullptr) {
    CZ_RETURN_IF_ERROR(shard_->MoveTo(device), "moving chunk ", name_);
  }
  absl::Status moved = full_->MoveTo(device);
  if (!moved.ok()) {
    // Put the shard back so that the chunk stays on one device.
    if (shard_ != nullptr) shard_->MoveTo(rest_device_).IgnoreError();
    return absl::Status(moved.code(), absl::StrCat("moving chunk ", name_, ": ",
                                                   moved.message()));
  }
  device_ = device;
  rest_device_ = device;
  return absl::OkStatus();
}

absl::Status Chunk::MoveRestTo(Device rest) {
  if (rest == rest_device_) return absl::OkStatus();
  // A chunk spilled for good stays on disk; one attached to it (the host
  // tier's) may rest on the device for a while, its payload brought into
  // memory first.
  if (!keep_payload_) {
    CZ_RETURN_IF_ERROR(
        NotOnDisk(absl::StrCat("move to rest on ", rest.ToString())));
  }
  if (accessed_) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot move chunk ", name_, " to rest on ",
                     rest.ToString(), " while it is accessed"));
  }
  if (disk_ != nullptr) {
    if (pins_ > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot move chunk ", name_, " to rest on ",
                       rest.ToString(), " while its payload is pinned"));
    }
    CZ_RETURN_IF_ERROR(BringFromDisk(), "moving chunk ", name_, " to rest on ",
                       rest.ToString());
    // The device may change it without the disk knowing.
    disk_copy_current_ = false;
  }
  Storage* payload = is_holder() ? full_.get() : shard_.get();
  int64_t moved = 0;
  if (payload != nullptr) {
    moved = payload->allocated() ? static_cast<int64_t>(payload->nbytes()) : 0;
    CZ_RETURN_IF_ERROR(payload->MoveTo(rest), "moving chunk ", name_,
                       " to rest on ", rest.ToString());
  }
  if (rest == device_) rest_to_device_bytes_ += moved;
  if (rest_device_ == device_) device_to_rest_bytes_ += moved;
  rest_device_ = rest;
  return absl::OkStatus();
}

absl::Status Chunk::RestWhereItComputes() {
  disk_copy_current_ = false;
  CZ_RETURN_IF_ERROR(FinishPendingCopy(), "keeping chunk ", name_);
  if (rest_device_ == device_) return absl::OkStatus();
  if (!accessed_ || !full_->allocated()) {
    return absl::FailedPreconditionError(
        absl::StrCat("chunk ", name_, " can come to rest on ",
                     device_.ToString(), " only while accessed"));
  }
  if (shard_ != nullptr) {
    // The same Storage object, so that views of the shard (grads) follow.
    const Device was = shard_->device();
    const bool had = shard_->allocated();
    shard_->Free();
    CZ_RETURN_IF_ERROR(shard_->MoveTo(device_));
    absl::Status allocated = shard_->Allocate();
    if (allocated.ok()) allocated = CopyOwnPartToShard();
    if (!allocated.ok()) {
      // Put the shard back where it was, refilled the same way.
      shard_->Free();
      shard_->MoveTo(was).IgnoreError();
      if (had && shard_->Allocate().ok()) CopyOwnPartToShard().IgnoreError();
      return allocated;
    }
  }
  rest_device_ = device_;
  return absl::OkStatus();
}

absl::Status Chunk::SetTensorState(int i, TensorState to) {
  if (i < 0 || i >= num_tensors()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", name_, " has no tensor #", i, " (it holds ",
                     num_tensors(), ")"));
  }
  ChunkTensor& t = tensors_[i];
  CZ_RETURN_IF_ERROR(CheckTransition(t.state, to, t.name, name_));
  if (ClassifyTransition(t.state, to) == TransitionKind::kLegal) t.state = to;
  return absl::OkStatus();
}

absl::StatusOr<Chunk::SliceTarget> Chunk::TargetForWrite(int i,
                                                         const Tensor& values,
                                                         DType dtype) {
  if (i < 0 || i >= num_tensors()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", name_, " has no tensor #", i));
  }
  const ChunkTensor& t = tensors_[i];
  if (values.dtype() != dtype || values.numel() != t.numel) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot copy ", values.DebugString(), " into tensor '",
                     t.name, "' (", DTypeName(options_.dtype),
                     ShapeToString(t.shape), ") of chunk ", name_));
  }
  const size_t element = ElementSize(options_.dtype);
  SliceTarget target;
  if (full_->allocated()) {
    target = {static_cast<char*>(full_->data()) + t.offset * element,
              full_->device(), 0, t.numel};
  } else if (shard_ != nullptr) {
    const auto [lo, hi] = ShardRange(i);
    target = {
        static_cast<char*>(shard_->data()) + (lo - shard_begin()) * element,
        shard_->device(), lo - t.offset, hi - lo};
  }
  if (target.count == 0) return target;
  if (!values.is_materialized()) {
    return absl::FailedPreconditionError(
        absl::StrCat("values for tensor '", t.name, "' are not materialised"));
  }
  if (full_->allocated()) modified_ = true;
  disk_copy_current_ = false;
  return target;
}

absl::Status Chunk::CopyTensorToChunkSlice(int i, const Tensor& values) {
  if (payload_on_disk_) {
    return WithPayloadInMemory(
        [&] { return CopyTensorToChunkSlice(i, values); });
  }
  CZ_ASSIGN_OR_RETURN(const SliceTarget target,
                      TargetForWrite(i, values, options_.dtype));
  const size_t element = ElementSize(options_.dtype);
  return CopyBytes(
      target.dst, target.device,
      static_cast<const char*>(values.raw_data()) + target.first * element,
      values.device(), target.count * element);
}

absl::Status Chunk::WriteTensorScaled(int i, const Tensor& values,
                                      float scale) {
  if (payload_on_disk_) {
    return WithPayloadInMemory(
        [&] { return WriteTensorScaled(i, values, scale); });
  }
  CZ_ASSIGN_OR_RETURN(const SliceTarget target,
                      TargetForWrite(i, values, DType::kF32));
  if (target.count == 0) return absl::OkStatus();
  const float* src = values.data<float>() + target.first;
  const size_t n = static_cast<size_t>(target.count);
  const Device from = values.device();
  if (target.device.is_host_accessible() && from.is_host_accessible()) {
    return CastScaled(target.dst, options_.dtype, src, scale, n);
  }
  if (target.device == from) {  // Both on one GPU.
    return CudaCastScaled(target.dst, options_.dtype, src, scale, n);
  }
  // Between the host and a GPU: scale on the host, copy the result.
  std::vector<float> host_src;
  if (!from.is_host_accessible()) {
    host_src.resize(n);
    CZ_RETURN_IF_ERROR(
        CopyBytes(host_src.data(), Device::Cpu(), src, from, n * sizeof(float)),
        "scaled write of tensor '", tensors_[i].name, "' of chunk ", name_);
    src = host_src.data();
  }
  std::vector<char> out(n * ElementSize(options_.dtype));
  CZ_RETURN_IF_ERROR(CastScaled(out.data(), options_.dtype, src, scale, n));
  return CopyBytes(target.dst, target.device, out.data(), Device::Cpu(),
                   out.size());
}

absl::StatusOr<bool> Chunk::HasInfOrNan() const {
  if (payload_on_disk_) {
    // Checked in a copy read from disk (a shard or a holder's buffer; the
    // used elements come first either way).
    std::vector<char> copy(static_cast<size_t>(rest_payload_bytes()));
    CZ_RETURN_IF_ERROR(ReadRestPayload(copy.data()));
    const int64_t n = is_holder() ? used_ : [&] {
      const auto [lo, hi] = UpdateRange(sharding(), used_);
      return hi - lo;
    }();
    return chunkzero::HasInfOrNan(copy.data(), options_.dtype,
                                  static_cast<size_t>(n));
  }
  const Device where = full_->allocated() || shard_ == nullptr
                           ? full_->device()
                           : shard_->device();
  const auto check = [&](const void* data, int64_t n) {
    return where.is_host_accessible()
               ? chunkzero::HasInfOrNan(data, options_.dtype,
                                        static_cast<size_t>(n))
               : CudaHasInfOrNan(where.index(), data, options_.dtype,
                                 static_cast<size_t>(n));
  };
  if (full_->allocated()) return check(full_->data(), used_);
  if (shard_ == nullptr || !shard_->allocated()) return false;
  const auto [lo, hi] = UpdateRange(sharding(), used_);
  return check(shard_->data(), hi - lo);
}

Tensor Chunk::TensorView(int i) const {
  const ChunkTensor& t = tensors_[i];
  return *Tensor::View(full_, t.offset * ElementSize(options_.dtype), t.shape,
                       options_.dtype);
}

std::pair<int64_t, int64_t> Chunk::ShardRange(int i) const {
  const ChunkTensor& t = tensors_[i];
  return IntersectRanges({t.offset, t.offset + t.numel}, RankPart(sharding()));
}

Tensor Chunk::ShardView(int i) const {
  disk_copy_current_ = false;  // The caller may write through it.
  if (shard_ == nullptr) {
    if (is_holder()) return TensorView(i).Flatten();
    return *Tensor::View(full_, 0, {0}, options_.dtype);
  }
  const auto [lo, hi] = ShardRange(i);
  if (hi == lo) return *Tensor::View(shard_, 0, {0}, options_.dtype);
  return *Tensor::View(shard_,
                       (lo - shard_begin()) * ElementSize(options_.dtype),
                       {hi - lo}, options_.dtype);
}

Tensor Chunk::FullView() const {
  disk_copy_current_ = false;  // The caller may write through it.
  return *Tensor::View(full_, 0, {capacity_}, options_.dtype);
}

Tensor Chunk::ShardStorageView() const {
  disk_copy_current_ = false;  // The caller may write through it.
  if (shard_ == nullptr) return FullView();
  return *Tensor::View(shard_, 0, {shard_size_}, options_.dtype);
}

}  // namespace chunkzero
