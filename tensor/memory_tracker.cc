#include "tensor/memory_tracker.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>

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
  DeviceUsage& usage = usage_[device];
  MemoryUsage& cat = usage.by_category[static_cast<int>(category)];
  cat.current += bytes;
  cat.peak = std::max(cat.peak, cat.current);
  usage.total.current += bytes;
  usage.total.peak = std::max(usage.total.peak, usage.total.current);
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

MemoryTracker::Snapshot MemoryTracker::Snap() const {
  MutexLock lock(&mu_);
  Snapshot snapshot;
  for (const auto& [device, usage] : usage_) {
    snapshot.by_category[device] = usage.by_category;
    snapshot.total[device] = usage.total;
  }
  return snapshot;
}

void MemoryTracker::ResetPeaks() {
  MutexLock lock(&mu_);
  for (auto& [device, usage] : usage_) {
    for (MemoryUsage& cat : usage.by_category) cat.peak = cat.current;
    usage.total.peak = usage.total.current;
  }
}

}  // namespace chunkzero
