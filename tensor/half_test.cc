// Exhaustive checks of the scalar reference conversions in half.h: against
// the hardware (F16C) where the CPU has it, and against an independent
// formulation in double arithmetic.
#include "tensor/half.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "tensor/cpu/cpu_features.h"
#include "tensor/cpu/kernel_test_util.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CZ_HAVE_F16C_TEST 1
#else
#define CZ_HAVE_F16C_TEST 0
#endif

namespace chunkzero {
namespace {

bool IsNanF16(uint16_t h) { return (h & 0x7fffu) > 0x7c00u; }
bool IsNanBF16(uint16_t b) { return (b & 0x7fffu) > 0x7f80u; }

// Round to nearest even of |x| onto the grid of finite values given by
// `decode` (a monotone map from magnitude codes to values), by comparing
// distances in double (exact here). Codes 0..max_finite are finite;
// max_finite + 1 is Inf, which is the rounding of anything at or above the
// midpoint between the largest finite value and `overflow_value`.
uint32_t RoundMagnitude(double x, uint32_t max_finite, double overflow_value,
                        double (*decode)(uint32_t)) {
  // Binary search for the largest code with value <= x.
  uint32_t lo = 0, hi = max_finite + 1;
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    if (decode(mid) <= x) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const double below = decode(lo);
  const double above = lo == max_finite ? overflow_value : decode(lo + 1);
  if (x >= above) return lo + 1;  // Only when lo == max_finite.
  const double d_below = x - below, d_above = above - x;
  if (d_below < d_above) return lo;
  if (d_above < d_below) return lo + 1;
  return (lo & 1u) ? lo + 1 : lo;
}

double DecodeF16Magnitude(uint32_t code) {
  const uint32_t e = code >> 10, m = code & 0x3ffu;
  if (e == 0) return std::ldexp(static_cast<double>(m), -24);
  return std::ldexp(static_cast<double>(1024 + m), static_cast<int>(e) - 25);
}
double DecodeBF16Magnitude(uint32_t code) {
  const uint32_t e = code >> 7, m = code & 0x7fu;
  if (e == 0) return std::ldexp(static_cast<double>(m), -133);
  return std::ldexp(static_cast<double>(128 + m), static_cast<int>(e) - 134);
}

// f32 -> f16 and f32 -> bf16 written independently of half.h.
uint16_t IndependentToF16(float f) {
  const uint32_t x = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  if (std::isnan(f)) return sign | 0x7e00u | ((x >> 13) & 0x3ffu);
  if (std::isinf(f)) return sign | 0x7c00u;
  return sign | static_cast<uint16_t>(
                    RoundMagnitude(std::fabs(static_cast<double>(f)), 0x7bffu,
                                   65536.0, DecodeF16Magnitude));
}
uint16_t IndependentToBF16(float f) {
  const uint32_t x = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  if (std::isnan(f)) return static_cast<uint16_t>(x >> 16) | 0x0040u;
  if (std::isinf(f)) return sign | 0x7f80u;
  return sign | static_cast<uint16_t>(
                    RoundMagnitude(std::fabs(static_cast<double>(f)), 0x7f7fu,
                                   std::ldexp(1.0, 128), DecodeBF16Magnitude));
}

// f32 inputs that probe every rounding boundary of f16 and bf16: every
// midpoint between neighbouring 16-bit values (and each one's f32
// neighbours), the 16-bit values themselves, the subnormal and overflow
// boundaries, zeros, infinities and NaNs with payloads; both signs.
std::vector<float> BoundaryInputs() {
  std::vector<uint32_t> bits;
  auto add_around = [&](uint32_t b) {
    for (int d = -2; d <= 2; ++d) bits.push_back(b + d);
  };
  for (uint32_t h = 0; h < 0x7c00u; ++h) {
    const float v = HalfBitsToFloat(static_cast<uint16_t>(h));
    const float next = HalfBitsToFloat(static_cast<uint16_t>(h + 1));
    add_around(FloatBits(v));
    // The midpoint is exact in f32 (f16 has 11 significant bits).
    add_around(FloatBits(static_cast<float>(
        (static_cast<double>(v) + static_cast<double>(next)) / 2)));
  }
  for (uint32_t b = 0; b < 0x7f80u; ++b) {
    add_around(b << 16);
    add_around((b << 16) | 0x8000u);  // bf16 midpoints.
  }
  for (uint32_t b :
       {0x00000000u, 0x00000001u, 0x007fffffu, 0x00800000u, 0x33000000u,
        0x33000001u, 0x387fc000u, 0x38800000u, 0x477fe000u, 0x477fefffu,
        0x477ff000u, 0x477ff001u, 0x7f7fffffu, 0x7f7f7fffu, 0x7f7f8000u,
        0x7f800000u, 0x7f800001u, 0x7fbfffffu, 0x7fc00000u, 0x7fc00001u,
        0x7fffffffu, 0x7fa00000u, 0x7f802000u, 0x7f801fffu}) {
    add_around(b);
  }
  std::vector<float> out;
  out.reserve(bits.size() * 2);
  for (uint32_t b : bits) {
    out.push_back(BitsToFloat(b & 0x7fffffffu));
    out.push_back(BitsToFloat(b | 0x80000000u));
  }
  return out;
}

std::vector<float> RandomInputs(size_t count) {
  std::mt19937 rng(1234);
  std::vector<float> out(count);
  for (float& f : out) f = BitsToFloat(static_cast<uint32_t>(rng()));
  return out;
}

TEST(Half, F16RoundTripsThroughF32ForAll65536) {
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const uint16_t half = static_cast<uint16_t>(h);
    const uint16_t back = FloatToHalfBits(HalfBitsToFloat(half));
    if (IsNanF16(half)) {
      // Stays NaN, made quiet, same sign and payload.
      ASSERT_EQ(back, half | 0x0200u) << absl::StrFormat("0x%04x", h);
    } else {
      ASSERT_EQ(back, half) << absl::StrFormat("0x%04x", h);
    }
  }
}

TEST(Half, BF16RoundTripsThroughF32ForAll65536) {
  for (uint32_t b = 0; b <= 0xffffu; ++b) {
    const uint16_t bf = static_cast<uint16_t>(b);
    const float f = BFloat16BitsToFloat(bf);
    ASSERT_EQ(FloatBits(f), b << 16);
    const uint16_t back = FloatToBFloat16Bits(f);
    if (IsNanBF16(bf)) {
      ASSERT_EQ(back, bf | 0x0040u) << absl::StrFormat("0x%04x", b);
    } else {
      ASSERT_EQ(back, bf) << absl::StrFormat("0x%04x", b);
    }
  }
}

TEST(Half, F16ToF32MatchesIndependentDecodeForAll65536) {
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const uint16_t half = static_cast<uint16_t>(h);
    const float got = HalfBitsToFloat(half);
    if (IsNanF16(half)) {
      ASSERT_TRUE(std::isnan(got));
      ASSERT_EQ(FloatBits(got),
                ((h & 0x8000u) << 16) | 0x7fc00000u | ((h & 0x3ffu) << 13));
      continue;
    }
    const double magnitude =
        (h & 0x7fffu) == 0x7c00u ? INFINITY : DecodeF16Magnitude(h & 0x7fffu);
    ASSERT_EQ(static_cast<double>(got), (h & 0x8000u) ? -magnitude : magnitude)
        << absl::StrFormat("0x%04x", h);
    ASSERT_EQ(std::signbit(got), (h & 0x8000u) != 0);
  }
}

// Runs `check(x)` over the boundary inputs and 4M random bit patterns;
// check returns true when x passes. Reports the count and the first failure.
template <typename Check>
void CheckAllInputs(const char* what, Check check) {
  for (const std::vector<float>& inputs :
       {BoundaryInputs(), RandomInputs(size_t{1} << 22)}) {
    size_t failures = 0;
    uint32_t first = 0;
    for (float x : inputs) {
      if (!check(x) && failures++ == 0) first = FloatBits(x);
    }
    EXPECT_EQ(failures, 0u)
        << what << ": " << failures << " of " << inputs.size()
        << " inputs; first " << absl::StrFormat("0x%08x", first);
  }
}

TEST(Half, F32ToF16MatchesIndependentRounding) {
  CheckAllInputs("FloatToHalfBits vs independent", [](float x) {
    return FloatToHalfBits(x) == IndependentToF16(x);
  });
}

TEST(Half, F32ToBF16MatchesIndependentRounding) {
  CheckAllInputs("FloatToBFloat16Bits vs independent", [](float x) {
    return FloatToBFloat16Bits(x) == IndependentToBF16(x);
  });
}

#if CZ_HAVE_F16C_TEST
__attribute__((target("f16c"))) uint16_t HardwareToF16(float x) {
  return static_cast<uint16_t>(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float HardwareFromF16(uint16_t h) {
  return _cvtsh_ss(h);
}
#endif

class HalfHardware : public ::testing::Test {
 protected:
  void SetUp() override {
#if CZ_HAVE_F16C_TEST
    if (GetCpuFeatures().avx2) return;  // avx2 implies F16C here.
#endif
    GTEST_SKIP() << "no F16C on this CPU";
  }
};

#if CZ_HAVE_F16C_TEST
TEST_F(HalfHardware, F16ToF32MatchesF16CForAll65536) {
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const uint16_t half = static_cast<uint16_t>(h);
    ASSERT_EQ(FloatBits(HalfBitsToFloat(half)),
              FloatBits(HardwareFromF16(half)))
        << absl::StrFormat("0x%04x", h);
  }
}

TEST_F(HalfHardware, F32ToF16MatchesF16C) {
  CheckAllInputs("FloatToHalfBits vs F16C", [](float x) {
    return FloatToHalfBits(x) == HardwareToF16(x);
  });
}
#endif

}  // namespace
}  // namespace chunkzero
