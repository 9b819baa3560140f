#include "comm/types.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace chunkzero {
namespace comm {
namespace {

TEST(CollectiveCall, ToStringShowsOnlyMeaningfulFields) {
  struct Case {
    CollectiveCall call;
    std::string want;
  };
  const std::vector<Case> cases = {
      {{CollectiveKind::kAllReduce, DType::kF32, 10, 3, ReduceOp::kSum},
       "AllReduce(f32, count=10, op=sum)"},
      {{CollectiveKind::kBroadcast, DType::kBF16, 3, 1, ReduceOp::kMax},
       "Broadcast(bf16, count=3, root=1)"},
      {{CollectiveKind::kReduce, DType::kF16, 0, 2, ReduceOp::kAvg},
       "Reduce(f16, count=0, root=2, op=avg)"},
      {{CollectiveKind::kAllGather, DType::kF16, 4, 1, ReduceOp::kMax},
       "AllGather(f16, count=4)"},
      {{CollectiveKind::kReduceScatter, DType::kF32, 5, 1, ReduceOp::kMax},
       "ReduceScatter(f32, count=5, op=max)"},
      {{CollectiveKind::kBarrier, DType::kBF16, 7, 1, ReduceOp::kMax},
       "Barrier()"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.want);
    EXPECT_EQ(c.call.ToString(), c.want);
  }
}

TEST(CollectiveCall, MatchesComparesOnlyMeaningfulFields) {
  const CollectiveCall base{CollectiveKind::kAllGather, DType::kF32, 4, 0,
                            ReduceOp::kSum};
  CollectiveCall other_root = base;
  other_root.root = 3;  // Ignored for AllGather.
  EXPECT_TRUE(Matches(base, other_root));
  CollectiveCall other_count = base;
  other_count.count = 5;
  EXPECT_FALSE(Matches(base, other_count));
  CollectiveCall barrier_a{CollectiveKind::kBarrier, DType::kF32, 0, 0,
                           ReduceOp::kSum};
  CollectiveCall barrier_b{CollectiveKind::kBarrier, DType::kF16, 9, 2,
                           ReduceOp::kMax};
  EXPECT_TRUE(Matches(barrier_a, barrier_b));
  CollectiveCall reduce{CollectiveKind::kReduce, DType::kF32, 4, 0,
                        ReduceOp::kSum};
  CollectiveCall reduce_max = reduce;
  reduce_max.op = ReduceOp::kMax;
  EXPECT_FALSE(Matches(reduce, reduce_max));
}

TEST(Buffer, OfContainers) {
  std::vector<float> f(5);
  MutableBuffer m = MutableBuffer::Of(f);
  EXPECT_EQ(m.data, f.data());
  EXPECT_EQ(m.count, 5u);
  EXPECT_EQ(m.dtype, DType::kF32);
  EXPECT_EQ(m.bytes(), 20u);
  std::vector<uint16_t> h(3);
  ConstBuffer c = ConstBuffer::Of(h, DType::kBF16);
  EXPECT_EQ(c.bytes(), 6u);
  EXPECT_EQ(c.dtype, DType::kBF16);
  ConstBuffer from_mutable = m;
  EXPECT_EQ(from_mutable.data, f.data());
}

TEST(Buffer, OfTakesTheDTypeFromTheElementType) {
  std::vector<double> d(3);
  std::vector<int64_t> l(2);
  std::vector<int32_t> i(4);
  std::vector<uint8_t> u(7);
  std::string bytes = "abc";
  const MutableBuffer md = MutableBuffer::Of(d);
  EXPECT_EQ(md.dtype, DType::kF64);
  EXPECT_EQ(md.bytes(), 24u);
  EXPECT_EQ(MutableBuffer::Of(l).dtype, DType::kI64);
  EXPECT_EQ(MutableBuffer::Of(l).bytes(), 16u);
  EXPECT_EQ(ConstBuffer::Of(i).dtype, DType::kI32);
  EXPECT_EQ(ConstBuffer::Of(u).dtype, DType::kU8);
  const ConstBuffer cb = ConstBuffer::Of(bytes);
  EXPECT_EQ(cb.dtype, DType::kU8);
  EXPECT_EQ(cb.data, bytes.data());
  EXPECT_EQ(cb.bytes(), 3u);
  EXPECT_EQ(MutableBuffer::Of(absl::MakeSpan(l)).dtype, DType::kI64);
}

TEST(Names, KindsAndOps) {
  EXPECT_EQ(CollectiveKindName(CollectiveKind::kReduceScatter),
            "ReduceScatter");
  EXPECT_EQ(ReduceOpName(ReduceOp::kAvg), "avg");
  EXPECT_EQ(ReduceOpName(ReduceOp::kMin), "min");
  CollectiveCall call{CollectiveKind::kAllReduce, DType::kI64, 3};
  call.op = ReduceOp::kMin;
  EXPECT_EQ(call.ToString(), "AllReduce(i64, count=3, op=min)");
}

}  // namespace
}  // namespace comm
}  // namespace chunkzero
