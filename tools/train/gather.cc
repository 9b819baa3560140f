#include "tools/train/gather.h"

#include <algorithm>

#include "base/status_macros.h"

namespace chunkzero {

absl::StatusOr<std::vector<std::vector<int64_t>>> AllGatherInt64(
    comm::ProcessGroup& group, absl::Span<const int64_t> mine,
    absl::Duration timeout) {
  comm::AllGatherOptions options;
  options.timeout = timeout;
  constexpr int kLimbs = 4;
  std::vector<float> send(mine.size() * kLimbs);
  for (size_t i = 0; i < mine.size(); ++i) {
    const uint64_t bits = static_cast<uint64_t>(mine[i]);
    for (int l = 0; l < kLimbs; ++l) {
      send[i * kLimbs + l] = static_cast<float>((bits >> (16 * l)) & 0xffff);
    }
  }
  std::vector<float> recv(send.size() * group.size());
  CZ_RETURN_IF_ERROR(comm::AllGather(group, comm::ConstBuffer::Of(send),
                                     comm::MutableBuffer::Of(recv), options),
                     "gathering ", mine.size(), " integers");
  std::vector<std::vector<int64_t>> all(group.size(),
                                        std::vector<int64_t>(mine.size()));
  for (int r = 0; r < group.size(); ++r) {
    for (size_t i = 0; i < mine.size(); ++i) {
      uint64_t bits = 0;
      for (int l = 0; l < kLimbs; ++l) {
        const float limb = recv[(r * mine.size() + i) * kLimbs + l];
        bits |= static_cast<uint64_t>(limb) << (16 * l);
      }
      all[r][i] = static_cast<int64_t>(bits);
    }
  }
  return all;
}

absl::StatusOr<std::vector<std::string>> AllGatherBytes(
    comm::ProcessGroup& group, absl::string_view mine, absl::Duration timeout) {
  comm::AllGatherOptions options;
  options.timeout = timeout;
  const int64_t size = static_cast<int64_t>(mine.size());
  CZ_ASSIGN_OR_RETURN(std::vector<std::vector<int64_t>> sizes,
                      AllGatherInt64(group, {size}, timeout));
  int64_t longest = 0;
  for (const auto& s : sizes) longest = std::max(longest, s[0]);
  std::vector<float> send(longest, 0.0f);
  for (size_t i = 0; i < mine.size(); ++i) {
    send[i] = static_cast<unsigned char>(mine[i]);
  }
  std::vector<float> recv(send.size() * group.size());
  CZ_RETURN_IF_ERROR(comm::AllGather(group, comm::ConstBuffer::Of(send),
                                     comm::MutableBuffer::Of(recv), options),
                     "gathering ", longest, " bytes per rank");
  std::vector<std::string> all(group.size());
  for (int r = 0; r < group.size(); ++r) {
    all[r].resize(sizes[r][0]);
    for (int64_t i = 0; i < sizes[r][0]; ++i) {
      all[r][i] = static_cast<char>(static_cast<unsigned char>(
          recv[static_cast<size_t>(r) * longest + i]));
    }
  }
  return all;
}

}  // namespace chunkzero
