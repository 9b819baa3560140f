// Gathering small integer and byte payloads from every rank through a
// ProcessGroup, whose buffers hold floats: the train job's per-step figures
// and checkpoint indexes reach rank 0 this way whether the ranks are threads
// or processes.
//
//   CZ_ASSIGN_OR_RETURN(std::vector<std::vector<int64_t>> all,
//                       AllGatherInt64(group, {peak, at_rest}));
//   CZ_ASSIGN_OR_RETURN(std::vector<std::string> blobs,
//                       AllGatherBytes(group, index.SerializeAsString()));
//
// Each int64 travels as four 16-bit limbs, each byte as one float: exact,
// and cheap at these sizes (a few hundred values, a few KiB). Collective:
// every rank calls with the same number of values (AllGatherInt64); byte
// strings may differ in length.
#ifndef CHUNKZERO_TOOLS_TRAIN_GATHER_H_
#define CHUNKZERO_TOOLS_TRAIN_GATHER_H_

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

// Every rank's `mine`, by rank. REQUIRES: the same size on every rank.
// `timeout` bounds the wait for the other ranks (comm/options.h).
absl::StatusOr<std::vector<std::vector<int64_t>>> AllGatherInt64(
    comm::ProcessGroup& group, absl::Span<const int64_t> mine,
    absl::Duration timeout = comm::kDefaultCollectiveTimeout);

// Every rank's `mine`, by rank.
absl::StatusOr<std::vector<std::string>> AllGatherBytes(
    comm::ProcessGroup& group, absl::string_view mine,
    absl::Duration timeout = comm::kDefaultCollectiveTimeout);

}  // namespace chunkzero

#endif  // CHUNKZERO_TOOLS_TRAIN_GATHER_H_
