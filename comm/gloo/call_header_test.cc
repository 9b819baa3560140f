#include "comm/gloo/call_header.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "comm/types.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace comm {
namespace gloo_internal {
namespace {

CollectiveCall Call(CollectiveKind kind, size_t count, std::string tag = "") {
  CollectiveCall call;
  call.kind = kind;
  call.dtype = DType::kBF16;
  call.count = count;
  call.root = 1;
  call.op = ReduceOp::kMax;
  call.tag = std::move(tag);
  return call;
}

TEST(CallHeader, CarriesTheCall) {
  const CollectiveCall call = Call(CollectiveKind::kReduce, 12, "chunk 3");
  const CallHeader h = MakeHeader(call);
  EXPECT_EQ(h.flags, 0);
  EXPECT_EQ(CallFromHeader(h), call);
  EXPECT_EQ(CallFromHeader(h).tag, "chunk 3");
  EXPECT_TRUE(HeadersMatch(h, MakeHeader(call)));
}

// A tag longer than the header's 40 characters comes back as its prefix and
// "..."; the hash of the whole tag still tells two such tags apart.
TEST(CallHeader, ALongTagIsTruncatedButStillCompared) {
  const std::string tag(50, 'x');
  const CallHeader h = MakeHeader(Call(CollectiveKind::kAllGather, 4, tag));
  EXPECT_EQ(h.flags, kTagTruncated);
  EXPECT_EQ(CallFromHeader(h).tag, std::string(40, 'x') + "...");
  const CallHeader other =
      MakeHeader(Call(CollectiveKind::kAllGather, 4, tag + "y"));
  EXPECT_FALSE(HeadersMatch(h, other));
}

TEST(CallHeader, AMismatchNamesTheFirstRankThatDiffers) {
  const CallHeader a = MakeHeader(Call(CollectiveKind::kAllReduce, 8));
  const CallHeader b = MakeHeader(Call(CollectiveKind::kAllReduce, 9));
  EXPECT_TRUE(CheckHeadersMatch(5, {a, a, a}).ok());
  const absl::Status s = CheckHeadersMatch(5, {a, a, b, b});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "collective #5 mismatch: rank 0 called " +
                CallFromHeader(a).ToString() + ", rank 2 called " +
                CallFromHeader(b).ToString() +
                " (all ranks must issue the same collectives in the same "
                "order)");
}

TEST(CallHeader, SharedMemoryOnlyWhenEveryRankIsReady) {
  CallHeader ready = MakeHeader(Call(CollectiveKind::kAllGather, 4));
  ready.flags |= kSharedMemoryReady;
  const CallHeader not_ready = MakeHeader(Call(CollectiveKind::kAllGather, 4));
  EXPECT_TRUE(AllSharedMemoryReady({ready, ready}));
  EXPECT_FALSE(AllSharedMemoryReady({ready, not_ready}));
  EXPECT_TRUE(HeadersMatch(ready, not_ready));  // The flag is no mismatch.
}

}  // namespace
}  // namespace gloo_internal
}  // namespace comm
}  // namespace chunkzero
