// HostRange: a range of a chunk's payload at rest through a host pointer,
// for the optimizer's update and its state I/O; and CommonGpu, which tells
// when the update can run on the GPU itself (internal to optim/).
#ifndef CHUNKZERO_OPTIM_INTERNAL_HOST_RANGE_H_
#define CHUNKZERO_OPTIM_INTERNAL_HOST_RANGE_H_

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "chunk/chunk.h"
#include "tensor/device.h"
#include "tensor/memory/allocator.h"

namespace chunkzero {
namespace optim_internal {

// Element `begin` (an index into the full chunk, inside this rank's
// shard) of a chunk's payload at rest, wherever it is.
inline char* PayloadAt(Chunk* chunk, int64_t begin) {
  Tensor held = chunk->ShardStorageView();
  return static_cast<char*>(held.raw_data()) +
         (begin - chunk->shard_begin()) * ElementSize(chunk->dtype());
}

// Where that payload is now: where the chunk rests, which may be the host
// while it computes on a device (parameter offload), or its device while
// a holder's buffer is there for a use.
inline Device PayloadDevice(const Chunk* chunk) {
  return chunk->ShardStorageView().device();
}

// The GPU every chunk rests on, if they all rest on one (null entries are
// skipped); nullopt when any rests elsewhere.
inline std::optional<Device> CommonGpu(
    std::initializer_list<const Chunk*> chunks) {
  std::optional<Device> gpu;
  for (const Chunk* chunk : chunks) {
    if (chunk == nullptr) continue;
    const Device d = chunk->device();
    if (d.type() != DeviceType::kCuda || (gpu.has_value() && *gpu != d)) {
      return std::nullopt;
    }
    gpu = d;
  }
  return gpu;
}

// A range of a chunk's payload at rest, readable and writable through a
// host pointer: the payload itself on host-accessible devices, else a host
// copy that Finish() writes back.
class HostRange {
 public:
  static absl::StatusOr<HostRange> Open(Chunk* chunk, int64_t begin,
                                        int64_t end) {
    HostRange r;
    r.chunk_ = chunk;
    r.bytes_ = static_cast<size_t>(end - begin) * ElementSize(chunk->dtype());
    // A parameter payload the host tier keeps between uses comes back into
    // memory, where the chunk's allocator counts it (and the residency may
    // send it out again later, written since it is then marked changed).
    if (chunk->keeps_payload_between_uses()) {
      CZ_RETURN_IF_ERROR(chunk->LoadPayload());
      // Kept in memory while this range points into it.
      r.pinned_ = chunk;
      chunk->PinPayload();
    }
    if (chunk->payload_on_disk()) {
      // The whole payload read from disk; Finish writes it all back.
      r.copy_.resize(static_cast<size_t>(chunk->rest_payload_bytes()));
      r.disk_offset_ = static_cast<size_t>(begin - chunk->shard_begin()) *
                       ElementSize(chunk->dtype());
      CZ_RETURN_IF_ERROR(chunk->ReadRestPayload(r.copy_.data()));
      return r;
    }
    r.device_pointer_ = PayloadAt(chunk, begin);
    r.device_ = PayloadDevice(chunk);
    if (r.device_.is_host_accessible()) return r;
    r.copy_.resize(r.bytes_);
    CZ_RETURN_IF_ERROR(CopyBytes(r.get(), Device::Cpu(), r.device_pointer_,
                                 r.device_, r.bytes_),
                       "staging chunk ", chunk->name(), " in host memory");
    return r;
  }
  HostRange(HostRange&& other) noexcept { *this = std::move(other); }
  HostRange& operator=(HostRange&& other) noexcept {
    if (this != &other) {
      Unpin();
      chunk_ = other.chunk_;
      device_pointer_ = other.device_pointer_;
      device_ = other.device_;
      bytes_ = other.bytes_;
      copy_ = std::move(other.copy_);
      disk_offset_ = other.disk_offset_;
      pinned_ = std::exchange(other.pinned_, nullptr);
    }
    return *this;
  }
  HostRange(const HostRange&) = delete;
  HostRange& operator=(const HostRange&) = delete;
  ~HostRange() { Unpin(); }

  // The staged copy lives in copy_, so the pointer is recomputed (a moved
  // HostRange stays valid).
  void* get() const {
    return copy_.empty() ? static_cast<void*>(device_pointer_)
                         : static_cast<void*>(copy_.data() + disk_offset_);
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(get());
  }
  // Writes a staged copy back to the device.
  absl::Status Finish() {
    if (copy_.empty()) return absl::OkStatus();
    if (chunk_->payload_on_disk()) {
      return chunk_->disk_tier()->Write(chunk_->disk_region(), copy_.data(),
                                        copy_.size(),
                                        absl::StrCat("chunk ", chunk_->name()));
    }
    CZ_RETURN_IF_ERROR(
        CopyBytes(device_pointer_, device_, get(), Device::Cpu(), bytes_),
        "writing chunk ", chunk_->name(), " back from host");
    return absl::OkStatus();
  }

 private:
  HostRange() = default;
  void Unpin() {
    if (pinned_ != nullptr) std::exchange(pinned_, nullptr)->UnpinPayload();
  }

  Chunk* chunk_ = nullptr;
  Chunk* pinned_ = nullptr;  // A payload kept in memory for this range.
  char* device_pointer_ = nullptr;
  Device device_ = Device::Cpu();  // Where device_pointer_ points.
  size_t bytes_ = 0;
  // Host copy of a non-host payload, or of a whole payload on disk (the
  // range then starts disk_offset_ bytes in).
  mutable std::vector<char> copy_;
  size_t disk_offset_ = 0;
};

}  // namespace optim_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_OPTIM_INTERNAL_HOST_RANGE_H_
