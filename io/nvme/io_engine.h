// IoEngine: asynchronous reads and writes of a ScratchFile at offsets, the
// NVMe tier's only way to its disk. A batch of requests is submitted at
// once and waited for later, so that the disk works while the optimizer
// computes.
//
//   CZ_ASSIGN_OR_RETURN(std::unique_ptr<IoEngine> io,
//                       MakeIoEngine(IoEngineKind::kAuto));
//   CZ_ASSIGN_OR_RETURN(IoBatch batch,
//                       io->Submit({{IoKind::kRead, file.fd(), offset,
//                                    buf.data(), bytes, &what}}));
//   ... compute ...
//   CZ_RETURN_IF_ERROR(io->Wait(batch));
//
// Two engines: io_uring (liburing: one ring per engine, requests split into
// pieces of at most kIoPieceBytes so that several are in flight), and a
// pool of threads doing pread/pwrite, where the kernel or a container's
// seccomp profile refuses io_uring. kAuto takes io_uring when a ring can be
// made and says why not otherwise (fallback_reason()).
//
// Buffers, offsets and lengths must suit direct I/O (aligned_buffer.h). A
// request's memory belongs to the engine until its batch is waited for.
// A transfer that comes short (a read past the end of the file, a write
// the disk took only in part) is an error, DataLoss for reads and
// ResourceExhausted for writes, naming the request's `what`, the offset
// and both byte counts; others carry errno's text. Wait returns the
// batch's first error after every piece of it has finished (no buffer is
// still being written when it returns).
//
// Thread-safety: one thread submits and waits (a rank's); the engine's own
// threads are internal.
#ifndef CHUNKZERO_IO_NVME_IO_ENGINE_H_
#define CHUNKZERO_IO_NVME_IO_ENGINE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace chunkzero {

enum class IoKind { kRead, kWrite };

struct IoRequest {
  IoKind kind = IoKind::kRead;
  int fd = -1;
  int64_t offset = 0;
  void* buffer = nullptr;
  size_t bytes = 0;
  // What the bytes are, for messages ("chunk 3's masters in a scratch file
  // in /mnt/nvme"); must outlive the batch.
  const std::string* what = nullptr;
};

// The largest piece one request is split into.
inline constexpr size_t kIoPieceBytes = size_t{1} << 20;

enum class IoEngineKind { kAuto, kUring, kThreads };

// Pieces io_uring has in flight at most: a chunk's reads and the previous
// chunk's writes (a 48 MiB master, exp_avg and exp_avg_sq each way is 288
// pieces) go to the kernel without waiting on the thread that computes;
// an entry is 64 bytes of kernel memory.
inline constexpr int kDefaultRingDepth = 512;

class IoEngine;
// An engine of `kind`. kUring fails (with the kernel's reason) where
// io_uring is refused; kAuto then falls back to threads. `ring_depth`:
// io_uring's pieces in flight (tests make it small).
[[nodiscard]] absl::StatusOr<std::unique_ptr<IoEngine>> MakeIoEngine(
    IoEngineKind kind, int ring_depth = kDefaultRingDepth);

// A submitted batch, to wait for.
struct IoBatch {
  int64_t id = -1;
};

class IoEngine {
 public:
  virtual ~IoEngine() = default;
  // "io_uring" or "pread/pwrite threads".
  virtual absl::string_view name() const = 0;
  // InvalidArgument for a request that does not suit direct I/O or has no
  // descriptor; errors starting the transfers otherwise.
  [[nodiscard]] virtual absl::StatusOr<IoBatch> Submit(
      const std::vector<IoRequest>& requests) = 0;
  // Waits for every piece of `batch`; its first error. NotFound for a batch
  // this engine did not submit or already waited for.
  [[nodiscard]] virtual absl::Status Wait(IoBatch batch) = 0;
  // Seconds during which at least one of this engine's pieces was in
  // flight, since it was made (BusyClock): the disk's time, waited for or
  // not. The threads time each piece as it finishes; io_uring times each
  // completion as the ring posts it (an eventfd's watcher; where the
  // kernel refuses one, as it is reaped at the next Submit or Wait).
  virtual double busy_seconds() const = 0;
  // Why kAuto did not get io_uring, or "".
  const std::string& fallback_reason() const { return fallback_reason_; }

 private:
  friend absl::StatusOr<std::unique_ptr<IoEngine>> MakeIoEngine(
      IoEngineKind kind, int ring_depth);
  std::string fallback_reason_;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_IO_NVME_IO_ENGINE_H_
