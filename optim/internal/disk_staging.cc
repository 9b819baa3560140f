#include "optim/internal/disk_staging.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace chunkzero {
namespace optim_internal {

DiskStaging::~DiskStaging() {
  Finish().IgnoreError();
  if (tracker_ != nullptr) {
    tracker_->Subtract(Device::Cpu(), MemoryCategory::kOther, counted_);
  }
}

absl::Status DiskStaging::WaitAll(std::vector<IoBatch>& batches) {
  absl::Status first;
  for (IoBatch b : batches) {
    const absl::Status s = disk_->Wait(b);
    if (first.ok()) first = s;
  }
  batches.clear();
  return first;
}

absl::StatusOr<DiskStaging::Set*> DiskStaging::SetOf(size_t k) {
  Set& set = sets_[k % sets_.size()];
  if (k >= fetched_ || set.k != k) {
    return absl::FailedPreconditionError(absl::StrCat(
        "disk staging: fetch ", k, " is not staged (", fetched_, " fetched)"));
  }
  return &set;
}

absl::Status DiskStaging::Fetch(const std::vector<Chunk*>& chunks,
                                int64_t first, int64_t bytes) {
  Set& set = sets_[fetched_ % sets_.size()];
  // The set's last user: its writes must be done before it is read into.
  CZ_RETURN_IF_ERROR(WaitAll(set.writes));
  CZ_RETURN_IF_ERROR(WaitAll(set.reads));
  const auto a = static_cast<int64_t>(kDirectIoAlignment);
  set.k = fetched_++;
  set.chunks = chunks;
  set.block_first = first / a * a;
  set.skip = first - set.block_first;
  set.block_bytes = RoundUpToDirectIo(first + bytes) - set.block_first;
  set.whats.clear();
  set.buffers.resize(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    const Chunk* c = chunks[i];
    if (!c->payload_on_disk()) {
      return absl::FailedPreconditionError(
          absl::StrCat("chunk ", c->name(), " is not resting on disk"));
    }
    if (first < 0 || bytes < 0 || first + bytes > c->rest_payload_bytes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "disk staging: bytes [", first, ", ", first + bytes, ") of chunk ",
          c->name(), "'s payload of ", c->rest_payload_bytes()));
    }
    set.whats.push_back(absl::StrCat("chunk ", c->name()));
  }
  for (size_t i = 0; i < chunks.size(); ++i) {
    const auto had = static_cast<int64_t>(set.buffers[i].size());
    if (had < set.block_bytes) {
      // The old buffer goes first, then the new one is counted (room made
      // for it first) and made.
      set.buffers[i] = AlignedBuffer();
      const int64_t bytes = RoundUpToDirectIo(set.block_bytes);
      if (tracker_ != nullptr) {
        tracker_->Subtract(Device::Cpu(), MemoryCategory::kOther, had);
        counted_ -= had;
        CZ_RETURN_IF_ERROR(
            tracker_->MakeRoom(Device::Cpu(), MemoryCategory::kOther, bytes),
            "staging chunk ", chunks[i]->name(), " from disk");
        CZ_RETURN_IF_ERROR(
            tracker_->TryAdd(Device::Cpu(), MemoryCategory::kOther, bytes),
            "staging chunk ", chunks[i]->name(), " from disk");
        counted_ += bytes;
      }
      absl::StatusOr<AlignedBuffer> made = AlignedBuffer::Create(bytes);
      if (!made.ok()) {
        if (tracker_ != nullptr) {
          tracker_->Subtract(Device::Cpu(), MemoryCategory::kOther, bytes);
          counted_ -= bytes;
        }
        return made.status();
      }
      set.buffers[i] = *std::move(made);
    }
    CZ_ASSIGN_OR_RETURN(IoBatch b,
                        chunks[i]->disk_tier()->StartRead(
                            chunks[i]->disk_region(), set.block_first,
                            set.block_bytes, set.buffers[i], &set.whats[i]));
    set.reads.push_back(b);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<char*>> DiskStaging::Get(size_t k) {
  CZ_ASSIGN_OR_RETURN(Set * set, SetOf(k));
  CZ_RETURN_IF_ERROR(WaitAll(set->reads));
  std::vector<char*> out;
  for (const AlignedBuffer& b : set->buffers) {
    out.push_back(b.data() + set->skip);
  }
  return out;
}

absl::Status DiskStaging::Return(size_t k) {
  CZ_ASSIGN_OR_RETURN(Set * set, SetOf(k));
  CZ_RETURN_IF_ERROR(WaitAll(set->reads));
  for (size_t i = 0; i < set->chunks.size(); ++i) {
    CZ_ASSIGN_OR_RETURN(IoBatch b,
                        set->chunks[i]->disk_tier()->StartWrite(
                            set->chunks[i]->disk_region(), set->block_first,
                            set->block_bytes, set->buffers[i], &set->whats[i]));
    set->writes.push_back(b);
  }
  return absl::OkStatus();
}

absl::Status DiskStaging::Finish() {
  absl::Status first;
  for (Set& set : sets_) {
    absl::Status s = WaitAll(set.reads);
    if (first.ok()) first = s;
    s = WaitAll(set.writes);
    if (first.ok()) first = s;
  }
  return first;
}

}  // namespace optim_internal
}  // namespace chunkzero
