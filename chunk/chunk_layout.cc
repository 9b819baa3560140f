#include "chunk/chunk_layout.h"

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
