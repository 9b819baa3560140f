// Exact accounting of live and peak bytes, per device and per category.
//
//   MemoryTracker tracker;
//   tracker.Add(Device::Cpu(), MemoryCategory::kParam, 4096);
//   tracker.Subtract(Device::Cpu(), MemoryCategory::kParam, 4096);
//   tracker.Peak(Device::Cpu(), MemoryCategory::kParam);   // 4096
//
// Every Storage reports its allocations and frees to the tracker it was
// created with; one tracker per rank gives per-rank figures even when all
// ranks are threads of one process. Counts are of requested bytes, not of
// whatever an allocator rounds them up to, so tests can check exact figures.
//
// Thread-safe: all methods may be called concurrently. Peaks are exact: each
// update is applied and compared under one lock.
#ifndef CHUNKZERO_TENSOR_MEMORY_TRACKER_H_
#define CHUNKZERO_TENSOR_MEMORY_TRACKER_H_

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "base/mutex.h"
#include "tensor/device.h"

namespace chunkzero {

// What a block of memory holds. The names are the keys of the train tool's
// `peak_bytes` report.
enum class MemoryCategory : uint8_t {
  kParam = 0,       // fp16/bf16 (or f32) parameter chunks; grads reuse them.
  kMaster = 1,      // fp32 master parameters.
  kOptimState = 2,  // optimizer states (Adam m and v, momentum).
  kGradAccum = 3,   // fp32 gradient-accumulation buffers.
  kComm = 4,        // communication staging buffers.
  kActivation = 5,  // model activations and workspaces.
  kOther = 6,
};
inline constexpr int kNumMemoryCategories = 7;

// "param", "master", "optim_state", "grad_accum", "comm", "activation",
// "other".
absl::string_view MemoryCategoryName(MemoryCategory category);

// Live and peak bytes of one (device, category) pair or one device's total.
struct MemoryUsage {
  int64_t current = 0;
  int64_t peak = 0;
};

class MemoryTracker {
 public:
  MemoryTracker() = default;
  MemoryTracker(const MemoryTracker&) = delete;
  MemoryTracker& operator=(const MemoryTracker&) = delete;

  // Records `bytes` newly allocated (Add) or released (Subtract).
  // REQUIRES: Subtract never takes a pair below zero (a CHECK-level bug).
  void Add(Device device, MemoryCategory category, int64_t bytes);
  void Subtract(Device device, MemoryCategory category, int64_t bytes);

  int64_t Current(Device device, MemoryCategory category) const;
  int64_t Peak(Device device, MemoryCategory category) const;
  // Sum over categories on one device; its peak is the peak of the sum.
  int64_t CurrentTotal(Device device) const;
  int64_t PeakTotal(Device device) const;

  // Everything at once, for reports. Devices never touched are absent.
  struct Snapshot {
    std::map<Device, std::array<MemoryUsage, kNumMemoryCategories>> by_category;
    std::map<Device, MemoryUsage> total;
  };
  Snapshot Snap() const;

  // Sets every peak to the current value (start of a new measurement window).
  void ResetPeaks();

 private:
  struct DeviceUsage {
    std::array<MemoryUsage, kNumMemoryCategories> by_category;
    MemoryUsage total;
  };

  mutable Mutex mu_;
  std::map<Device, DeviceUsage> usage_ ABSL_GUARDED_BY(mu_);
};

}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_MEMORY_TRACKER_H_
