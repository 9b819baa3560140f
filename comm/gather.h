// Gathering small integer and byte payloads from every rank: per-rank
// figures and serialized indexes reach every rank this way whatever the
// backend.
//
//   CZ_ASSIGN_OR_RETURN(std::vector<std::vector<int64_t>> all,
//                       AllGatherInt64(group, {peak, at_rest}));
//   CZ_ASSIGN_OR_RETURN(std::vector<std::string> blobs,
//                       AllGatherBytes(group, index.SerializeAsString()));
//
// AllGatherInt64 is one i64 all-gather. AllGatherBytes is two: the lengths
// (i64), then every string padded to the longest (u8). Collective: every
// rank calls with the same number of values (AllGatherInt64); byte strings
// may differ in length.
#ifndef CHUNKZERO_COMM_GATHER_H_
#define CHUNKZERO_COMM_GATHER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "comm/options.h"
#include "comm/process_group.h"

namespace chunkzero {
namespace comm {

// Every rank's `mine`, by rank. REQUIRES: the same size on every rank.
// `timeout` bounds the wait for the other ranks (comm/options.h).
[[nodiscard]] absl::StatusOr<std::vector<std::vector<int64_t>>> AllGatherInt64(
    ProcessGroup& group, absl::Span<const int64_t> mine,
    absl::Duration timeout = kDefaultCollectiveTimeout);

// Every rank's `mine`, by rank.
[[nodiscard]] absl::StatusOr<std::vector<std::string>> AllGatherBytes(
    ProcessGroup& group, absl::string_view mine,
    absl::Duration timeout = kDefaultCollectiveTimeout);

}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_GATHER_H_
