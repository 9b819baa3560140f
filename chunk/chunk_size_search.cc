#include "chunk/chunk_size_search.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "chunk/chunk_packing.h"

namespace chunkzero {
namespace {

// Candidates are kept in memory and each is a packing pass over every
// tensor, so a grid that would try more is refused.
constexpr int64_t kMaxCandidates = int64_t{1} << 20;

// `value` rounded up to a multiple of `multiple`, or nullopt if that does
// not fit in int64.
std::optional<int64_t> RoundUp(int64_t value, int64_t multiple) {
  if (value > std::numeric_limits<int64_t>::max() - (multiple - 1)) {
    return std::nullopt;
  }
  return (value + multiple - 1) / multiple * multiple;
}

// The best packing of `sizes` over the candidate sizes.
absl::StatusOr<ChunkPacking> BestOverGrid(
    absl::Span<const int64_t> sizes, absl::Span<const int64_t> candidates) {
  ChunkPacking best;
  bool found = false;
  for (int64_t chunk_size : candidates) {
    CZ_ASSIGN_OR_RETURN(ChunkPacking packing, PackInOrder(sizes, chunk_size));
    if (!found || packing.utilisation > best.utilisation) {
      best = packing;
      found = true;
    }
  }
  return best;
}

std::string Describe(const ChunkPacking& p) {
  return absl::StrFormat(
      "chunk size %d elements: %d chunks, utilisation %.2f%%, %d elements "
      "wasted",
      p.chunk_size, p.num_chunks, 100 * p.utilisation, p.wasted_elements);
}

}  // namespace

absl::StatusOr<ChunkPacking> PackInOrder(absl::Span<const int64_t> sizes,
                                         int64_t chunk_size) {
  if (chunk_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk size must be positive, got ", chunk_size));
  }
  CZ_ASSIGN_OR_RETURN(const ChunkPlan plan, PlanChunks(sizes, chunk_size));
  ChunkPacking packing;
  packing.chunk_size = chunk_size;
  packing.num_chunks = static_cast<int64_t>(plan.capacities.size());
  packing.used_elements = plan.used_elements;
  int64_t allocated = 0;
  if (__builtin_mul_overflow(packing.num_chunks, chunk_size, &allocated)) {
    return absl::InvalidArgumentError(
        absl::StrCat(packing.num_chunks, " chunks of ", chunk_size,
                     " elements hold more elements than an int64 counts"));
  }
  packing.wasted_elements = allocated - packing.used_elements;
  packing.utilisation =
      allocated == 0 ? 1.0
                     : static_cast<double>(packing.used_elements) / allocated;
  return packing;
}

absl::StatusOr<ChunkSizeReport> SearchChunkSize(
    absl::Span<const int64_t> sizes, const ChunkSizeSearchOptions& options) {
  if (options.grid < 1 || options.alignment < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("grid (", options.grid, ") and alignment (",
                     options.alignment, ") must be positive"));
  }
  int64_t largest = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor #", i, " has negative size ", sizes[i]));
    }
    largest = std::max(largest, sizes[i]);
  }
  const std::optional<int64_t> low =
      RoundUp(std::max<int64_t>({options.min_chunk_size, largest, 1}),
              options.alignment);
  if (!low.has_value() || *low > options.max_chunk_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("no chunk size to try: the smallest candidate is ",
                     low.has_value() ? absl::StrCat(*low) : "beyond int64",
                     " elements (largest tensor ", largest, ", minimum ",
                     options.min_chunk_size, ", alignment ", options.alignment,
                     ") but the maximum is ", options.max_chunk_size));
  }
  // Steps of `grid` from `low`, each rounded up to the alignment, stopping
  // before anything passes the maximum (or would overflow).
  std::vector<int64_t> candidates;
  for (std::optional<int64_t> size = low;
       size.has_value() && *size <= options.max_chunk_size;
       size = *size > options.max_chunk_size - options.grid
                  ? std::nullopt
                  : RoundUp(*size + options.grid, options.alignment)) {
    if (static_cast<int64_t>(candidates.size()) == kMaxCandidates) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the chunk size search from ", *low, " to ", options.max_chunk_size,
          " in steps of ", options.grid, " would try more than ",
          kMaxCandidates, " candidates; use a coarser grid"));
    }
    candidates.push_back(*size);
  }

  ChunkSizeReport report;
  report.candidates_tried = static_cast<int64_t>(candidates.size());
  CZ_ASSIGN_OR_RETURN(report.best, BestOverGrid(sizes, candidates));

  std::vector<int64_t> sorted(sizes.begin(), sizes.end());
  std::stable_sort(sorted.begin(), sorted.end(), std::greater<int64_t>());
  CZ_ASSIGN_OR_RETURN(report.sorted_by_size, BestOverGrid(sorted, candidates));

  // Small tensors are judged against the best registration-order size.
  const double small_limit =
      options.small_tensor_fraction * report.best.chunk_size;
  std::vector<int64_t> small_last;
  for (int64_t s : sizes) {
    if (s >= small_limit) small_last.push_back(s);
  }
  for (int64_t s : sizes) {
    if (s < small_limit) small_last.push_back(s);
  }
  CZ_ASSIGN_OR_RETURN(report.small_together,
                      BestOverGrid(small_last, candidates));
  return report;
}

std::string ChunkSizeReport::Summary() const {
  return absl::StrCat("chunk size search (", candidates_tried, " candidates)\n",
                      "  registration order: ", Describe(best), "\n",
                      "  sorted by size:     ", Describe(sorted_by_size), "\n",
                      "  small tensors last: ", Describe(small_together), "\n");
}

}  // namespace chunkzero
