// How a chunk's payload is spread over the ranks (docs/DESIGN.md §4).
//
//   absl::StatusOr<ChunkLayout> l = ParseChunkLayout("sharded");
//   ChunkLayoutName(ChunkLayout::kOwner);   // "owner"
#ifndef CHUNKZERO_CHUNK_CHUNK_LAYOUT_H_
#define CHUNKZERO_CHUNK_CHUNK_LAYOUT_H_

#include <cstdint>
#include <ostream>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace chunkzero {

enum class ChunkLayout : uint8_t {
  // Every rank holds every chunk; grads are all-reduced per chunk (DDP with
  // chunk-sized buckets). Nothing is broadcast or freed.
  kReplicated = 0,
  // One owner rank per chunk holds it; access broadcasts from the owner,
  // reduce reduces to the owner.
  kOwner = 1,
  // Every rank holds 1/world_size of every chunk (padded); access
  // all-gathers, reduce reduce-scatters. The default.
  kSharded = 2,
};

// Elements each rank keeps of a chunk of `capacity` elements at rest in
// `layout` over `world` ranks: ceil(capacity / world) when sharded, else the
// whole chunk (on its holders). REQUIRES: capacity >= 1, world >= 1.
int64_t ShardSize(ChunkLayout layout, int64_t capacity, int world);

// The capacity a chunk of `capacity` elements really has: sharded chunks are
// padded to world * ShardSize so that every rank's shard is the same size.
int64_t PaddedCapacity(ChunkLayout layout, int64_t capacity, int world);

// "replicated", "owner" or "sharded".
absl::string_view ChunkLayoutName(ChunkLayout layout);
[[nodiscard]] absl::StatusOr<ChunkLayout> ParseChunkLayout(
    absl::string_view name);
std::ostream& operator<<(std::ostream& os, ChunkLayout layout);

}  // namespace chunkzero

#endif  // CHUNKZERO_CHUNK_CHUNK_LAYOUT_H_
