// How much memory this process can still allocate, for checks made before
// a large job starts (rather than failing half-way with std::bad_alloc or
// the kernel's OOM killer).
//
//   CZ_ASSIGN_OR_RETURN(int64_t available, AvailableMemoryBytes());
//   if (needed > available) return absl::ResourceExhaustedError(...);
//
// Thread-safety: reads files; safe from any thread.
#ifndef CHUNKZERO_BASE_SYSTEM_MEMORY_H_
#define CHUNKZERO_BASE_SYSTEM_MEMORY_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace chunkzero {

// The smaller of the kernel's MemAvailable (/proc/meminfo: free memory plus
// what caches would give back) and the room left under this process's
// cgroup memory limit, where one is set (cgroup v2 memory.max minus
// memory.current). Unavailable if /proc/meminfo cannot be read.
[[nodiscard]] absl::StatusOr<int64_t> AvailableMemoryBytes();

// "1.50 GiB", "512 B": bytes in binary units, for messages.
std::string FormatBytes(double bytes);

}  // namespace chunkzero

#endif  // CHUNKZERO_BASE_SYSTEM_MEMORY_H_
