// What both IoEngines share (io_engine.h): checking requests, splitting
// them into pieces, the error of a piece that failed or came short, and
// the batches' bookkeeping. Internal to io/nvme.
#ifndef CHUNKZERO_IO_NVME_IO_PIECES_H_
#define CHUNKZERO_IO_NVME_IO_PIECES_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "io/nvme/io_engine.h"

namespace chunkzero {
namespace io_internal {

struct Piece {
  IoKind kind = IoKind::kRead;
  int fd = -1;
  int64_t offset = 0;
  char* buffer = nullptr;
  size_t bytes = 0;
  const std::string* what = nullptr;
  int64_t batch = -1;
};

// InvalidArgument unless the request has a descriptor, a buffer (when it
// moves bytes) and an offset, address and length that direct I/O takes.
[[nodiscard]] absl::Status CheckRequest(const IoRequest& request);

// The requests cut into pieces of at most kIoPieceBytes, in order.
std::vector<Piece> Split(const std::vector<IoRequest>& requests, int64_t batch);

// The error of `piece` whose transfer returned `result` (bytes moved, or
// -errno); OK when it moved all its bytes.
[[nodiscard]] absl::Status PieceStatus(const Piece& piece, int64_t result);

// The batches in flight: their pieces (at stable addresses, for the
// kernel's user data), how many are outstanding, and the first error.
// Not thread-safe: the engines lock around it.
class Batches {
 public:
  // Registers the pieces of a new batch; returns its id and the pieces.
  std::pair<int64_t, std::vector<Piece>*> Add(std::vector<Piece> pieces,
                                              int64_t id);
  bool Has(int64_t id) const { return batches_.count(id) != 0; }
  // The batches not yet taken.
  std::vector<int64_t> Ids() const;
  // One piece of `id` done with `status`.
  void Done(int64_t id, const absl::Status& status);
  // Pieces of `id` that were never started (a failed submission): done
  // with `status`.
  void Abandon(int64_t id, int pieces, const absl::Status& status);
  int Outstanding(int64_t id) const;
  // Forgets `id`, returning its first error.
  absl::Status Take(int64_t id);

 private:
  struct Batch {
    std::vector<Piece> pieces;
    int outstanding = 0;
    absl::Status first_error;
  };
  std::map<int64_t, std::unique_ptr<Batch>> batches_;
};

// The engines MakeIoEngine chooses between: io_uring with a ring of
// `depth` entries (the kernel's refusal as FailedPrecondition), and
// `threads` threads doing pread/pwrite.
[[nodiscard]] absl::StatusOr<std::unique_ptr<IoEngine>> MakeUringIoEngine(
    int depth);
[[nodiscard]] absl::StatusOr<std::unique_ptr<IoEngine>> MakeThreadIoEngine(
    int threads);

}  // namespace io_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_IO_NVME_IO_PIECES_H_
