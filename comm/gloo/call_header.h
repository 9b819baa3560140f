// CallHeader: what a rank of a Gloo group sends every peer before collective
// #k (gloo_process_group.h, "How a collective runs"), so that the ranks find
// a missing rank or a mismatched call before any data moves.
//
//   std::vector<CallHeader> headers(size);
//   headers[rank] = MakeHeader(call);
//   ... exchange them ...
//   CZ_RETURN_IF_ERROR(CheckHeadersMatch(seq, headers));
//
// 64 plain bytes: kind, dtype, op, flags, root, count, a hash of the tag and
// its first 40 characters. Both ends are the same binary on little-endian
// hosts. Internal to the Gloo backend.
#ifndef CHUNKZERO_COMM_GLOO_CALL_HEADER_H_
#define CHUNKZERO_COMM_GLOO_CALL_HEADER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "comm/types.h"

namespace chunkzero {
namespace comm {
namespace gloo_internal {

// Fixed size and plain bytes, so every rank can post its receives up front.
struct CallHeader {
  uint8_t kind;
  uint8_t dtype;
  uint8_t op;
  uint8_t flags;  // kTagTruncated | kSharedMemoryReady.
  int32_t root;
  uint64_t count;
  uint64_t tag_hash;  // FNV-1a of the whole tag.
  char tag_prefix[40];
};
static_assert(sizeof(CallHeader) == 64, "CallHeader must have no padding");

// CallHeader::flags.
inline constexpr uint8_t kTagTruncated = 1;  // tag_prefix holds only part.
// The sender's shared-memory segment holds this collective's data.
inline constexpr uint8_t kSharedMemoryReady = 2;

// The header of `call` (flags: kTagTruncated only).
CallHeader MakeHeader(const CollectiveCall& call);

// The call a header describes, for comparison and messages (a long tag comes
// back as its prefix followed by "...").
CollectiveCall CallFromHeader(const CallHeader& h);

// True if the calls of `a` and `b` can run together (tags included).
bool HeadersMatch(const CallHeader& a, const CallHeader& b);

// OK if every rank's header matches rank 0's; else InvalidArgument
// "collective #<seq> mismatch: rank 0 called X, rank j called Y (all ranks
// must issue the same collectives in the same order)" for the first j.
// REQUIRES: !headers.empty().
[[nodiscard]] absl::Status CheckHeadersMatch(
    uint64_t seq, const std::vector<CallHeader>& headers);

// True if every header says kSharedMemoryReady.
bool AllSharedMemoryReady(const std::vector<CallHeader>& headers);

}  // namespace gloo_internal
}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_GLOO_CALL_HEADER_H_
