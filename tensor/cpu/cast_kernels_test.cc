#include "tensor/cpu/cast_kernels.h"

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

using kernel_test::FirstBitMismatch;
using kernel_test::OffsetBuffer;

// Inputs with many special values: every 16-bit pattern widened (so f32
// inputs include all f16/bf16 values, Inf and NaN), f16 midpoints, and
// random bit patterns.
std::vector<float> MixedF32(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t r = static_cast<uint32_t>(rng());
    switch (i % 4) {
      case 0:
        out[i] = BitsToFloat(r);
        break;
      case 1:
        out[i] = HalfBitsToFloat(static_cast<uint16_t>(r));
        break;
      case 2:  // Exactly halfway between two f16 values, or next to it.
        out[i] = BitsToFloat(
            (FloatBits(HalfBitsToFloat(static_cast<uint16_t>(r & 0x7bff))) |
             0x1000u) +
            ((r >> 16) % 3) - 1);
        break;
      default:
        out[i] = BitsToFloat((r & 0xffff8000u) + ((r >> 28) % 3) - 1);
    }
  }
  return out;
}

std::vector<uint16_t> Random16(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint16_t> out(n);
  for (uint16_t& v : out) v = static_cast<uint16_t>(rng());
  return out;
}

class CastKernelsTest : public kernel_test::IsaTest {
 protected:
  void TearDown() override {
    kernels_internal::SetStreamingThresholdForTesting(
        kernels_internal::kDefaultStreamingThresholdBytes);
  }
};

TEST_P(CastKernelsTest, F16ToF32AndBackForAll65536) {
  for (size_t offset : kernel_test::TestOffsets()) {
    SCOPED_TRACE(absl::StrCat("offset=", offset));
    OffsetBuffer<uint16_t> in(65536, offset);
    for (uint32_t h = 0; h < 65536; ++h) in[h] = static_cast<uint16_t>(h);
    OffsetBuffer<float> wide(65536, offset);
    kernels_internal::CastF16ToF32(isa(), wide.data(), in.data(), 65536);
    std::vector<float> want(65536);
    for (uint32_t h = 0; h < 65536; ++h) {
      want[h] = HalfBitsToFloat(static_cast<uint16_t>(h));
    }
    EXPECT_EQ(FirstBitMismatch(wide.data(), want.data(), 65536), "");

    OffsetBuffer<uint16_t> back(65536, offset);
    kernels_internal::CastF32ToF16(isa(), back.data(), wide.data(), 65536);
    std::vector<uint16_t> want_back(65536);
    for (uint32_t h = 0; h < 65536; ++h) {
      const bool nan = (h & 0x7fffu) > 0x7c00u;
      // NaN stays NaN, is made quiet, keeps its sign and payload.
      want_back[h] = static_cast<uint16_t>(nan ? (h | 0x0200u) : h);
    }
    EXPECT_EQ(FirstBitMismatch(back.data(), want_back.data(), 65536), "");
    EXPECT_TRUE(wide.GuardIntact() && back.GuardIntact());
  }
}

TEST_P(CastKernelsTest, BF16ToF32AndBackForAll65536) {
  for (size_t offset : kernel_test::TestOffsets()) {
    SCOPED_TRACE(absl::StrCat("offset=", offset));
    OffsetBuffer<uint16_t> in(65536, offset);
    for (uint32_t b = 0; b < 65536; ++b) in[b] = static_cast<uint16_t>(b);
    OffsetBuffer<float> wide(65536, offset);
    kernels_internal::CastBF16ToF32(isa(), wide.data(), in.data(), 65536);
    std::vector<uint32_t> want(65536);
    for (uint32_t b = 0; b < 65536; ++b) want[b] = b << 16;
    EXPECT_EQ(FirstBitMismatch(reinterpret_cast<const uint32_t*>(wide.data()),
                               want.data(), 65536),
              "");

    OffsetBuffer<uint16_t> back(65536, offset);
    kernels_internal::CastF32ToBF16(isa(), back.data(), wide.data(), 65536);
    std::vector<uint16_t> want_back(65536);
    for (uint32_t b = 0; b < 65536; ++b) {
      const bool nan = (b & 0x7fffu) > 0x7f80u;
      want_back[b] = static_cast<uint16_t>(nan ? (b | 0x0040u) : b);
    }
    EXPECT_EQ(FirstBitMismatch(back.data(), want_back.data(), 65536), "");
  }
}

TEST_P(CastKernelsTest, SixteenBitToSixteenBitForAll65536) {
  std::vector<uint16_t> in(65536);
  for (uint32_t h = 0; h < 65536; ++h) in[h] = static_cast<uint16_t>(h);
  std::vector<uint16_t> got(65536), want(65536);
  kernels_internal::CastF16ToBF16(isa(), got.data(), in.data(), 65536);
  for (uint32_t h = 0; h < 65536; ++h) {
    want[h] = FloatToBFloat16Bits(HalfBitsToFloat(static_cast<uint16_t>(h)));
  }
  EXPECT_EQ(FirstBitMismatch(got.data(), want.data(), 65536), "")
      << "f16->bf16";
  kernels_internal::CastBF16ToF16(isa(), got.data(), in.data(), 65536);
  for (uint32_t b = 0; b < 65536; ++b) {
    want[b] = FloatToHalfBits(BFloat16BitsToFloat(static_cast<uint16_t>(b)));
  }
  EXPECT_EQ(FirstBitMismatch(got.data(), want.data(), 65536), "")
      << "bf16->f16";
}

// Every cast at odd lengths and misaligned offsets equals the scalar
// reference, and writes nothing past the end; with and without
// non-temporal stores.
TEST_P(CastKernelsTest, MatchesReferenceAtAllLengthsAndOffsets) {
  for (size_t threshold :
       {kernels_internal::kDefaultStreamingThresholdBytes, size_t{0}}) {
    kernels_internal::SetStreamingThresholdForTesting(threshold);
    for (size_t n : kernel_test::TestLengths()) {
      for (size_t offset : kernel_test::TestOffsets()) {
        SCOPED_TRACE(absl::StrCat("n=", n, " offset=", offset,
                                  " streaming_threshold=", threshold));
        const std::vector<float> f32 = MixedF32(n, static_cast<uint32_t>(n));
        const std::vector<uint16_t> u16 =
            Random16(n, static_cast<uint32_t>(n + 1));
        OffsetBuffer<float> in32(n, offset), out32(n, offset);
        OffsetBuffer<uint16_t> in16(n, offset), out16(n, offset);
        std::copy(f32.begin(), f32.end(), in32.data());
        std::copy(u16.begin(), u16.end(), in16.data());
        std::vector<uint16_t> want16(n);
        std::vector<float> want32(n);

        kernels_internal::CastF32ToF16(isa(), out16.data(), in32.data(), n);
        for (size_t i = 0; i < n; ++i) want16[i] = FloatToHalfBits(f32[i]);
        EXPECT_EQ(FirstBitMismatch(out16.data(), want16.data(), n), "")
            << "f32->f16";
        EXPECT_TRUE(out16.GuardIntact()) << "f32->f16";

        kernels_internal::CastF32ToBF16(isa(), out16.data(), in32.data(), n);
        for (size_t i = 0; i < n; ++i) want16[i] = FloatToBFloat16Bits(f32[i]);
        EXPECT_EQ(FirstBitMismatch(out16.data(), want16.data(), n), "")
            << "f32->bf16";
        EXPECT_TRUE(out16.GuardIntact()) << "f32->bf16";

        kernels_internal::CastF16ToF32(isa(), out32.data(), in16.data(), n);
        for (size_t i = 0; i < n; ++i) want32[i] = HalfBitsToFloat(u16[i]);
        EXPECT_EQ(FirstBitMismatch(out32.data(), want32.data(), n), "")
            << "f16->f32";
        EXPECT_TRUE(out32.GuardIntact()) << "f16->f32";

        kernels_internal::CastBF16ToF32(isa(), out32.data(), in16.data(), n);
        for (size_t i = 0; i < n; ++i) want32[i] = BFloat16BitsToFloat(u16[i]);
        EXPECT_EQ(FirstBitMismatch(out32.data(), want32.data(), n), "")
            << "bf16->f32";
        EXPECT_TRUE(out32.GuardIntact()) << "bf16->f32";
      }
    }
  }
}

INSTANTIATE_ALL_ISAS(CastKernelsTest);

TEST(Cast, DispatchesEveryDTypePair) {
  const size_t n = 1001;
  const std::vector<float> f32 = MixedF32(n, 7);
  std::vector<uint16_t> f16(n), bf16(n);
  for (size_t i = 0; i < n; ++i) {
    f16[i] = FloatToHalfBits(f32[i]);
    bf16[i] = FloatToBFloat16Bits(f32[i]);
  }
  auto data = [&](DType t) -> const void* {
    if (t == DType::kF32) return f32.data();
    return t == DType::kF16 ? f16.data() : bf16.data();
  };
  auto convert = [](DType to, DType from, const void* in, size_t i) {
    float v;
    if (from == DType::kF32) {
      v = static_cast<const float*>(in)[i];
    } else {
      const uint16_t bits = static_cast<const uint16_t*>(in)[i];
      v = from == DType::kF16 ? HalfBitsToFloat(bits)
                              : BFloat16BitsToFloat(bits);
    }
    if (to == DType::kF32) return FloatBits(v);
    return static_cast<uint32_t>(to == DType::kF16 ? FloatToHalfBits(v)
                                                   : FloatToBFloat16Bits(v));
  };
  for (DType from : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (DType to : {DType::kF32, DType::kF16, DType::kBF16}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(from), " -> ", DTypeName(to)));
      std::vector<unsigned char> out(n * ElementSize(to));
      ASSERT_TRUE(Cast(out.data(), to, data(from), from, n).ok());
      size_t mismatches = 0;
      for (size_t i = 0; i < n; ++i) {
        uint32_t got = 0;
        std::memcpy(&got, out.data() + i * ElementSize(to), ElementSize(to));
        mismatches += got != convert(to, from, data(from), i);
      }
      EXPECT_EQ(mismatches, 0u);
    }
  }
}

TEST(Cast, PublicFunctionsUseTheReference) {
  const std::vector<float> f32 = MixedF32(300007, 11);
  std::vector<uint16_t> got(f32.size()), want(f32.size());
  CastF32ToF16(got.data(), f32.data(), f32.size());
  for (size_t i = 0; i < f32.size(); ++i) want[i] = FloatToHalfBits(f32[i]);
  EXPECT_EQ(FirstBitMismatch(got.data(), want.data(), f32.size()), "");
  std::vector<float> back(f32.size()), want_back(f32.size());
  CastF16ToF32(back.data(), got.data(), got.size());
  for (size_t i = 0; i < got.size(); ++i)
    want_back[i] = HalfBitsToFloat(got[i]);
  EXPECT_EQ(FirstBitMismatch(back.data(), want_back.data(), got.size()), "");
}

TEST(Cast, RejectsBadArguments) {
  float f = 1.0f;
  uint16_t h = 0;
  const DType bad = static_cast<DType>(7);
  EXPECT_EQ(Cast(&h, bad, &f, DType::kF32, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Cast(&h, DType::kF16, &f, bad, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Cast(nullptr, DType::kF16, &f, DType::kF32, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Cast(&h, DType::kF16, nullptr, DType::kF32, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Cast(nullptr, DType::kF16, nullptr, DType::kF32, 0).ok());
  EXPECT_TRUE(Cast(&h, DType::kF16, &f, DType::kF32, 1).ok());
  EXPECT_EQ(h, 0x3c00);
}

// CastScaled gives the bits of scaling a copy in f32 and then casting it
// (the scalar reference), for every compute dtype, at lengths that end
// inside, at and past its blocks, from 1 to 2 threads' worth of them, and
// for a scale that overflows some values to Inf.
TEST(CastScaled, EqualsScalingInF32ThenOneRounding) {
  for (const float scale : {0.5f, 1.0f / 3.0f, 1e30f}) {
    for (const size_t n : {size_t{1}, size_t{4095}, size_t{4096}, size_t{4097},
                           size_t{300007}}) {
      SCOPED_TRACE(absl::StrCat("scale ", scale, ", n ", n));
      const std::vector<float> in = MixedF32(n, 17);
      std::vector<float> scaled(n);
      for (size_t i = 0; i < n; ++i) scaled[i] = in[i] * scale;
      std::vector<float> f32(n);
      ASSERT_TRUE(
          CastScaled(f32.data(), DType::kF32, in.data(), scale, n).ok());
      EXPECT_EQ(FirstBitMismatch(f32.data(), scaled.data(), n), "");
      std::vector<uint16_t> f16(n), bf16(n), want16(n), want_bf16(n);
      ASSERT_TRUE(
          CastScaled(f16.data(), DType::kF16, in.data(), scale, n).ok());
      ASSERT_TRUE(
          CastScaled(bf16.data(), DType::kBF16, in.data(), scale, n).ok());
      for (size_t i = 0; i < n; ++i) {
        want16[i] = FloatToHalfBits(scaled[i]);
        want_bf16[i] = FloatToBFloat16Bits(scaled[i]);
      }
      EXPECT_EQ(FirstBitMismatch(f16.data(), want16.data(), n), "");
      EXPECT_EQ(FirstBitMismatch(bf16.data(), want_bf16.data(), n), "");
    }
  }
}

TEST(CastScaled, RejectsBadArguments) {
  float f = 3.0f;
  uint16_t h = 0;
  const absl::Status bad_dtype =
      CastScaled(&h, static_cast<DType>(7), &f, 1.0f, 1);
  EXPECT_EQ(bad_dtype.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_dtype.message().find("CastScaled"), absl::string_view::npos)
      << bad_dtype;
  EXPECT_EQ(CastScaled(&h, DType::kI32, &f, 1.0f, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CastScaled(nullptr, DType::kF16, &f, 1.0f, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CastScaled(&h, DType::kF16, nullptr, 1.0f, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(CastScaled(nullptr, DType::kF16, nullptr, 1.0f, 0).ok());
  EXPECT_TRUE(CastScaled(&h, DType::kF16, &f, 0.5f, 1).ok());
  EXPECT_EQ(h, 0x3e00);  // 1.5 in f16.
}

}  // namespace
}  // namespace chunkzero
