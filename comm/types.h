// Vocabulary of chunkzero collectives: buffers, reduce operations, collective
// kinds, and CollectiveCall, the description of one collective call.
//
//   std::vector<float> grads(n);
//   MutableBuffer buf = MutableBuffer::Of(grads);  // {grads.data(), n, kF32}
//   CollectiveCall c{CollectiveKind::kAllReduce, DType::kF32, n};
//   // c.ToString() == "AllReduce(f32, count=<n>, op=sum)"
//
// Buffers are plain borrowed views (pointer, element count, dtype). f16 and
// bf16 elements are 16-bit patterns (see tensor/half.h), so a buffer of
// uint16_t must name its dtype explicitly.
#ifndef CHUNKZERO_COMM_TYPES_H_
#define CHUNKZERO_COMM_TYPES_H_

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tensor/dtype.h"

namespace chunkzero {
namespace comm {

// A read-only view of `count` elements of type `dtype` at `data`. Does not
// own its memory. `data` may be null only when `count` is 0.
struct ConstBuffer {
  const void* data = nullptr;
  size_t count = 0;
  DType dtype = DType::kF32;

  // A view of a contiguous f32 container (std::vector<float>, absl::Span,
  // std::array, ...).
  template <typename C,
            typename = std::enable_if_t<std::is_convertible_v<
                decltype(std::data(std::declval<const C&>())), const float*>>>
  static ConstBuffer Of(const C& c) {
    return {std::data(c), std::size(c), DType::kF32};
  }
  // A view of a contiguous container of f16 or bf16 bit patterns (uint16_t).
  template <
      typename C,
      typename = std::enable_if_t<std::is_convertible_v<
          decltype(std::data(std::declval<const C&>())), const uint16_t*>>>
  static ConstBuffer Of(const C& c, DType dtype) {
    return {std::data(c), std::size(c), dtype};
  }
  size_t bytes() const { return count * ElementSize(dtype); }
};

// A writable view; converts implicitly to ConstBuffer. Does not own its
// memory. `data` may be null only when `count` is 0.
struct MutableBuffer {
  void* data = nullptr;
  size_t count = 0;
  DType dtype = DType::kF32;

  // A view of a contiguous, mutable f32 container.
  template <typename C, typename = std::enable_if_t<std::is_same_v<
                            decltype(std::data(std::declval<C&>())), float*>>>
  static MutableBuffer Of(C& c) {
    return {std::data(c), std::size(c), DType::kF32};
  }
  static MutableBuffer Of(absl::Span<float> s) {
    return {s.data(), s.size(), DType::kF32};
  }
  // A view of a contiguous, mutable container of f16 or bf16 bit patterns.
  template <typename C,
            typename = std::enable_if_t<std::is_same_v<
                decltype(std::data(std::declval<C&>())), uint16_t*>>>
  static MutableBuffer Of(C& c, DType dtype) {
    return {std::data(c), std::size(c), dtype};
  }
  size_t bytes() const { return count * ElementSize(dtype); }
  operator ConstBuffer() const { return {data, count, dtype}; }  // NOLINT
};

bool operator==(const ConstBuffer& a, const ConstBuffer& b);
bool operator==(const MutableBuffer& a, const MutableBuffer& b);
std::ostream& operator<<(std::ostream& os, const ConstBuffer& b);
std::ostream& operator<<(std::ostream& os, const MutableBuffer& b);

// How reductions combine elements. Every backend reduces in rank order,
// ((x0 op x1) op x2) op ..., and 16-bit types accumulate in f32 and round
// once at the end.
enum class ReduceOp : uint8_t {
  kSum = 0,
  kAvg = 1,  // Sum in rank order, then divide by the world size (in f32).
  kMax = 2,  // acc = (acc < x) ? x : acc, in rank order.
};

// "sum", "avg" or "max".
absl::string_view ReduceOpName(ReduceOp op);
std::ostream& operator<<(std::ostream& os, ReduceOp op);

enum class CollectiveKind : uint8_t {
  kBroadcast = 0,
  kReduce = 1,
  kAllReduce = 2,
  kAllGather = 3,
  kReduceScatter = 4,
  kBarrier = 5,
};
inline constexpr int kNumCollectiveKinds = 6;

// "Broadcast", "Reduce", "AllReduce", "AllGather", "ReduceScatter",
// "Barrier".
absl::string_view CollectiveKindName(CollectiveKind kind);
std::ostream& operator<<(std::ostream& os, CollectiveKind kind);

// True for kBroadcast and kReduce.
constexpr bool KindHasRoot(CollectiveKind k) {
  return k == CollectiveKind::kBroadcast || k == CollectiveKind::kReduce;
}
// True for kReduce, kAllReduce and kReduceScatter.
constexpr bool KindHasReduceOp(CollectiveKind k) {
  return k == CollectiveKind::kReduce || k == CollectiveKind::kAllReduce ||
         k == CollectiveKind::kReduceScatter;
}

// What one rank asked for in one collective call: the part that every rank
// must agree on. `count` is the per-rank element count:
//   Broadcast, Reduce, AllReduce: the buffer's count;
//   AllGather: the send count (recv holds size() * count);
//   ReduceScatter: the recv count (send holds size() * count);
//   Barrier: 0 (dtype is then irrelevant).
// `root` is meaningful only if KindHasRoot(kind), `op` only if
// KindHasReduceOp(kind); both are ignored otherwise (by Matches and ToString).
struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::kBarrier;
  DType dtype = DType::kF32;
  size_t count = 0;
  int root = 0;
  ReduceOp op = ReduceOp::kSum;
  std::string tag;  // From the options; must match too (see options.h).

  // E.g. "AllReduce(f32, count=10, op=sum)", "Broadcast(bf16, count=3,
  // root=1)", "AllGather(f16, count=4)", "Barrier()".
  std::string ToString() const;
};

// True if two ranks' calls can be executed together: same kind and, where
// meaningful for that kind, same dtype, count, root and op.
bool Matches(const CollectiveCall& a, const CollectiveCall& b);

// Field-wise equality over the meaningful fields (same as Matches).
bool operator==(const CollectiveCall& a, const CollectiveCall& b);
inline bool operator!=(const CollectiveCall& a, const CollectiveCall& b) {
  return !(a == b);
}
std::ostream& operator<<(std::ostream& os, const CollectiveCall& c);

}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_TYPES_H_
