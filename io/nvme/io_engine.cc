#include "io/nvme/io_engine.h"

#include <memory>
#include <utility>

#include "io/nvme/io_pieces.h"

namespace chunkzero {
namespace {

// Threads of the fallback: a few blocking transfers at a time.
constexpr int kIoThreads = 4;

}  // namespace

absl::StatusOr<std::unique_ptr<IoEngine>> MakeIoEngine(IoEngineKind kind,
                                                       int ring_depth) {
  if (kind == IoEngineKind::kThreads) {
    return io_internal::MakeThreadIoEngine(kIoThreads);
  }
  absl::StatusOr<std::unique_ptr<IoEngine>> uring =
      io_internal::MakeUringIoEngine(ring_depth);
  if (uring.ok() || kind == IoEngineKind::kUring) return uring;
  absl::StatusOr<std::unique_ptr<IoEngine>> threads =
      io_internal::MakeThreadIoEngine(kIoThreads);
  if (threads.ok()) {
    (*threads)->fallback_reason_ = std::string(uring.status().message());
  }
  return threads;
}

}  // namespace chunkzero
