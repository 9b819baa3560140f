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
// A device may have a memory limit (SetLimit): TryAdd then refuses what
// would take the device's total past it, with a ResourceExhausted that
// names the device, the category, the bytes asked for and the bytes held.
// Storage allocates through CheckRoom and TryAdd, so a limit caps everything a
// rank's storages hold on the device (--device_memory_limit of the train job),
// the way a GPU's memory caps what its allocator can hand out.
//
//   tracker.SetLimit(Device::Simulated(0), 1 << 30);
//   CZ_RETURN_IF_ERROR(tracker.TryAdd(Device::Simulated(0),
//                                     MemoryCategory::kParam, bytes));
//
// A device may also have a reclaimer (SetReclaimer): memory held there that
// its owner can give back on demand, e.g. parameter chunks resting on an
// accelerator that could rest in host memory instead. A request that would
// pass the limit first asks the reclaimer to free the shortfall, then
// checks again (MakeRoom, TryAdd), so what can move never stands in the way
// of what must be allocated.
//
// Thread-safe: all methods may be called concurrently. Peaks are exact: each
// update is applied and compared under one lock, and so is each limit check.
#ifndef CHUNKZERO_TENSOR_MEMORY_MEMORY_TRACKER_H_
#define CHUNKZERO_TENSOR_MEMORY_MEMORY_TRACKER_H_

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
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
  // Add counts the bytes whatever the limit (for memory that is already
  // held); TryAdd counts them only if the device's total stays within its
  // limit, and is ResourceExhausted otherwise (nothing counted), e.g.
  // "sim:0: cannot hold 4.00 MiB more of param: 14.00 MiB of its 16.00 MiB
  // device memory limit are held (param 8.00 MiB, activation 6.00 MiB)".
  void Add(Device device, MemoryCategory category, int64_t bytes);
  [[nodiscard]] absl::Status TryAdd(Device device, MemoryCategory category,
                                    int64_t bytes);
  // What TryAdd would return now, counting nothing: for a caller that
  // checks before it allocates and counts (TryAdd) once it holds the memory,
  // so that a failed allocation never shows in a peak.
  [[nodiscard]] absl::Status CheckRoom(Device device, MemoryCategory category,
                                       int64_t bytes) const;
  // CheckRoom, after asking the device's reclaimer for the shortfall if
  // there is one.
  [[nodiscard]] absl::Status MakeRoom(Device device, MemoryCategory category,
                                      int64_t bytes);

  // `reclaim(bytes)` frees about `bytes` held on `device` (more or less)
  // and returns what it freed. It runs on the requesting thread without
  // the tracker's lock, so it may move memory (Add and Subtract); a request
  // it makes itself on `device` is not reclaimed for again. One per device;
  // the owner clears it (ClearReclaimer) before it goes away.
  void SetReclaimer(Device device, std::function<int64_t(int64_t)> reclaim);
  void ClearReclaimer(Device device);
  void Subtract(Device device, MemoryCategory category, int64_t bytes);

  // Caps the bytes TryAdd lets `device` hold in all (>= 0). A limit below
  // what is held already refuses every TryAdd on the device until enough
  // is released; nothing held is taken away.
  void SetLimit(Device device, int64_t bytes);
  void ClearLimit(Device device);
  std::optional<int64_t> Limit(Device device) const;

  int64_t Current(Device device, MemoryCategory category) const;
  int64_t Peak(Device device, MemoryCategory category) const;
  // Sum over categories on one device; its peak is the peak of the sum.
  int64_t CurrentTotal(Device device) const;
  int64_t PeakTotal(Device device) const;
  // Sum over every device and category; its peak is the peak of the sum
  // (at most the sum of the devices' peaks: memory moving between devices
  // counts once).
  int64_t CurrentAll() const;
  int64_t PeakAll() const;

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

  void AddLocked(Device device, MemoryCategory category, int64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckRoomLocked(Device device, MemoryCategory category,
                               int64_t bytes) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks the device's reclaimer for what `bytes` more would take past the
  // limit. False when there is none, it is already running, or it freed
  // nothing.
  bool Reclaim(Device device, int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);

  mutable Mutex mu_;
  std::map<Device, DeviceUsage> usage_ ABSL_GUARDED_BY(mu_);
  std::map<Device, int64_t> limits_ ABSL_GUARDED_BY(mu_);
  std::map<Device, std::function<int64_t(int64_t)>> reclaimers_
      ABSL_GUARDED_BY(mu_);
  std::map<Device, bool> reclaiming_ ABSL_GUARDED_BY(mu_);
  MemoryUsage all_ ABSL_GUARDED_BY(mu_);
};

}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_MEMORY_MEMORY_TRACKER_H_
