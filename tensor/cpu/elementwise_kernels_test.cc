#include "tensor/cpu/elementwise_kernels.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tensor/cpu/internal/kernels_isa.h"
#include "tensor/cpu/kernel_test_util.h"
#include "tensor/half.h"

namespace chunkzero {
namespace {

using kernel_test::OffsetBuffer;

// Values spread over the whole finite range of each type, with zeros,
// subnormals, infinities and NaNs mixed in.
float RandomValue(std::mt19937& rng) {
  const uint32_t r = static_cast<uint32_t>(rng());
  switch (r % 16) {
    case 0:
      return 0.0f;
    case 1:
      return INFINITY;
    case 2:
      return -NAN;
    case 3:  // f32 subnormal.
      return BitsToFloat(r >> 9);
    default:  // Moderate magnitudes, so products land on all f16 ranges.
      return std::ldexp(static_cast<float>(r >> 8) / (1 << 24) - 0.5f,
                        static_cast<int>((r >> 4) % 40) - 24);
  }
}

// Storage types under test: loading, storing and the NaN test.
struct F32 {
  using T = float;
  static const char* Name() { return "f32"; }
  static float Load(T x) { return x; }
  static T Store(float v) { return v; }
  static bool IsNan(T x) { return std::isnan(x); }
  static uint32_t Bits(T x) { return FloatBits(x); }
};
struct F16 {
  using T = uint16_t;
  static const char* Name() { return "f16"; }
  static float Load(T x) { return HalfBitsToFloat(x); }
  static T Store(float v) { return FloatToHalfBits(v); }
  static bool IsNan(T x) { return (x & 0x7fffu) > 0x7c00u; }
  static uint32_t Bits(T x) { return x; }
};
struct BF16 {
  using T = uint16_t;
  static const char* Name() { return "bf16"; }
  static float Load(T x) { return BFloat16BitsToFloat(x); }
  static T Store(float v) { return FloatToBFloat16Bits(v); }
  static bool IsNan(T x) { return (x & 0x7fffu) > 0x7f80u; }
  static uint32_t Bits(T x) { return x; }
};

// Same bits, or both NaN (the payload of a NaN made from several NaN
// operands is not specified). Returns "" or the first mismatch.
template <typename D>
std::string Compare(const typename D::T* got,
                    const std::vector<typename D::T>& want) {
  size_t mismatches = 0, first = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const bool same = D::Bits(got[i]) == D::Bits(want[i]) ||
                      (D::IsNan(got[i]) && D::IsNan(want[i]));
    if (!same && mismatches++ == 0) first = i;
  }
  if (mismatches == 0) return "";
  return absl::StrCat(mismatches, " of ", want.size(), " differ; first at ",
                      first, ": got ", D::Load(got[first]), " want ",
                      D::Load(want[first]));
}

template <typename D>
void CheckScaleAndAxpy(KernelIsa isa,
                       void (*scale)(KernelIsa, typename D::T*, float, size_t),
                       void (*axpy)(KernelIsa, typename D::T*, float,
                                    const typename D::T*, size_t)) {
  using T = typename D::T;
  for (size_t n : kernel_test::TestLengths()) {
    for (size_t offset : kernel_test::TestOffsets()) {
      // Several factors on short arrays; one on long ones (keeps the test
      // fast under the sanitizers).
      for (float a : {0.75f, -3.0e-3f, 1.0f / 1024}) {
        if (n > 10000 && a != 0.75f) continue;
        SCOPED_TRACE(
            absl::StrCat(D::Name(), " n=", n, " offset=", offset, " a=", a));
        std::mt19937 rng(static_cast<uint32_t>(n * 7 + offset));
        OffsetBuffer<T> x(n, offset), y(n, offset);
        for (size_t i = 0; i < n; ++i) {
          x[i] = D::Store(RandomValue(rng));
          y[i] = D::Store(RandomValue(rng));
        }

        std::vector<T> want(n);
        for (size_t i = 0; i < n; ++i) {
          want[i] = D::Store(std::fma(a, D::Load(x[i]), D::Load(y[i])));
        }
        axpy(isa, y.data(), a, x.data(), n);
        EXPECT_EQ(Compare<D>(y.data(), want), "") << "axpy";
        EXPECT_TRUE(y.GuardIntact()) << "axpy";

        for (size_t i = 0; i < n; ++i) want[i] = D::Store(D::Load(x[i]) * a);
        scale(isa, x.data(), a, n);
        EXPECT_EQ(Compare<D>(x.data(), want), "") << "scale";
        EXPECT_TRUE(x.GuardIntact()) << "scale";
      }
    }
  }
}

class ElementwiseKernelsTest : public kernel_test::IsaTest {};

TEST_P(ElementwiseKernelsTest, F32MatchesReference) {
  CheckScaleAndAxpy<F32>(isa(), &kernels_internal::ScaleF32,
                         &kernels_internal::AxpyF32);
}
TEST_P(ElementwiseKernelsTest, F16MatchesReference) {
  CheckScaleAndAxpy<F16>(isa(), &kernels_internal::ScaleF16,
                         &kernels_internal::AxpyF16);
}
TEST_P(ElementwiseKernelsTest, BF16MatchesReference) {
  CheckScaleAndAxpy<BF16>(isa(), &kernels_internal::ScaleBF16,
                          &kernels_internal::AxpyBF16);
}

// Axpy is fused: a*x + y rounded once, which an unfused multiply-add gets
// wrong for this input.
TEST_P(ElementwiseKernelsTest, AxpyF32IsFused) {
  const float x = 1.0f + std::ldexp(1.0f, -23);  // 1 + 2^-23
  const float a = 1.0f - std::ldexp(1.0f, -23);  // a*x = 1 - 2^-46
  std::vector<float> y(40, -1.0f), xs(40, x);
  kernels_internal::AxpyF32(isa(), y.data(), a, xs.data(), y.size());
  for (float v : y) ASSERT_EQ(v, -std::ldexp(1.0f, -46));
}

INSTANTIATE_ALL_ISAS(ElementwiseKernelsTest);

TEST(Copy, CopiesEveryByte) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4095}, size_t{1} << 20,
                       (size_t{3} << 20) + 17}) {
    for (size_t offset : {size_t{0}, size_t{1}, size_t{3}}) {
      SCOPED_TRACE(absl::StrCat("bytes=", bytes, " offset=", offset));
      OffsetBuffer<unsigned char> in(bytes, offset), out(bytes, 0);
      for (size_t i = 0; i < bytes; ++i) {
        in[i] = static_cast<unsigned char>(i * 131 + 7);
      }
      Copy(out.data(), in.data(), bytes);
      EXPECT_EQ(kernel_test::FirstBitMismatch(out.data(), in.data(), bytes),
                "");
      EXPECT_TRUE(out.GuardIntact());
    }
  }
}

TEST(Elementwise, DTypeDispatchMatchesTypedKernels) {
  std::vector<float> x32 = {1.0f, -2.5f, 3.0f}, y32 = {0.5f, 0.25f, -1.0f};
  std::vector<uint16_t> x16(3), y16(3);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    void* x = x32.data();
    void* y = y32.data();
    if (dtype != DType::kF32) {
      for (size_t i = 0; i < 3; ++i) {
        x16[i] = dtype == DType::kF16 ? FloatToHalfBits(x32[i])
                                      : FloatToBFloat16Bits(x32[i]);
        y16[i] = dtype == DType::kF16 ? FloatToHalfBits(y32[i])
                                      : FloatToBFloat16Bits(y32[i]);
      }
      x = x16.data();
      y = y16.data();
    }
    ASSERT_TRUE(Axpy(y, dtype, 2.0f, x, 3).ok());  // y = {2.5, -4.75, 5}
    ASSERT_TRUE(Scale(y, dtype, 2.0f, 3).ok());    // y = {5, -9.5, 10}
    float got[3];
    for (size_t i = 0; i < 3; ++i) {
      got[i] = dtype == DType::kF32   ? y32[i]
               : dtype == DType::kF16 ? HalfBitsToFloat(y16[i])
                                      : BFloat16BitsToFloat(y16[i]);
    }
    EXPECT_EQ(got[0], 5.0f);
    EXPECT_EQ(got[1], -9.5f);
    EXPECT_EQ(got[2], 10.0f);
    y32 = {0.5f, 0.25f, -1.0f};
  }
}

TEST(Elementwise, RejectsBadArguments) {
  float x = 1.0f;
  const DType bad = static_cast<DType>(9);
  EXPECT_EQ(Scale(&x, bad, 2.0f, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Scale(nullptr, DType::kF32, 2.0f, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Axpy(&x, DType::kF32, 2.0f, nullptr, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Axpy(nullptr, DType::kF32, 2.0f, &x, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Axpy(&x, bad, 2.0f, &x, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Scale(nullptr, DType::kF16, 2.0f, 0).ok());
  EXPECT_EQ(x, 1.0f);
  // Named dtypes that do not compute are refused by name.
  EXPECT_EQ(Scale(&x, bad, 2.0f, 1).message(), "Scale: unknown dtype value 9");
  EXPECT_EQ(Scale(&x, DType::kI32, 2.0f, 1).message(),
            "Scale: i32 is not f32, f16 or bf16");
  EXPECT_EQ(Axpy(&x, DType::kF64, 2.0f, &x, 1).message(),
            "Axpy: f64 is not f32, f16 or bf16");
  EXPECT_EQ(x, 1.0f);
}

}  // namespace
}  // namespace chunkzero
