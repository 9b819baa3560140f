// Vocabulary of chunkzero collectives: buffers, reduce operations, collective
// kinds, and CollectiveCall, the description of one collective call.
//
//   std::vector<float> grads(n);
//   MutableBuffer buf = MutableBuffer::Of(grads);  // {grads.data(), n, kF32}
//   CollectiveCall c{CollectiveKind::kAllReduce, DType::kF32, n};
//   // c.ToString() == "AllReduce(f32, count=<n>, op=sum)"
//
// Buffers are plain borrowed views (pointer, element count, dtype) of any
// DType: f32, f16, bf16, u8, i32, i64, f64. f16 and bf16 elements are 16-bit
// patterns (see tensor/half.h), so a buffer of uint16_t must name its dtype
// explicitly; the others take it from the element type (NativeDType).
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

// The DType of a C++ element type that names exactly one: float, double,
// uint8_t (and char, for byte strings), int32_t and int64_t. uint16_t has
// none: f16 and bf16 share it, so such buffers name their dtype.
template <typename T>
struct NativeDType {};
template <>
struct NativeDType<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct NativeDType<double> {
  static constexpr DType value = DType::kF64;
};
template <>
struct NativeDType<uint8_t> {
  static constexpr DType value = DType::kU8;
};
template <>
struct NativeDType<char> {
  static constexpr DType value = DType::kU8;
};
template <>
struct NativeDType<int32_t> {
  static constexpr DType value = DType::kI32;
};
template <>
struct NativeDType<int64_t> {
  static constexpr DType value = DType::kI64;
};

namespace types_internal {
// The element type of a contiguous container C accessed as `C&`.
template <typename C>
using ElementOf =
    std::remove_pointer_t<decltype(std::data(std::declval<C&>()))>;
}  // namespace types_internal

// A read-only view of `count` elements of type `dtype` at `data`. Does not
// own its memory. `data` may be null only when `count` is 0.
struct ConstBuffer {
  const void* data = nullptr;
  size_t count = 0;
  DType dtype = DType::kF32;

  // A view of a contiguous container (std::vector, std::string, absl::Span,
  // std::array, ...) of float, double, uint8_t, char, int32_t or int64_t.
  template <typename C,
            typename T = std::remove_cv_t<types_internal::ElementOf<const C>>,
            typename = decltype(NativeDType<T>::value)>
  static ConstBuffer Of(const C& c) {
    return {std::data(c), std::size(c), NativeDType<T>::value};
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

  // A view of a contiguous, mutable container of float, double, uint8_t,
  // char, int32_t or int64_t.
  template <typename C, typename T = types_internal::ElementOf<C>,
            typename = std::enable_if_t<!std::is_const_v<T>>,
            typename = decltype(NativeDType<T>::value)>
  static MutableBuffer Of(C& c) {
    return {std::data(c), std::size(c), NativeDType<T>::value};
  }
  template <typename T, typename = std::enable_if_t<!std::is_const_v<T>>,
            typename = decltype(NativeDType<T>::value)>
  static MutableBuffer Of(absl::Span<T> s) {
    return {s.data(), s.size(), NativeDType<T>::value};
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
// ((x0 op x1) op x2) op ...; 16-bit floats accumulate in f32 and round once
// at the end; integers and f64 reduce in their own type (integer sums wrap
// around, and kAvg divides the sum by the world size truncating toward
// zero).
enum class ReduceOp : uint8_t {
  kSum = 0,
  kAvg = 1,  // Sum in rank order, then divide by the world size (f32 for
             // the float types, f64 for f64, integer division for integers).
  kMax = 2,  // acc = (acc < x) ? x : acc, in rank order.
  kMin = 3,  // acc = (x < acc) ? x : acc, in rank order.
};
inline constexpr int kNumReduceOps = 4;

// "sum", "avg", "max" or "min".
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
