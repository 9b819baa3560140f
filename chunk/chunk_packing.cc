#include "chunk/chunk_packing.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace chunkzero {

ChunkPacker::ChunkPacker(std::optional<int64_t> chunk_size)
    : chunk_size_(chunk_size.has_value() && *chunk_size == 0 ? std::nullopt
                                                             : chunk_size) {}

absl::StatusOr<PackedTensor> ChunkPacker::Add(int64_t size) {
  const size_t index = plan_.tensors.size();
  if (chunk_size_.has_value() && *chunk_size_ < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk size must be positive, got ", *chunk_size_));
  }
  if (size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor #", index, " has negative size ", size));
  }
  if (chunk_size_.has_value() && size > *chunk_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor #", index, " has ", size,
                     " elements and does not fit in a chunk of ", *chunk_size_,
                     " elements"));
  }
  int64_t used = 0;
  if (__builtin_add_overflow(plan_.used_elements, size, &used)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensors #0 to #", index, " hold more elements than an int64 counts"));
  }
  PackedTensor placed;
  const bool fits = chunk_size_.has_value() && !plan_.capacities.empty() &&
                    size <= *chunk_size_ - used_in_open_chunk_;
  if (fits) {
    placed.chunk = static_cast<int64_t>(plan_.capacities.size()) - 1;
    placed.offset = used_in_open_chunk_;
  } else {
    plan_.capacities.push_back(
        chunk_size_.has_value() ? *chunk_size_ : std::max<int64_t>(size, 1));
    placed.chunk = static_cast<int64_t>(plan_.capacities.size()) - 1;
    placed.opens_chunk = true;
    used_in_open_chunk_ = 0;
  }
  used_in_open_chunk_ += size;
  plan_.used_elements = used;
  plan_.tensors.push_back(placed);
  return placed;
}

absl::StatusOr<ChunkPlan> PlanChunks(absl::Span<const int64_t> sizes,
                                     std::optional<int64_t> chunk_size) {
  ChunkPacker packer(chunk_size);
  for (int64_t size : sizes) CZ_RETURN_IF_ERROR(packer.Add(size).status());
  return packer.plan();
}

}  // namespace chunkzero
