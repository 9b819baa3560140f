#include "comm/internal/reduce_kernels.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "tensor/cpu/cast_kernels.h"

namespace chunkzero {
namespace comm {
namespace internal {
namespace {

// Elements per tile: the f32 accumulator (8 KiB) stays in L1 while every
// input is added into it, so each output element is written once.
constexpr size_t kTile = 2048;

// Integer sums wrap around (computed unsigned, so overflow is defined) and
// kAvg divides the wrapped sum by n, truncating toward zero; floats divide
// in their own type.
template <typename T>
T Add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(
        static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}

template <typename T>
T DivideByCount(T sum, int n) {
  if constexpr (std::is_integral_v<T>) {
    using Wide = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
    return static_cast<T>(static_cast<Wide>(sum) / static_cast<Wide>(n));
  } else {
    return sum / static_cast<T>(n);
  }
}

// Types that reduce in themselves: f32, f64 and the integers. Plain loops
// over a local accumulator (which cannot alias the inputs), so the compiler
// vectorises them at -O2/-O3 without runtime alias checks. The first two
// inputs are combined in one pass. REQUIRES: n >= 2.
template <typename T>
void ReduceNative(void* const* out, int num_out, const void* const* in, int n,
                  size_t count, ReduceOp op) {
  // An 8 KiB accumulator whatever the type.
  constexpr size_t kNativeTile = kTile * sizeof(float) / sizeof(T);
  alignas(64) T acc[kNativeTile];
  for (size_t base = 0; base < count; base += kNativeTile) {
    const size_t len = std::min(kNativeTile, count - base);
    const T* p0 = static_cast<const T*>(in[0]) + base;
    const T* p1 = static_cast<const T*>(in[1]) + base;
    if (op == ReduceOp::kMax) {
      for (size_t j = 0; j < len; ++j) acc[j] = p0[j] < p1[j] ? p1[j] : p0[j];
      for (int k = 2; k < n; ++k) {
        const T* p = static_cast<const T*>(in[k]) + base;
        for (size_t j = 0; j < len; ++j) acc[j] = acc[j] < p[j] ? p[j] : acc[j];
      }
    } else if (op == ReduceOp::kMin) {
      for (size_t j = 0; j < len; ++j) acc[j] = p1[j] < p0[j] ? p1[j] : p0[j];
      for (int k = 2; k < n; ++k) {
        const T* p = static_cast<const T*>(in[k]) + base;
        for (size_t j = 0; j < len; ++j) acc[j] = p[j] < acc[j] ? p[j] : acc[j];
      }
    } else {
      for (size_t j = 0; j < len; ++j) acc[j] = Add(p0[j], p1[j]);
      for (int k = 2; k < n; ++k) {
        const T* p = static_cast<const T*>(in[k]) + base;
        for (size_t j = 0; j < len; ++j) acc[j] = Add(acc[j], p[j]);
      }
      if (op == ReduceOp::kAvg) {
        for (size_t j = 0; j < len; ++j) acc[j] = DivideByCount(acc[j], n);
      }
    }
    for (int o = 0; o < num_out; ++o) {
      std::memcpy(static_cast<T*>(out[o]) + base, acc, len * sizeof(T));
    }
  }
}

// 16-bit inputs are widened a tile at a time with the vectorised cast
// kernels (bit-exact with tensor/half.h), reduced in f32 like
// ReduceNative<float>, and narrowed once.
template <void (*Widen)(float*, const uint16_t*, size_t),
          void (*Narrow)(uint16_t*, const float*, size_t)>
void Reduce16(void* const* out, int num_out, const void* const* in, int n,
              size_t count, ReduceOp op) {
  alignas(64) float acc[kTile];
  alignas(64) float x[kTile];
  const float divisor = static_cast<float>(n);
  for (size_t base = 0; base < count; base += kTile) {
    const size_t len = std::min(kTile, count - base);
    Widen(acc, static_cast<const uint16_t*>(in[0]) + base, len);
    for (int k = 1; k < n; ++k) {
      Widen(x, static_cast<const uint16_t*>(in[k]) + base, len);
      if (op == ReduceOp::kMax) {
        for (size_t j = 0; j < len; ++j) acc[j] = acc[j] < x[j] ? x[j] : acc[j];
      } else if (op == ReduceOp::kMin) {
        for (size_t j = 0; j < len; ++j) acc[j] = x[j] < acc[j] ? x[j] : acc[j];
      } else {
        for (size_t j = 0; j < len; ++j) acc[j] += x[j];
      }
    }
    if (op == ReduceOp::kAvg) {
      for (size_t j = 0; j < len; ++j) acc[j] /= divisor;
    }
    uint16_t* first = static_cast<uint16_t*>(out[0]) + base;
    Narrow(first, acc, len);
    for (int o = 1; o < num_out; ++o) {
      std::memcpy(static_cast<uint16_t*>(out[o]) + base, first,
                  len * sizeof(uint16_t));
    }
  }
}

}  // namespace

void ReduceIntoEach(void* const* out, int num_out, const void* const* in, int n,
                    size_t count, DType dtype, ReduceOp op) {
  if (count == 0) return;
  if (n == 1) {
    for (int o = 0; o < num_out; ++o) {
      if (out[o] != in[0]) {
        std::memcpy(out[o], in[0], count * ElementSize(dtype));
      }
    }
    return;
  }
  switch (dtype) {
    case DType::kF32:
      ReduceNative<float>(out, num_out, in, n, count, op);
      return;
    case DType::kF16:
      Reduce16<CastF16ToF32, CastF32ToF16>(out, num_out, in, n, count, op);
      return;
    case DType::kBF16:
      Reduce16<CastBF16ToF32, CastF32ToBF16>(out, num_out, in, n, count, op);
      return;
    case DType::kU8:
      ReduceNative<uint8_t>(out, num_out, in, n, count, op);
      return;
    case DType::kI32:
      ReduceNative<int32_t>(out, num_out, in, n, count, op);
      return;
    case DType::kI64:
      ReduceNative<int64_t>(out, num_out, in, n, count, op);
      return;
    case DType::kF64:
      ReduceNative<double>(out, num_out, in, n, count, op);
      return;
  }
}

void ReduceInto(void* out, const void* const* in, int n, size_t count,
                DType dtype, ReduceOp op) {
  ReduceIntoEach(&out, 1, in, n, count, dtype, op);
}

}  // namespace internal
}  // namespace comm
}  // namespace chunkzero
