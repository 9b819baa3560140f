// The one rule for packing tensors into chunks, used by ChunkManager (as
// tensors arrive), by the chunk-size search and by anyone who needs the
// layout in advance:
//
//   ChunkPacker packer(/*chunk_size=*/1000);
//   CZ_ASSIGN_OR_RETURN(PackedTensor a, packer.Add(600));  // chunk 0, @0
//   CZ_ASSIGN_OR_RETURN(PackedTensor b, packer.Add(500));  // chunk 1, @0
//   CZ_ASSIGN_OR_RETURN(ChunkPlan plan, PlanChunks({600, 500, 400}, 1000));
//   // plan.capacities == {1000, 1000}; the 400 joins the 500.
//
// With a chunk size, a tensor goes into the open (last) chunk if it fits in
// the elements left there; otherwise it opens a new chunk of chunk_size
// elements (the first tensor always opens one). A tensor never spans two
// chunks; one larger than the chunk size is an error. Without a chunk size
// (chunking off) every tensor opens a chunk of its own size, at least one
// element. Layouts may pad a chunk further (PaddedCapacity in
// chunk_layout.h); packing never uses the padding.
//
// Pure; a ChunkPacker is not thread-safe, PlanChunks is.
#ifndef CHUNKZERO_CHUNK_CHUNK_PACKING_H_
#define CHUNKZERO_CHUNK_CHUNK_PACKING_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace chunkzero {

// Where one tensor goes.
struct PackedTensor {
  int64_t chunk = 0;         // Index of its chunk.
  int64_t offset = 0;        // Its first element in the chunk.
  bool opens_chunk = false;  // True when it is the first of a new chunk.
};

// The chunks a sequence of tensors needs, and where each went.
struct ChunkPlan {
  std::vector<int64_t> capacities;    // Elements of each chunk, in order.
  std::vector<PackedTensor> tensors;  // One per tensor, in order.
  int64_t used_elements = 0;          // The tensors' elements together.
};

class ChunkPacker {
 public:
  // std::nullopt or 0 turns chunking off; a chunk size below 0 makes every
  // Add fail.
  explicit ChunkPacker(std::optional<int64_t> chunk_size);

  // Places the next tensor of `size` elements. InvalidArgument (naming the
  // tensor as "#i", its position) for a negative size, a size larger than
  // the chunk size, a chunk size below 0, or more elements in all than an
  // int64 counts; nothing is placed then.
  [[nodiscard]] absl::StatusOr<PackedTensor> Add(int64_t size);

  const ChunkPlan& plan() const { return plan_; }

 private:
  const std::optional<int64_t> chunk_size_;
  ChunkPlan plan_;
  int64_t used_in_open_chunk_ = 0;
};

// Packs `sizes` in order (as ChunkPacker::Add, one by one).
[[nodiscard]] absl::StatusOr<ChunkPlan> PlanChunks(
    absl::Span<const int64_t> sizes, std::optional<int64_t> chunk_size);

}  // namespace chunkzero

#endif  // CHUNKZERO_CHUNK_CHUNK_PACKING_H_
