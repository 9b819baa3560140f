// AgreeOnStatus: every rank learns whether every rank succeeded, so that all
// of them go on or fail together. A rank that failed alone and returned
// would leave the others waiting in their next collective until its
// timeout; after an agreement they all stop at once.
//
//   absl::Status written = WriteMyShard();
//   CZ_RETURN_IF_ERROR(AgreeOnStatus(group, written, "a shard could not be "
//                                    "written", timeout));
//
// Collective: one i64 all-gather.
#ifndef CHUNKZERO_COMM_AGREE_H_
#define CHUNKZERO_COMM_AGREE_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "comm/options.h"
#include "comm/process_group.h"

namespace chunkzero {
namespace comm {

// Returns `mine` if it failed; else, if another rank failed, the lowest
// failing rank's code with the message "<others> (rank r)", marked as an
// echo (IsEchoedFailure); else OK. The gather's own failure (a rank that
// never came) is returned as is.
[[nodiscard]] absl::Status AgreeOnStatus(
    ProcessGroup& group, const absl::Status& mine, absl::string_view others,
    absl::Duration timeout = kDefaultCollectiveTimeout);

// True for a status AgreeOnStatus made from another rank's failure: the
// cause is elsewhere, so a caller collecting every rank's status reports
// the others first.
bool IsEchoedFailure(const absl::Status& status);

// Marks `status` as an echo of another rank's failure.
void MarkEchoedFailure(absl::Status& status);

}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_AGREE_H_
