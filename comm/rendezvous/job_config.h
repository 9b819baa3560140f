// The job-config agreement at a rendezvous: every rank joins with what the
// ranks of a job must agree on (the world size and the flags each was
// started with), and a rank started otherwise fails at once, naming the
// first flag that differs and both its values, instead of waiting for ranks
// that will never come. Gloo's and NCCL's groups run it over their
// rendezvous store.
//
//   bool announced = false;
//   CZ_RETURN_IF_ERROR(AgreeOnJobConfig(
//       store, "chunkzero_gloo_joined_", rank, size, options.job_config,
//       deadline, options.timeout, "GlooProcessGroup::Create", where,
//       &announced));
//
// A rank's join value holds `world_size` and every key of the config, one
// "key=value" line each in key order (a newline in a key or value written
// as "\n"). Not part of the comm interface.
#ifndef CHUNKZERO_COMM_RENDEZVOUS_JOB_CONFIG_H_
#define CHUNKZERO_COMM_RENDEZVOUS_JOB_CONFIG_H_

#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gloo/rendezvous/store.h"

namespace chunkzero {
namespace comm_internal {

// What every rank of a job must agree on (flags, shapes): keys and values
// are free text.
using JobConfig = std::map<std::string, std::string>;

// A rank's join value for a world of `size` ranks (see above).
std::string JobConfigJoinValue(int size, const JobConfig& config);

// OK if `theirs` (rank `peer`'s join value) equals `mine` (rank `rank`'s);
// else FailedPrecondition "<caller>: rank P was started with another
// configuration than rank R: KEY is X on rank P but Y on rank R (every rank
// of a job must be started with the same flags)". KEY is world_size when
// the sizes differ (other settings may differ only because it does), else
// the first key of `mine` that `theirs` lacks or sets otherwise, else the
// first key only `theirs` has; a value a rank lacks is "(unset)".
[[nodiscard]] absl::Status CompareJobConfigs(absl::string_view caller, int rank,
                                             const std::string& mine, int peer,
                                             const std::string& theirs);

// Joins rank `rank` of `size` in `store` with JobConfigJoinValue(size,
// config) under the key prefix `prefix` (AnnounceJoin, whose errors name
// `where`), then waits until every other rank has joined (AwaitJoins, whose
// errors name "<caller>: rank R of N"), comparing each rank's value with
// this rank's as it arrives, rank 0's first (CompareJobConfigs): a
// difference fails at once. `*announced`, when given, says whether this
// rank's key is in the store now, so that a failure after the call should
// be announced there (AnnounceGiveUp). Errors as AnnounceJoin, AwaitJoins
// and CompareJobConfigs.
[[nodiscard]] absl::Status AgreeOnJobConfig(
    gloo::rendezvous::Store& store, absl::string_view prefix, int rank,
    int size, const JobConfig& config, absl::Time deadline,
    absl::Duration timeout, absl::string_view caller, absl::string_view where,
    bool* announced = nullptr);

}  // namespace comm_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_RENDEZVOUS_JOB_CONFIG_H_
