// Choosing a chunk size for a list of tensor sizes.
//
//   ChunkSizeSearchOptions options;           // range and grid, in elements
//   absl::StatusOr<ChunkSizeReport> r =
//       SearchChunkSize({768 * 2304, 2304, 768 * 768, ...}, options);
//   r->best.chunk_size, r->best.utilisation, r->best.wasted_elements;
//   r->sorted_by_size.utilisation;            // what reordering would gain
//
// Tensors are packed by the rule ChunkManager packs by (chunk_packing.h): in
// the given (registration) order, each into the current chunk if it fits,
// else into a new chunk; a tensor never spans two chunks. Utilisation is the
// packed elements over the allocated elements (chunks × chunk size). The search
// tries every size from max(min_chunk_size, largest tensor) up to
// max_chunk_size in steps of `grid` (rounded up to `alignment`, e.g. the
// world size for the sharded layout) and keeps the best utilisation,
// preferring the smaller size on a tie (less memory in flight).
//
// The two alternatives show what a different order would buy; ChunkManager
// does not use them because first-use order is what makes prefetching and
// early release work:
//  - sorted_by_size: tensors sorted by decreasing size, then packed in order.
//  - small_together: tensors below `small_tensor_fraction` of the chunk size
//    are moved, in their order, behind the large ones.
// Both are searched over the same range and grid.
//
// Pure functions; thread-safe.
#ifndef CHUNKZERO_CHUNK_CHUNK_SIZE_SEARCH_H_
#define CHUNKZERO_CHUNK_CHUNK_SIZE_SEARCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace chunkzero {

struct ChunkSizeSearchOptions {
  int64_t min_chunk_size = 1 << 20;   // elements
  int64_t max_chunk_size = 64 << 20;  // elements
  int64_t grid = 1 << 20;             // step between candidates
  int64_t alignment = 1;              // candidates are multiples of this
  double small_tensor_fraction = 1.0 / 16;
};

// How one chunk size packs one tensor order.
struct ChunkPacking {
  int64_t chunk_size = 0;
  int64_t num_chunks = 0;
  int64_t used_elements = 0;
  int64_t wasted_elements = 0;  // num_chunks * chunk_size - used_elements
  double utilisation = 0;       // used / allocated; 1 for no tensors
};

struct ChunkSizeReport {
  ChunkPacking best;            // registration order
  ChunkPacking sorted_by_size;  // best over the grid, decreasing size order
  ChunkPacking small_together;  // best over the grid, small tensors last
  int64_t candidates_tried = 0;

  // A few human-readable lines, e.g. for the train tool's start-up log.
  std::string Summary() const;
};

// Packs `sizes` in order into chunks of `chunk_size` elements.
// InvalidArgument if a size is negative, or larger than the chunk (naming
// its index and size), or chunk_size < 1, or the chunks together hold more
// elements than an int64 counts.
[[nodiscard]] absl::StatusOr<ChunkPacking> PackInOrder(
    absl::Span<const int64_t> sizes, int64_t chunk_size);

// Searches the grid. InvalidArgument for an empty or inverted range, a grid
// or alignment below 1, negative sizes, or a grid of more than 2^20
// candidates. Sizes up to the int64 maximum never overflow.
[[nodiscard]] absl::StatusOr<ChunkSizeReport> SearchChunkSize(
    absl::Span<const int64_t> sizes, const ChunkSizeSearchOptions& options);

}  // namespace chunkzero

#endif  // CHUNKZERO_CHUNK_CHUNK_SIZE_SEARCH_H_
