// How a chunk's payload is spread over the ranks (docs/DESIGN.md §4), as
// pure functions: which part of a chunk a rank keeps, updates and saves,
// and which rank owns a chunk. Chunk, the optimizer and the state dicts
// ask these rather than switch on the layout themselves.
//
//   absl::StatusOr<ChunkLayout> l = ParseChunkLayout("sharded");
//   ChunkLayoutName(ChunkLayout::kOwner);   // "owner"
//   ChunkSharding p{ChunkLayout::kSharded, /*capacity=*/10, /*world=*/3,
//                    /*rank=*/2};
//   RankPart(p);            // {8, 12}: shards of 4, padded to 12
//   UpdateRange(p, 9);      // {8, 9}: only element 8 is used
#ifndef CHUNKZERO_CHUNK_CHUNK_LAYOUT_H_
#define CHUNKZERO_CHUNK_CHUNK_LAYOUT_H_

#include <cstdint>
#include <ostream>
#include <utility>
#include <vector>

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

// [first, second) of a chunk's full buffer, in elements; empty when
// first == second.
using ElementRange = std::pair<int64_t, int64_t>;

// The overlap of `a` and `b`; when they do not overlap, the empty range
// (lo, lo) with lo = max(a.first, b.first).
ElementRange IntersectRanges(ElementRange a, ElementRange b);

// Where one rank stands in one chunk's layout: what every rule below
// depends on (Chunk::sharding() gives a chunk's).
struct ChunkSharding {
  ChunkLayout layout = ChunkLayout::kSharded;
  // Elements, as requested or already padded (the shards are the same).
  int64_t capacity = 0;
  int world = 1;
  int rank = 0;
  int owner = 0;  // The holder rank for kOwner; ignored otherwise.
};

// True when the rank keeps the chunk's full buffer at rest (a holder):
// every rank (replicated), the owner (owner), no rank (sharded).
bool IsHolder(const ChunkSharding& p);

// The rank's part of the full buffer: its shard [rank·s, (rank+1)·s) with
// s = ShardSize (sharded), else the whole chunk [0, capacity), whether or
// not the rank holds it. Where this rank's payload at rest maps into the
// full buffer.
ElementRange RankPart(const ChunkSharding& p);

// The payload elements a rank keeps at rest: its shard (sharded), the
// whole chunk on a holder, none on an owner-layout non-owner.
int64_t RestElements(const ChunkSharding& p);

// Elements of the shard a rank keeps beside the full buffer: ShardSize
// (sharded); 0 in the other layouts, where the full buffer itself is what a
// holder keeps. So also what a sharded chunk adds to a device when it comes
// to rest where it computes (a holder's buffer is there already).
int64_t ShardStorageElements(const ChunkSharding& p);

// The elements a rank updates, of the first `used` of the chunk: what it
// keeps at rest, within [0, used) (docs/DESIGN.md §4): its shard's used
// part (sharded), all of them (replicated, and the owner), none on a
// non-owner ({0, 0}). Empty ranges are (lo, lo) as in IntersectRanges.
ElementRange UpdateRange(const ChunkSharding& p, int64_t used);

// The elements a rank accounts for in sums (the grad norm) and in saved
// state, so that every element counts once over the ranks: UpdateRange,
// except when replicated, where every rank updates everything and rank r
// takes the r-th of `world` slices of it, [n·r/world, n·(r+1)/world).
ElementRange AccountRange(const ChunkSharding& p, int64_t used);

// The owner of chunk `chunk_index` of a group with a fixed chunk size:
// round robin, chunk_index mod world.
int RoundRobinOwner(int chunk_index, int world);
// The owner of a new chunk with chunking off: the rank with the fewest
// elements of capacity in the group so far, the lowest on a tie.
// REQUIRES: elements_per_rank is not empty.
int LeastLoadedOwner(const std::vector<int64_t>& elements_per_rank);

// The share of a group's elements a rank keeps at rest, on average over
// the ranks and leaving out padding: 1 (replicated), 1/world (sharded, and
// owner, where a rank may hold one chunk more than the average).
double MeanRestFraction(ChunkLayout layout, int world);

// Bus bytes per rank and step per element of a group, in units of the
// element's bytes (docs/DESIGN.md §7.2): 2(N−1)/N for replicated (one
// all-reduce), 3(N−1)/N for sharded (two all-gathers and a
// reduce-scatter), 3 for owner (two broadcasts and a reduce; 0 at N = 1).
double BusFactorPerStep(ChunkLayout layout, int world);

// "replicated", "owner" or "sharded".
absl::string_view ChunkLayoutName(ChunkLayout layout);
[[nodiscard]] absl::StatusOr<ChunkLayout> ParseChunkLayout(
    absl::string_view name);
std::ostream& operator<<(std::ostream& os, ChunkLayout layout);

}  // namespace chunkzero

#endif  // CHUNKZERO_CHUNK_CHUNK_LAYOUT_H_
