#include "comm/gloo/call_header.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace chunkzero {
namespace comm {
namespace gloo_internal {
namespace {

uint64_t Fnv1a(absl::string_view s) {
  uint64_t h = 14695981039346656037ull;
  for (const char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

CallHeader MakeHeader(const CollectiveCall& call) {
  CallHeader h;
  std::memset(&h, 0, sizeof(h));
  h.kind = static_cast<uint8_t>(call.kind);
  h.dtype = static_cast<uint8_t>(call.dtype);
  h.op = static_cast<uint8_t>(call.op);
  h.root = call.root;
  h.count = call.count;
  h.tag_hash = Fnv1a(call.tag);
  const size_t n = std::min(call.tag.size(), sizeof(h.tag_prefix));
  std::memcpy(h.tag_prefix, call.tag.data(), n);
  if (call.tag.size() > sizeof(h.tag_prefix)) h.flags |= kTagTruncated;
  return h;
}

CollectiveCall CallFromHeader(const CallHeader& h) {
  CollectiveCall call;
  call.kind = static_cast<CollectiveKind>(h.kind);
  call.dtype = static_cast<DType>(h.dtype);
  call.op = static_cast<ReduceOp>(h.op);
  call.root = h.root;
  call.count = h.count;
  call.tag.assign(h.tag_prefix, strnlen(h.tag_prefix, sizeof(h.tag_prefix)));
  if (h.flags & kTagTruncated) call.tag += "...";
  return call;
}

bool HeadersMatch(const CallHeader& a, const CallHeader& b) {
  return a.tag_hash == b.tag_hash &&
         Matches(CallFromHeader(a), CallFromHeader(b));
}

absl::Status CheckHeadersMatch(uint64_t seq,
                               const std::vector<CallHeader>& headers) {
  for (size_t peer = 1; peer < headers.size(); ++peer) {
    if (HeadersMatch(headers[0], headers[peer])) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        "collective #", seq, " mismatch: rank 0 called ",
        CallFromHeader(headers[0]).ToString(), ", rank ", peer, " called ",
        CallFromHeader(headers[peer]).ToString(),
        " (all ranks must issue the same collectives in the same order)"));
  }
  return absl::OkStatus();
}

bool AllSharedMemoryReady(const std::vector<CallHeader>& headers) {
  bool all_ready = true;
  for (const CallHeader& h : headers) {
    all_ready &= (h.flags & kSharedMemoryReady) != 0;
  }
  return all_ready;
}

}  // namespace gloo_internal
}  // namespace comm
}  // namespace chunkzero
