#include "tensor/memory/memory_tracker.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/system_memory.h"

namespace chunkzero {

absl::string_view MemoryCategoryName(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::kParam:
      return "param";
    case MemoryCategory::kMaster:
      return "master";
    case MemoryCategory::kOptimState:
      return "optim_state";
    case MemoryCategory::kGradAccum:
      return "grad_accum";
    case MemoryCategory::kComm:
      return "comm";
    case MemoryCategory::kActivation:
      return "activation";
    case MemoryCategory::kOther:
      return "other";
  }
  return "invalid";
}

void MemoryTracker::Add(Device device, MemoryCategory category, int64_t bytes) {
  MutexLock lock(&mu_);
  AddLocked(device, category, bytes);
}

absl::Status MemoryTracker::TryAdd(Device device, MemoryCategory category,
                                   int64_t bytes) {
  for (int attempt = 0;; ++attempt) {
    {
      MutexLock lock(&mu_);
      absl::Status room = CheckRoomLocked(device, category, bytes);
      if (room.ok()) AddLocked(device, category, bytes);
      if (room.ok() || attempt > 0 || bytes < 0) return room;
    }
    if (!Reclaim(device, bytes)) return CheckRoom(device, category, bytes);
  }
}

absl::Status MemoryTracker::MakeRoom(Device device, MemoryCategory category,
                                     int64_t bytes) {
  absl::Status room = CheckRoom(device, category, bytes);
  if (room.ok() || bytes < 0 || !Reclaim(device, bytes)) return room;
  return CheckRoom(device, category, bytes);
}

void MemoryTracker::SetReclaimer(Device device,
                                 std::function<int64_t(int64_t)> reclaim) {
  MutexLock lock(&mu_);
  reclaimers_[device] = std::move(reclaim);
}

void MemoryTracker::ClearReclaimer(Device device) {
  MutexLock lock(&mu_);
  reclaimers_.erase(device);
}

bool MemoryTracker::Reclaim(Device device, int64_t bytes) {
  std::function<int64_t(int64_t)> reclaim;
  int64_t shortfall = 0;
  {
    MutexLock lock(&mu_);
    auto found = reclaimers_.find(device);
    const auto limit = limits_.find(device);
    if (found == reclaimers_.end() || limit == limits_.end() ||
        reclaiming_[device]) {
      return false;
    }
    reclaim = found->second;
    const auto usage = usage_.find(device);
    const int64_t held =
        usage == usage_.end() ? 0 : usage->second.total.current;
    // held + bytes - limit, saturating: a request may be absurdly large.
    const int64_t room = limit->second - held;  // May be negative.
    shortfall = room < 0 && bytes > std::numeric_limits<int64_t>::max() + room
                    ? std::numeric_limits<int64_t>::max()
                    : bytes - room;
    if (shortfall <= 0) return true;  // Room appeared meanwhile.
    reclaiming_[device] = true;
  }
  const int64_t freed = reclaim(shortfall);
  MutexLock lock(&mu_);
  reclaiming_[device] = false;
  return freed > 0;
}

absl::Status MemoryTracker::CheckRoom(Device device, MemoryCategory category,
                                      int64_t bytes) const {
  MutexLock lock(&mu_);
  return CheckRoomLocked(device, category, bytes);
}

absl::Status MemoryTracker::CheckRoomLocked(Device device,
                                            MemoryCategory category,
                                            int64_t bytes) const {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(device.ToString(), ": cannot hold ", bytes, " bytes of ",
                     MemoryCategoryName(category)));
  }
  const auto limit = limits_.find(device);
  if (limit == limits_.end()) return absl::OkStatus();
  const auto found = usage_.find(device);
  const DeviceUsage usage =
      found == usage_.end() ? DeviceUsage{} : found->second;
  const int64_t held = usage.total.current;
  // held <= limit is not guaranteed (SetLimit may come after Add), so
  // compare without subtracting from the limit.
  if (bytes <= limit->second && held <= limit->second - bytes) {
    return absl::OkStatus();
  }
  std::vector<std::string> parts;
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    const int64_t current = usage.by_category[c].current;
    if (current == 0) continue;
    parts.push_back(
        absl::StrCat(MemoryCategoryName(static_cast<MemoryCategory>(c)), " ",
                     FormatBytes(static_cast<double>(current))));
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      device.ToString(), ": cannot hold ",
      FormatBytes(static_cast<double>(bytes)), " more of ",
      MemoryCategoryName(category), ": ",
      FormatBytes(static_cast<double>(held)), " of its ",
      FormatBytes(static_cast<double>(limit->second)),
      device.type() == DeviceType::kCpu ? " host" : " device",
      " memory limit are held",
      parts.empty() ? ""
                    : absl::StrCat(" (", absl::StrJoin(parts, ", "), ")")));
}

void MemoryTracker::AddLocked(Device device, MemoryCategory category,
                              int64_t bytes) {
  DeviceUsage& usage = usage_[device];
  MemoryUsage& cat = usage.by_category[static_cast<int>(category)];
  cat.current += bytes;
  cat.peak = std::max(cat.peak, cat.current);
  usage.total.current += bytes;
  usage.total.peak = std::max(usage.total.peak, usage.total.current);
  all_.current += bytes;
  all_.peak = std::max(all_.peak, all_.current);
}

void MemoryTracker::Subtract(Device device, MemoryCategory category,
                             int64_t bytes) {
  MutexLock lock(&mu_);
  DeviceUsage& usage = usage_[device];
  MemoryUsage& cat = usage.by_category[static_cast<int>(category)];
  if (cat.current < bytes) {
    // Freeing more than was added is a bug in the caller, not bad input.
    std::cerr << "MemoryTracker: freeing " << bytes << " bytes of "
              << MemoryCategoryName(category) << " on " << device
              << " but only " << cat.current << " are live\n";
    std::abort();
  }
  cat.current -= bytes;
  usage.total.current -= bytes;
  all_.current -= bytes;
}

int64_t MemoryTracker::Current(Device device, MemoryCategory category) const {
  MutexLock lock(&mu_);
  auto it = usage_.find(device);
  return it == usage_.end()
             ? 0
             : it->second.by_category[static_cast<int>(category)].current;
}

int64_t MemoryTracker::Peak(Device device, MemoryCategory category) const {
  MutexLock lock(&mu_);
  auto it = usage_.find(device);
  return it == usage_.end()
             ? 0
             : it->second.by_category[static_cast<int>(category)].peak;
}

int64_t MemoryTracker::CurrentTotal(Device device) const {
  MutexLock lock(&mu_);
  auto it = usage_.find(device);
  return it == usage_.end() ? 0 : it->second.total.current;
}

int64_t MemoryTracker::PeakTotal(Device device) const {
  MutexLock lock(&mu_);
  auto it = usage_.find(device);
  return it == usage_.end() ? 0 : it->second.total.peak;
}

int64_t MemoryTracker::CurrentAll() const {
  MutexLock lock(&mu_);
  return all_.current;
}

int64_t MemoryTracker::PeakAll() const {
  MutexLock lock(&mu_);
  return all_.peak;
}

MemoryTracker::Snapshot MemoryTracker::Snap() const {
  MutexLock lock(&mu_);
  Snapshot snapshot;
  for (const auto& [device, usage] : usage_) {
    snapshot.by_category[device] = usage.by_category;
    snapshot.total[device] = usage.total;
  }
  return snapshot;
}

void MemoryTracker::SetLimit(Device device, int64_t bytes) {
  MutexLock lock(&mu_);
  limits_[device] = std::max<int64_t>(bytes, 0);
}

void MemoryTracker::ClearLimit(Device device) {
  MutexLock lock(&mu_);
  limits_.erase(device);
}

std::optional<int64_t> MemoryTracker::Limit(Device device) const {
  MutexLock lock(&mu_);
  const auto it = limits_.find(device);
  if (it == limits_.end()) return std::nullopt;
  return it->second;
}

void MemoryTracker::ResetPeaks() {
  MutexLock lock(&mu_);
  for (auto& [device, usage] : usage_) {
    for (MemoryUsage& cat : usage.by_category) cat.peak = cat.current;
    usage.total.peak = usage.total.current;
  }
  all_.peak = all_.current;
}

}  // namespace chunkzero
