#include "comm/gather.h"

#include <algorithm>

#include "base/status_macros.h"

namespace chunkzero {
namespace comm {

absl::StatusOr<std::vector<std::vector<int64_t>>> AllGatherInt64(
    ProcessGroup& group, absl::Span<const int64_t> mine,
    absl::Duration timeout) {
  AllGatherOptions options;
  options.timeout = timeout;
  std::vector<int64_t> recv(mine.size() * group.size());
  CZ_RETURN_IF_ERROR(
      AllGather(group, ConstBuffer::Of(mine), MutableBuffer::Of(recv), options),
      "gathering ", mine.size(), " integers");
  std::vector<std::vector<int64_t>> all(group.size());
  for (int r = 0; r < group.size(); ++r) {
    all[r].assign(recv.begin() + r * mine.size(),
                  recv.begin() + (r + 1) * mine.size());
  }
  return all;
}

absl::StatusOr<std::vector<std::string>> AllGatherBytes(
    ProcessGroup& group, absl::string_view mine, absl::Duration timeout) {
  const int64_t size = static_cast<int64_t>(mine.size());
  CZ_ASSIGN_OR_RETURN(std::vector<std::vector<int64_t>> sizes,
                      AllGatherInt64(group, {size}, timeout));
  int64_t longest = 0;
  for (const auto& s : sizes) longest = std::max(longest, s[0]);
  std::string send(mine);
  send.resize(longest, '\0');
  std::string recv(static_cast<size_t>(longest) * group.size(), '\0');
  AllGatherOptions options;
  options.timeout = timeout;
  CZ_RETURN_IF_ERROR(
      AllGather(group, ConstBuffer::Of(send), MutableBuffer::Of(recv), options),
      "gathering ", longest, " bytes per rank");
  std::vector<std::string> all(group.size());
  for (int r = 0; r < group.size(); ++r) {
    all[r] = recv.substr(static_cast<size_t>(r) * longest, sizes[r][0]);
  }
  return all;
}

}  // namespace comm
}  // namespace chunkzero
