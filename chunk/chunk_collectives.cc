// Chunk's collectives, the part of Chunk that differs by layout
// (docs/DESIGN.md §3, §4): Access gathers the full buffer from where the
// layout keeps it (nothing when replicated, a broadcast from the owner, an
// all-gather of the shards), Reduce sums the grads back into it (an
// all-reduce, a reduce to the owner, a reduce-scatter into the shards),
// and Release drops what a rank does not keep. Which part a rank keeps is
// chunk/chunk_layout.h's; the rest of Chunk is in chunk.cc.
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "chunk/chunk.h"
#include "tensor/memory/allocator.h"

namespace chunkzero {

absl::StatusOr<std::unique_ptr<comm::Work>> Chunk::StartAccess() {
  absl::StatusOr<std::unique_ptr<comm::Work>> work = StartAccessInMemory();
  // An access that did not start leaves a chunk resting on disk there.
  if (!work.ok()) AfterUseOnDisk().IgnoreError();
  return work;
}

absl::StatusOr<std::unique_ptr<comm::Work>> Chunk::StartAccessInMemory() {
  if (!closed_) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot access chunk ", name_, " before it is closed"));
  }
  if (accessed_) return comm::MakeCompletedWork(absl::OkStatus());
  CZ_RETURN_IF_ERROR(BringFromDisk(), "accessing chunk ", name_);
  // A holder's buffer coming from where it rests: on the copy stream when
  // there is one (the access completes when the copy has, and the owner
  // broadcasts from the resting copy meanwhile), else right here.
  std::shared_ptr<HolderCopy> copy;
  const void* resting = nullptr;
  if (HolderMoves()) {
    // The copy thread's copies are ordered against nothing on a GPU (its
    // compute stream, its current device): there the copy runs here, and
    // the owner broadcasts from the device, as NCCL needs.
    if (options_.copy_stream != nullptr && device_.is_host_accessible()) {
      copy = std::make_shared<HolderCopy>(
          absl::StrCat("bringing chunk ", name_, " to ", device_.ToString()));
      absl::StatusOr<const void*> old = full_->MoveToAsync(
          device_, *options_.copy_stream,
          [copy] {
            // The resting copy is freed once this returns: wait for the
            // collective reading it.
            copy->issued.WaitForNotification();
            return copy->collective != nullptr ? copy->collective->Wait()
                                               : absl::OkStatus();
          },
          [copy](absl::Status status) { copy->done.Complete(status); });
      CZ_RETURN_IF_ERROR(old.status(), "accessing chunk ", name_,
                         ": bringing it from ", rest_device_.ToString());
      resting = *old;
      pending_copy_ = copy->done.MakeWork();
    } else {
      CZ_RETURN_IF_ERROR(full_->MoveTo(device_), "accessing chunk ", name_,
                         ": bringing it from ", rest_device_.ToString());
    }
    rest_to_device_bytes_ += full_->nbytes();
  }
  if (options_.layout == ChunkLayout::kReplicated) {
    accessed_ = true;
    if (copy == nullptr) return comm::MakeCompletedWork(absl::OkStatus());
    copy->issued.Notify();
    return copy->done.MakeWork();
  }
  absl::Status allocated = full_->Allocate();
  if (!allocated.ok()) {
    if (copy != nullptr) copy->issued.Notify();
    return absl::Status(
        allocated.code(),
        absl::StrCat("accessing chunk ", name_, ": ", allocated.message()));
  }
  // A shard resting elsewhere comes into its own part of the full buffer,
  // and the gather runs in place there: one backend sees both buffers on
  // the device it computes on (NCCL cannot read host memory).
  char* const own = OwnPart();
  if (shard_ != nullptr && rest_device_ != device_) {
    const absl::Status copied =
        CopyBytes(own, device_, shard_->data(), rest_device_, shard_->nbytes());
    if (!copied.ok()) {
      full_->Free();
      return absl::Status(
          copied.code(),
          absl::StrCat("accessing chunk ", name_, ": bringing ",
                       "its shard from ", rest_device_.ToString(), ": ",
                       copied.message()));
    }
    rest_to_device_bytes_ += shard_->nbytes();
  }
  accessed_ = true;
  for (ChunkTensor& t : tensors_) {
    if (t.state == TensorState::kFree) t.state = TensorState::kHold;
  }
  const comm::MutableBuffer full{full_->data(), static_cast<size_t>(capacity_),
                                 options_.dtype};
  if (options_.layout == ChunkLayout::kOwner) {
    comm::BroadcastOptions opts;
    opts.root = options_.owner;
    opts.timeout = options_.comm_timeout;
    opts.tag = name_;
    if (copy == nullptr) return group_->Broadcast(full, opts);
    // The owner sends from its resting copy while the copy stream brings it
    // to the device.
    copy->collective = group_->Broadcast(
        comm::MutableBuffer{const_cast<void*>(resting),
                            static_cast<size_t>(capacity_), options_.dtype},
        opts);
    copy->issued.Notify();
    return copy->done.MakeWork();
  }
  comm::AllGatherOptions opts;
  opts.timeout = options_.comm_timeout;
  opts.tag = name_;
  const void* send = rest_device_ != device_ ? own : shard_->data();
  return group_->AllGather(
      comm::ConstBuffer{send, static_cast<size_t>(shard_size_), options_.dtype},
      full, opts);
}

absl::Status Chunk::Access() {
  CZ_ASSIGN_OR_RETURN(std::unique_ptr<comm::Work> work, StartAccess());
  CZ_RETURN_IF_ERROR(WaitBeforeCompute(*work), "accessing chunk ", name_);
  return absl::OkStatus();
}

bool Chunk::ComputeWaitsOnStream() const {
  return device_ != Device::Cpu() && rest_device_ == device_;
}

absl::Status Chunk::WaitBeforeCompute(comm::Work& work) const {
  if (ComputeWaitsOnStream()) return work.WaitOnStream(kComputeStream);
  return work.Wait();
}

absl::Status Chunk::FinishPendingCopy() {
  if (pending_copy_ == nullptr) return absl::OkStatus();
  absl::Status status = pending_copy_->Wait();
  pending_copy_.reset();
  return status;
}

absl::Status Chunk::Release() {
  CZ_RETURN_IF_ERROR(ReleaseInMemory());
  return AfterUseOnDisk();
}

absl::Status Chunk::ReleaseInMemory() {
  CZ_RETURN_IF_ERROR(FinishPendingCopy(), "releasing chunk ", name_);
  CZ_RETURN_IF_ERROR(StateError("release", Requirement::kAllHold));
  // A modified payload at rest (a holder's buffer, a shard refilled
  // below) is not what the disk holds any more.
  if (modified_) disk_copy_current_ = false;
  if (is_holder()) {
    if (HolderMoves() && accessed_) {
      CZ_RETURN_IF_ERROR(ReturnHolderToRest("releasing"));
    }
    accessed_ = false;
    return absl::OkStatus();
  }
  accessed_ = false;
  if (shard_ != nullptr && full_->allocated() && modified_) {
    CZ_RETURN_IF_ERROR(CopyOwnPartToShard(), "releasing chunk ", name_);
    if (rest_device_ != device_) device_to_rest_bytes_ += shard_->nbytes();
  }
  full_->Free();
  modified_ = false;
  SetAllStates(TensorState::kFree);
  return absl::OkStatus();
}

absl::Status Chunk::Reduce(comm::ReduceOp op) {
  CZ_RETURN_IF_ERROR(FinishPendingCopy(), "reducing chunk ", name_);
  CZ_RETURN_IF_ERROR(StateError("reduce", Requirement::kAllReadyForReduce));
  if (!full_->allocated()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot reduce chunk ", name_,
                     ": it is not materialised on rank ", group_->rank()));
  }
  // The reduction lands in the payload at rest.
  CZ_RETURN_IF_ERROR(BringFromDisk(), "reducing chunk ", name_);
  const comm::MutableBuffer full{full_->data(), static_cast<size_t>(capacity_),
                                 options_.dtype};
  std::unique_ptr<comm::Work> work;
  switch (options_.layout) {
    case ChunkLayout::kReplicated: {
      comm::AllReduceOptions opts;
      opts.op = op;
      opts.timeout = options_.comm_timeout;
      opts.tag = name_;
      work = group_->AllReduce(full, opts);
      break;
    }
    case ChunkLayout::kOwner: {
      comm::ReduceOptions opts;
      opts.root = options_.owner;
      opts.op = op;
      opts.timeout = options_.comm_timeout;
      opts.tag = name_;
      work = group_->Reduce(full, is_holder() ? full : comm::MutableBuffer{},
                            opts);
      break;
    }
    case ChunkLayout::kSharded: {
      comm::ReduceScatterOptions opts;
      opts.op = op;
      opts.timeout = options_.comm_timeout;
      opts.tag = name_;
      // A shard resting elsewhere is reduced in place into this rank's
      // part of the full buffer, then copied out (as in StartAccess).
      void* recv = rest_device_ != device_ ? OwnPart() : shard_->data();
      work = group_->ReduceScatter(
          full,
          comm::MutableBuffer{recv, static_cast<size_t>(shard_size_),
                              options_.dtype},
          opts);
      break;
    }
  }
  CZ_RETURN_IF_ERROR(WaitBeforeCompute(*work), "reducing chunk ", name_);
  accessed_ = false;
  disk_copy_current_ = false;
  if (is_holder()) {
    // The reduced grads rest where the parameters do, for the optimizer.
    if (HolderMoves()) CZ_RETURN_IF_ERROR(ReturnHolderToRest("reducing"));
    SetAllStates(TensorState::kHold);
  } else {
    if (shard_ != nullptr && rest_device_ != device_) {
      CZ_RETURN_IF_ERROR(CopyOwnPartToShard(), "reducing chunk ", name_,
                         ": taking its shard to ", rest_device_.ToString());
      device_to_rest_bytes_ += shard_->nbytes();
    }
    full_->Free();
    SetAllStates(TensorState::kFree);
  }
  modified_ = false;
  // A chunk resting on disk goes back there, as after a Release.
  return AfterUseOnDisk();
}

bool Chunk::HolderMoves() const {
  return is_holder() && rest_device_ != device_;
}

absl::Status Chunk::ReturnHolderToRest(absl::string_view operation) {
  CZ_RETURN_IF_ERROR(full_->MoveTo(rest_device_), operation, " chunk ", name_,
                     ": taking it back to ", rest_device_.ToString());
  device_to_rest_bytes_ += full_->nbytes();
  return absl::OkStatus();
}

}  // namespace chunkzero
