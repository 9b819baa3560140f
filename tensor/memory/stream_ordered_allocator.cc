#include "tensor/memory/stream_ordered_allocator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace chunkzero {

StreamOrderedAllocator::~StreamOrderedAllocator() {
  MutexLock lock(&mu_);
  // An error here means a broken CUDA context; there is nobody to tell.
  FreeAllCachedLocked().IgnoreError();
}

size_t StreamOrderedAllocator::RoundSize(size_t bytes) {
  if (bytes == 0) return kRoundBytes;
  return (bytes + kRoundBytes - 1) / kRoundBytes * kRoundBytes;
}

absl::StatusOr<void*> StreamOrderedAllocator::Allocate(size_t bytes) {
  return AllocateOn(bytes, default_stream_);
}

absl::StatusOr<void*> StreamOrderedAllocator::AllocateOn(size_t bytes,
                                                         CudaStream stream) {
  const size_t size = RoundSize(bytes);
  MutexLock lock(&mu_);
  const absl::Status reclaimed = ReclaimPendingLocked();
  if (!reclaimed.ok()) return reclaimed;
  Pool& pool = pools_[stream];
  auto it = pool.lower_bound(size);
  if (it != pool.end() && it->first <= size + size / 8) {
    void* ptr = it->second;
    const size_t block_size = it->first;
    pool.erase(it);
    live_[ptr] = Block{block_size, stream, {}};
    stats_.allocated_bytes += static_cast<int64_t>(block_size);
    ++stats_.hits;
    return ptr;
  }
  absl::StatusOr<void*> ptr = MallocLocked(size);
  if (!ptr.ok()) {
    return absl::Status(
        ptr.status().code(),
        absl::StrCat("allocating ", bytes, " bytes on ", device().ToString(),
                     ": ", ptr.status().message()));
  }
  live_[*ptr] = Block{size, stream, {}};
  stats_.allocated_bytes += static_cast<int64_t>(size);
  return ptr;
}

absl::StatusOr<void*> StreamOrderedAllocator::MallocLocked(size_t size) {
  absl::StatusOr<void*> ptr = runtime_->Malloc(size);
  // Out of memory: give back the idle cache, then also what waits for other
  // streams, trying again after each.
  if (!ptr.ok() && absl::IsResourceExhausted(ptr.status())) {
    ++stats_.oom_retries;
    FreeIdleLocked();
    ptr = runtime_->Malloc(size);
    if (!ptr.ok() && absl::IsResourceExhausted(ptr.status()) &&
        !pending_.empty()) {
      const absl::Status waited = FreeAllCachedLocked();
      if (!waited.ok()) return waited;
      ptr = runtime_->Malloc(size);
    }
  }
  if (!ptr.ok()) {
    return absl::Status(
        ptr.status().code(),
        absl::StrCat("out of memory with ", stats_.reserved_bytes,
                     " bytes held from the device and ", stats_.allocated_bytes,
                     " in use: ", ptr.status().message()));
  }
  ++stats_.device_mallocs;
  stats_.reserved_bytes += static_cast<int64_t>(size);
  stats_.peak_reserved_bytes =
      std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  return ptr;
}

void StreamOrderedAllocator::Deallocate(void* ptr, size_t /*bytes*/) {
  MutexLock lock(&mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    ++stats_.unknown_frees;
    return;
  }
  Block block = std::move(it->second);
  live_.erase(it);
  stats_.allocated_bytes -= static_cast<int64_t>(block.size);
  if (block.also_used_on.empty()) {
    pools_[block.stream].emplace(block.size, ptr);
    return;
  }
  Pending pending{ptr, std::move(block), {}};
  for (CudaStream other : pending.block.also_used_on) {
    absl::StatusOr<CudaEvent> event = runtime_->RecordEvent(other);
    if (!event.ok()) {
      // No way to know when `other` is done with the block: it must never
      // be handed out again, nor freed under a running kernel. It stays
      // counted as reserved.
      ReleaseEvents(pending.events);
      return;
    }
    pending.events.push_back(*event);
  }
  pending_.push_back(std::move(pending));
}

absl::Status StreamOrderedAllocator::RecordStream(void* ptr,
                                                  CudaStream stream) {
  MutexLock lock(&mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    return absl::NotFoundError(
        absl::StrFormat("RecordStream: %p is not a block handed out by the "
                        "allocator of %s",
                        ptr, device().ToString()));
  }
  Block& block = it->second;
  if (stream != block.stream &&
      std::find(block.also_used_on.begin(), block.also_used_on.end(), stream) ==
          block.also_used_on.end()) {
    block.also_used_on.push_back(stream);
  }
  return absl::OkStatus();
}

absl::Status StreamOrderedAllocator::ReclaimPendingLocked() {
  for (size_t i = 0; i < pending_.size();) {
    Pending& pending = pending_[i];
    bool done = true;
    for (CudaEvent event : pending.events) {
      absl::StatusOr<bool> event_done = runtime_->EventDone(event);
      if (!event_done.ok()) {
        return absl::Status(
            event_done.status().code(),
            absl::StrCat("waiting for other streams to finish with a freed "
                         "block on ",
                         device().ToString(), ": ",
                         event_done.status().message()));
      }
      if (!*event_done) {
        done = false;
        break;
      }
    }
    if (!done) {
      ++i;
      continue;
    }
    ReleaseEvents(pending.events);
    pools_[pending.block.stream].emplace(pending.block.size, pending.ptr);
    pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
  }
  return absl::OkStatus();
}

void StreamOrderedAllocator::FreeIdleLocked() {
  for (auto& [stream, pool] : pools_) {
    for (const auto& [size, ptr] : pool) {
      // A failing free means a broken context; the block is gone either way.
      runtime_->Free(ptr).IgnoreError();
      ++stats_.device_frees;
      stats_.reserved_bytes -= static_cast<int64_t>(size);
    }
  }
  pools_.clear();
}

absl::Status StreamOrderedAllocator::FreeAllCachedLocked() {
  absl::Status status;
  for (Pending& pending : pending_) {
    for (CudaEvent event : pending.events) {
      status.Update(runtime_->WaitEvent(event));
    }
    ReleaseEvents(pending.events);
    if (status.ok()) {
      pools_[pending.block.stream].emplace(pending.block.size, pending.ptr);
    }
  }
  pending_.clear();
  FreeIdleLocked();
  return status;
}

void StreamOrderedAllocator::ReleaseEvents(
    const std::vector<CudaEvent>& events) {
  for (CudaEvent event : events) runtime_->ReleaseEvent(event);
}

void StreamOrderedAllocator::EmptyCache() {
  MutexLock lock(&mu_);
  // An event error leaves the pending blocks where they are.
  ReclaimPendingLocked().IgnoreError();
  FreeIdleLocked();
}

StreamOrderedAllocator::Stats StreamOrderedAllocator::stats() const {
  MutexLock lock(&mu_);
  Stats stats = stats_;
  stats.pending_blocks = static_cast<int64_t>(pending_.size());
  return stats;
}

}  // namespace chunkzero
