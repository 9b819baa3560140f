#include "comm/testing/every_dtype_check.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "comm/types.h"

namespace chunkzero {
namespace comm_testing {
namespace {

using comm::ConstBuffer;
using comm::MutableBuffer;
using comm::ReduceOp;

// Elements per rank: odd, so no backend can split it evenly by accident.
constexpr size_t kCount = 37;

// Rank r's element i. The values cross each type's interesting edges: u8
// and i32 sums wrap, i64 values need all 64 bits (no double could carry
// them), signs alternate for min and max, f64 values differ below f32's
// precision.
template <typename T>
T Value(int r, size_t i);
template <>
uint8_t Value<uint8_t>(int r, size_t i) {
  return static_cast<uint8_t>(200 + 37 * r + 11 * i);
}
template <>
int32_t Value<int32_t>(int r, size_t i) {
  // In int64: the point is values past the int32 range before the wrap.
  const int64_t v = int64_t{std::numeric_limits<int32_t>::max()} - 3 +
                    5 * int64_t{r} + static_cast<int64_t>(i);
  return static_cast<int32_t>(i % 2 == 0 ? static_cast<uint32_t>(v)
                                         : static_cast<uint32_t>(-v));
}
template <>
int64_t Value<int64_t>(int r, size_t i) {
  const int64_t v = (int64_t{1} << 58) + 3 * r + 7 * static_cast<int64_t>(i);
  return i % 3 == 1 ? -v : v;
}
template <>
double Value<double>(int r, size_t i) {
  return (i % 2 == 0 ? 1.0 : -1.0) * (1.0 + r * 1e-12 + i * 1e-3);
}

// The contract's reduction of element i over ranks [0, n), in rank order.
// Integer sums are taken modulo 2^bits (in uint64_t, then narrowed), the
// average truncates toward zero.
template <typename T>
T Expected(ReduceOp op, int n, size_t i) {
  T acc = Value<T>(0, i);
  uint64_t wrapped = static_cast<uint64_t>(acc);
  for (int r = 1; r < n; ++r) {
    const T x = Value<T>(r, i);
    if (op == ReduceOp::kMax) {
      acc = acc < x ? x : acc;
    } else if (op == ReduceOp::kMin) {
      acc = x < acc ? x : acc;
    } else {
      if constexpr (std::is_integral_v<T>) {
        wrapped += static_cast<uint64_t>(x);
      } else {
        acc += x;
      }
    }
  }
  if (op == ReduceOp::kMax || op == ReduceOp::kMin) return acc;
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    const T sum = static_cast<T>(static_cast<U>(wrapped));
    if (op == ReduceOp::kSum) return sum;
    if constexpr (std::is_signed_v<T>) {
      return static_cast<T>(static_cast<int64_t>(sum) / n);
    } else {
      return static_cast<T>(static_cast<uint64_t>(sum) / n);
    }
  } else {
    return op == ReduceOp::kAvg ? acc / n : acc;
  }
}

template <typename T>
bool SameBits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <typename T>
absl::Status Compare(absl::string_view what, const std::vector<T>& got,
                     const std::vector<T>& want) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (!SameBits(got[i], want[i])) {
      return absl::InternalError(
          absl::StrCat(what, " (", DTypeName(comm::NativeDType<T>::value),
                       "): element ", i, " is ", absl::StrCat(+got[i]),
                       ", expected ", absl::StrCat(+want[i])));
    }
  }
  return absl::OkStatus();
}

template <typename T>
std::vector<T> Mine(int rank, size_t count) {
  std::vector<T> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = Value<T>(rank, i);
  return v;
}

template <typename T>
absl::Status CheckType(comm::ProcessGroup& g) {
  const int n = g.size();
  const int rank = g.rank();
  for (ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
    const std::string name = absl::StrCat("AllReduce ", ReduceOpName(op));
    std::vector<T> buffer = Mine<T>(rank, kCount), want(kCount);
    for (size_t i = 0; i < kCount; ++i) want[i] = Expected<T>(op, n, i);
    comm::AllReduceOptions all_reduce;
    all_reduce.op = op;
    CZ_RETURN_IF_ERROR(
        comm::AllReduce(g, MutableBuffer::Of(buffer), all_reduce));
    CZ_RETURN_IF_ERROR(Compare(name, buffer, want));

    // Reduce to the last rank.
    std::vector<T> send = Mine<T>(rank, kCount), recv(kCount);
    comm::ReduceOptions reduce;
    reduce.op = op;
    reduce.root = n - 1;
    CZ_RETURN_IF_ERROR(comm::Reduce(g, ConstBuffer::Of(send),
                                    MutableBuffer::Of(recv), reduce));
    if (rank == n - 1) {
      CZ_RETURN_IF_ERROR(
          Compare(absl::StrCat("Reduce ", ReduceOpName(op)), recv, want));
    }

    // ReduceScatter: rank r gets elements [r * kCount, (r + 1) * kCount) of
    // the reduction of n * kCount elements per rank.
    std::vector<T> whole = Mine<T>(rank, n * kCount), part(kCount),
                   want_part(kCount);
    for (size_t i = 0; i < kCount; ++i) {
      want_part[i] = Expected<T>(op, n, rank * kCount + i);
    }
    comm::ReduceScatterOptions scatter;
    scatter.op = op;
    CZ_RETURN_IF_ERROR(comm::ReduceScatter(g, ConstBuffer::Of(whole),
                                           MutableBuffer::Of(part), scatter));
    CZ_RETURN_IF_ERROR(Compare(absl::StrCat("ReduceScatter ", ReduceOpName(op)),
                               part, want_part));
  }

  std::vector<T> gathered(n * kCount), want_gathered;
  for (int r = 0; r < n; ++r) {
    const std::vector<T> theirs = Mine<T>(r, kCount);
    want_gathered.insert(want_gathered.end(), theirs.begin(), theirs.end());
  }
  const std::vector<T> mine = Mine<T>(rank, kCount);
  CZ_RETURN_IF_ERROR(
      comm::AllGather(g, ConstBuffer::Of(mine), MutableBuffer::Of(gathered)));
  CZ_RETURN_IF_ERROR(Compare("AllGather", gathered, want_gathered));

  std::vector<T> broadcast = Mine<T>(rank, kCount);
  comm::BroadcastOptions from_last;
  from_last.root = n - 1;
  CZ_RETURN_IF_ERROR(
      comm::Broadcast(g, MutableBuffer::Of(broadcast), from_last));
  return Compare("Broadcast", broadcast, Mine<T>(n - 1, kCount));
}

}  // namespace

absl::Status CheckEveryDTypeCollective(comm::ProcessGroup& group) {
  CZ_RETURN_IF_ERROR(CheckType<uint8_t>(group));
  CZ_RETURN_IF_ERROR(CheckType<int32_t>(group));
  CZ_RETURN_IF_ERROR(CheckType<int64_t>(group));
  return CheckType<double>(group);
}

}  // namespace comm_testing
}  // namespace chunkzero
