#include "chunk/chunk_layout.h"

#include "absl/strings/str_cat.h"

namespace chunkzero {

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
