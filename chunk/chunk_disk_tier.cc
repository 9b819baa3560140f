#include "chunk/chunk_disk_tier.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_macros.h"

namespace chunkzero {

absl::StatusOr<std::unique_ptr<ChunkDiskTier>> ChunkDiskTier::Create(
    const std::string& dir, IoEngineKind kind) {
  CZ_ASSIGN_OR_RETURN(std::unique_ptr<ScratchFile> file,
                      ScratchFile::Create(dir, 0));
  CZ_ASSIGN_OR_RETURN(std::unique_ptr<IoEngine> engine, MakeIoEngine(kind));
  return std::unique_ptr<ChunkDiskTier>(
      new ChunkDiskTier(std::move(file), std::move(engine)));
}

absl::StatusOr<DiskRegion> ChunkDiskTier::Reserve(int64_t bytes) {
  DiskRegion region;
  region.bytes = RoundUpToDirectIo(bytes);
  CZ_ASSIGN_OR_RETURN(region.offset, file_->Grow(region.bytes));
  return region;
}

ChunkDiskTier::~ChunkDiskTier() { set_memory_tracker(nullptr); }

void ChunkDiskTier::set_memory_tracker(MemoryTracker* tracker) {
  const auto held = static_cast<int64_t>(bounce_.size());
  if (tracker_ != nullptr) {
    tracker_->Subtract(Device::Cpu(), MemoryCategory::kOther, held);
  }
  tracker_ = tracker;
  if (tracker_ != nullptr) {
    tracker_->Add(Device::Cpu(), MemoryCategory::kOther, held);
  }
}

absl::Status ChunkDiskTier::EnsureBounce(size_t bytes) {
  if (bounce_.size() >= bytes) return absl::OkStatus();
  const auto had = static_cast<int64_t>(bounce_.size());
  bounce_ = AlignedBuffer();
  if (tracker_ != nullptr) {
    tracker_->Subtract(Device::Cpu(), MemoryCategory::kOther, had);
  }
  CZ_ASSIGN_OR_RETURN(bounce_, AlignedBuffer::Create(bytes));
  if (tracker_ != nullptr) {
    tracker_->Add(Device::Cpu(), MemoryCategory::kOther,
                  static_cast<int64_t>(bounce_.size()));
  }
  return absl::OkStatus();
}

absl::StatusOr<IoBatch> ChunkDiskTier::Start(IoKind kind,
                                             const DiskRegion& region,
                                             int64_t offset, int64_t bytes,
                                             const AlignedBuffer& buffer,
                                             const std::string* what) {
  if (!region.valid() || offset < 0 || bytes < 0 ||
      offset + bytes > region.bytes ||
      buffer.size() < static_cast<size_t>(bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what != nullptr ? *what : "a region", ": ", bytes, " bytes at ", offset,
        " of a region of ", region.bytes, " at ", region.offset,
        " through a buffer of ", buffer.size()));
  }
  CZ_ASSIGN_OR_RETURN(
      IoBatch batch,
      engine_->Submit({{kind, file_->fd(), region.offset + offset,
                        buffer.data(), static_cast<size_t>(bytes), what}}));
  (kind == IoKind::kRead ? stats_.bytes_read : stats_.bytes_written) += bytes;
  return batch;
}

absl::StatusOr<IoBatch> ChunkDiskTier::StartRead(const DiskRegion& region,
                                                 int64_t offset, int64_t bytes,
                                                 const AlignedBuffer& buffer,
                                                 const std::string* what) {
  return Start(IoKind::kRead, region, offset, bytes, buffer, what);
}

absl::StatusOr<IoBatch> ChunkDiskTier::StartWrite(const DiskRegion& region,
                                                  int64_t offset, int64_t bytes,
                                                  const AlignedBuffer& buffer,
                                                  const std::string* what) {
  return Start(IoKind::kWrite, region, offset, bytes, buffer, what);
}

absl::Status ChunkDiskTier::Wait(IoBatch batch) {
  const absl::Time start = absl::Now();
  absl::Status status = engine_->Wait(batch);
  stats_.seconds_waited += absl::ToDoubleSeconds(absl::Now() - start);
  return status;
}

absl::Status ChunkDiskTier::Transfer(IoKind kind, const DiskRegion& region,
                                     char* host, size_t bytes,
                                     const std::string& what) {
  if (bytes > static_cast<size_t>(region.bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", bytes, " bytes for a region of ", region.bytes));
  }
  CZ_RETURN_IF_ERROR(EnsureBounce(
      static_cast<size_t>(std::min<int64_t>(region.bytes, kBounceBytes))));
  for (int64_t at = 0; at < region.bytes; at += kBounceBytes) {
    const int64_t span = std::min<int64_t>(kBounceBytes, region.bytes - at);
    // The part of the span the caller's bytes cover; the rest is padding.
    const int64_t mine =
        std::clamp<int64_t>(static_cast<int64_t>(bytes) - at, 0, span);
    if (kind == IoKind::kWrite) {
      std::memcpy(bounce_.data(), host + at, static_cast<size_t>(mine));
      std::memset(bounce_.data() + mine, 0, static_cast<size_t>(span - mine));
    }
    // The caller waits from the submission on (Wait counts the rest).
    const absl::Time submitted = absl::Now();
    CZ_ASSIGN_OR_RETURN(IoBatch batch,
                        Start(kind, region, at, span, bounce_, &what));
    stats_.seconds_waited += absl::ToDoubleSeconds(absl::Now() - submitted);
    CZ_RETURN_IF_ERROR(Wait(batch));
    if (kind == IoKind::kRead) {
      std::memcpy(host + at, bounce_.data(), static_cast<size_t>(mine));
    }
  }
  return absl::OkStatus();
}

absl::Status ChunkDiskTier::Write(const DiskRegion& region, const void* src,
                                  size_t bytes, const std::string& what) {
  return Transfer(IoKind::kWrite, region,
                  const_cast<char*>(static_cast<const char*>(src)), bytes,
                  what);
}

absl::Status ChunkDiskTier::Read(const DiskRegion& region, void* dst,
                                 size_t bytes, const std::string& what) {
  return Transfer(IoKind::kRead, region, static_cast<char*>(dst), bytes, what);
}

}  // namespace chunkzero
