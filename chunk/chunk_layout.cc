#include "chunk/chunk_layout.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace chunkzero {

int64_t ShardSize(ChunkLayout layout, int64_t capacity, int world) {
  // Written so that no capacity overflows.
  return layout == ChunkLayout::kSharded
             ? capacity / world + (capacity % world != 0 ? 1 : 0)
             : capacity;
}

int64_t PaddedCapacity(ChunkLayout layout, int64_t capacity, int world) {
  if (layout != ChunkLayout::kSharded) return capacity;
  int64_t padded = 0;
  // Past the int64 range no allocation can succeed: the largest value makes
  // the allocator say so.
  if (__builtin_mul_overflow(ShardSize(layout, capacity, world), int64_t{world},
                             &padded)) {
    return std::numeric_limits<int64_t>::max();
  }
  return padded;
}

ElementRange IntersectRanges(ElementRange a, ElementRange b) {
  const int64_t lo = std::max(a.first, b.first);
  const int64_t hi = std::min(a.second, b.second);
  return hi > lo ? ElementRange{lo, hi} : ElementRange{lo, lo};
}

bool IsHolder(const ChunkSharding& p) {
  switch (p.layout) {
    case ChunkLayout::kReplicated:
      return true;
    case ChunkLayout::kOwner:
      return p.rank == p.owner;
    case ChunkLayout::kSharded:
      return false;
  }
  return false;
}

ElementRange RankPart(const ChunkSharding& p) {
  const int64_t size = ShardSize(p.layout, p.capacity, p.world);
  const int64_t begin = p.layout == ChunkLayout::kSharded ? p.rank * size : 0;
  return {begin, begin + size};
}

namespace {

// What the rank keeps at rest, as a range of the full buffer: its part,
// except on a non-owner, which keeps nothing.
ElementRange RestRange(const ChunkSharding& p) {
  if (p.layout == ChunkLayout::kOwner && !IsHolder(p)) return {0, 0};
  return RankPart(p);
}

}  // namespace

int64_t RestElements(const ChunkSharding& p) {
  const ElementRange rest = RestRange(p);
  return rest.second - rest.first;
}

int64_t ShardStorageElements(const ChunkSharding& p) {
  return p.layout == ChunkLayout::kSharded
             ? ShardSize(p.layout, p.capacity, p.world)
             : 0;
}

ElementRange UpdateRange(const ChunkSharding& p, int64_t used) {
  const ElementRange rest = RestRange(p);
  // A non-owner's empty range stays {0, 0} whatever `used` is.
  if (rest.first == rest.second) return rest;
  return IntersectRanges(rest, {0, used});
}

ElementRange AccountRange(const ChunkSharding& p, int64_t used) {
  const ElementRange updated = UpdateRange(p, used);
  if (p.layout != ChunkLayout::kReplicated) return updated;
  const int64_t n = updated.second - updated.first;
  return {updated.first + n * p.rank / p.world,
          updated.first + n * (p.rank + 1) / p.world};
}

int RoundRobinOwner(int chunk_index, int world) { return chunk_index % world; }

int LeastLoadedOwner(const std::vector<int64_t>& elements_per_rank) {
  const auto least =
      std::min_element(elements_per_rank.begin(), elements_per_rank.end());
  return static_cast<int>(least - elements_per_rank.begin());
}

double MeanRestFraction(ChunkLayout layout, int world) {
  return layout == ChunkLayout::kReplicated ? 1.0 : 1.0 / world;
}

double BusFactorPerStep(ChunkLayout layout, int world) {
  const double n = world;
  switch (layout) {
    case ChunkLayout::kReplicated:
      return 2 * (n - 1) / n;
    case ChunkLayout::kOwner:
      return world > 1 ? 3 : 0;
    case ChunkLayout::kSharded:
      return 3 * (n - 1) / n;
  }
  return 0;
}

absl::string_view ChunkLayoutName(ChunkLayout layout) {
  switch (layout) {
    case ChunkLayout::kReplicated:
      return "replicated";
    case ChunkLayout::kOwner:
      return "owner";
    case ChunkLayout::kSharded:
      return "sharded";
  }
  return "invalid";
}

absl::StatusOr<ChunkLayout> ParseChunkLayout(absl::string_view name) {
  for (ChunkLayout l :
       {ChunkLayout::kReplicated, ChunkLayout::kOwner, ChunkLayout::kSharded}) {
    if (name == ChunkLayoutName(l)) return l;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown chunk layout '", name,
                   "' (expected replicated, owner or sharded)"));
}

std::ostream& operator<<(std::ostream& os, ChunkLayout layout) {
  return os << ChunkLayoutName(layout);
}

}  // namespace chunkzero
