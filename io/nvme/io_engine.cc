#include "io/nvme/io_engine.h"

#include <memory>
#include <utility>

#include "io/nvme/io_pieces.h"

namespace chunkzero {
namespace {

// Requests in flight on one ring: room for a chunk's reads and the previous
// chunk's writes at once (a 48 MiB master, exp_avg and exp_avg_sq each way
// is 288 pieces of 1 MiB), so that submitting them never waits for the disk
// on the thread that computes. An entry is 64 bytes of kernel memory.
constexpr int kRingDepth = 512;
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
