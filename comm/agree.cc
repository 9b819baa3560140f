#include "comm/agree.h"

#include <cstdint>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "comm/gather.h"

namespace chunkzero {
namespace comm {
namespace {

constexpr char kEchoPayload[] = "chunkzero.comm/echoed-failure";

}  // namespace

absl::Status AgreeOnStatus(ProcessGroup& group, const absl::Status& mine,
                           absl::string_view others, absl::Duration timeout) {
  CZ_ASSIGN_OR_RETURN(
      std::vector<std::vector<int64_t>> codes,
      AllGatherInt64(group, {static_cast<int64_t>(mine.code())}, timeout));
  if (!mine.ok()) return mine;
  for (size_t r = 0; r < codes.size(); ++r) {
    if (codes[r][0] != 0) {
      absl::Status echo(static_cast<absl::StatusCode>(codes[r][0]),
                        absl::StrCat(others, " (rank ", r, ")"));
      MarkEchoedFailure(echo);
      return echo;
    }
  }
  return absl::OkStatus();
}

bool IsEchoedFailure(const absl::Status& status) {
  return status.GetPayload(kEchoPayload).has_value();
}

void MarkEchoedFailure(absl::Status& status) {
  if (!status.ok()) status.SetPayload(kEchoPayload, absl::Cord("1"));
}

}  // namespace comm
}  // namespace chunkzero
