#include "io/nvme/io_engine.h"

#include <memory>
#include <utility>

#include "io/nvme/io_pieces.h"

namespace chunkzero {
namespace {

// Requests in flight on one ring: 64 pieces of 1 MiB keep an NVMe drive's
// queues busy without pinning much kernel memory.
constexpr int kRingDepth = 64;
// Threads of the fallback: a few blocking transfers at a time.
constexpr int kIoThreads = 4;

}  // namespace

absl::StatusOr<std::unique_ptr<IoEngine>> MakeIoEngine(IoEngineKind kind) {
  if (kind == IoEngineKind::kThreads) {
    return io_internal::MakeThreadIoEngine(kIoThreads);
  }
  absl::StatusOr<std::unique_ptr<IoEngine>> uring =
      io_internal::MakeUringIoEngine(kRingDepth);
  if (uring.ok() || kind == IoEngineKind::kUring) return uring;
  absl::StatusOr<std::unique_ptr<IoEngine>> threads =
      io_internal::MakeThreadIoEngine(kIoThreads);
  if (threads.ok()) {
    (*threads)->fallback_reason_ = std::string(uring.status().message());
  }
  return threads;
}

}  // namespace chunkzero
