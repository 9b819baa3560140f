#include "tensor/cpu/reduction_kernels.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "absl/base/casts.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/parallel_for.h"
#include "gtest/gtest.h"
#include "tensor/cpu/internal/kernels_isa.h"
#include "tensor/cpu/kernel_test_util.h"
#include "tensor/half.h"

namespace chunkzero {
namespace {

using kernel_test::OffsetBuffer;

class ThreadsOverride {
 public:
  explicit ThreadsOverride(int n) { SetParallelThreadsForTesting(n); }
  ~ThreadsOverride() { SetParallelThreadsForTesting(0); }
};

struct Case16 {
  const char* name;
  bool (*has_inf_or_nan)(KernelIsa, const uint16_t*, size_t);
  uint16_t specials[5];  // +Inf, -Inf, quiet NaN, signalling NaN, -NaN.
  uint16_t max_finite;
};

const Case16 kCases16[] = {
    {"f16",
     &kernels_internal::HasInfOrNanF16,
     {0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xffff},
     0x7bff},
    {"bf16",
     &kernels_internal::HasInfOrNanBF16,
     {0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffff},
     0x7f7f},
};

class ReductionKernelsTest : public kernel_test::IsaTest {};

// A single Inf or NaN is found at every position of arrays whose lengths
// cover the vector body and the scalar tail of every ISA.
TEST_P(ReductionKernelsTest, HasInfOrNanFindsEveryPosition) {
  for (size_t n : {1, 31, 64, 65, 127, 300}) {
    for (size_t offset : kernel_test::TestOffsets()) {
      OffsetBuffer<float> x(n, offset);
      for (size_t i = 0; i < n; ++i) x[i] = (i % 2 ? -1.0f : 1.0f) * 3.0e38f;
      x[n / 2] = -0.0f;
      EXPECT_FALSE(kernels_internal::HasInfOrNanF32(isa(), x.data(), n));
      for (float special :
           {INFINITY, -INFINITY, NAN, -NAN, BitsToFloat(0x7f800001u)}) {
        for (size_t pos = 0; pos < n; ++pos) {
          const float saved = x[pos];
          x[pos] = special;
          ASSERT_TRUE(kernels_internal::HasInfOrNanF32(isa(), x.data(), n))
              << "f32 n=" << n << " offset=" << offset << " pos=" << pos
              << " value=" << special;
          x[pos] = saved;
        }
      }
      for (const Case16& c : kCases16) {
        OffsetBuffer<uint16_t> h(n, offset);
        for (size_t i = 0; i < n; ++i) {
          h[i] = static_cast<uint16_t>(c.max_finite | (i % 2 ? 0x8000 : 0));
        }
        EXPECT_FALSE(c.has_inf_or_nan(isa(), h.data(), n)) << c.name;
        for (uint16_t special : c.specials) {
          for (size_t pos = 0; pos < n; ++pos) {
            const uint16_t saved = h[pos];
            h[pos] = special;
            ASSERT_TRUE(c.has_inf_or_nan(isa(), h.data(), n))
                << c.name << " n=" << n << " offset=" << offset
                << " pos=" << pos << absl::StrFormat(" bits=0x%04x", special);
            h[pos] = saved;
          }
        }
      }
    }
  }
}

// The multithreaded path (>= 128K elements) finds a single special value
// anywhere, with any thread count.
TEST_P(ReductionKernelsTest, HasInfOrNanOnLargeArrays) {
  const size_t n = 1000003;
  std::vector<float> x(n, 1.0f);
  std::vector<uint16_t> h(n, 0x3c00);  // 1.0 in f16, 2^-7 in bf16.
  for (int threads : {1, 2, 3, 8}) {
    ThreadsOverride override_threads(threads);
    EXPECT_FALSE(kernels_internal::HasInfOrNanF32(isa(), x.data(), n));
    EXPECT_FALSE(kernels_internal::HasInfOrNanF16(isa(), h.data(), n));
    EXPECT_FALSE(kernels_internal::HasInfOrNanBF16(isa(), h.data(), n));
    for (size_t pos : {size_t{0}, size_t{131071}, n / 2, n - 1}) {
      SCOPED_TRACE(absl::StrCat("threads=", threads, " pos=", pos));
      x[pos] = NAN;
      h[pos] = 0xff80;  // A NaN in f16, -Inf in bf16.
      EXPECT_TRUE(kernels_internal::HasInfOrNanF32(isa(), x.data(), n));
      EXPECT_TRUE(kernels_internal::HasInfOrNanF16(isa(), h.data(), n));
      EXPECT_TRUE(kernels_internal::HasInfOrNanBF16(isa(), h.data(), n));
      x[pos] = 1.0f;
      h[pos] = 0x3c00;
    }
  }
}

INSTANTIATE_ALL_ISAS(ReductionKernelsTest);

// Data for the sums: finite values over a wide range of magnitudes.
std::vector<float> SumInputF32(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> x(n);
  for (float& v : x) {
    const uint32_t r = static_cast<uint32_t>(rng());
    v = std::ldexp(static_cast<float>(r >> 8) / (1 << 24) - 0.5f,
                   static_cast<int>(r % 24) - 12);
  }
  return x;
}

// The documented order, written out plainly: blocks of 8192, lane k % 16,
// lane tree 8/4/2/1, block sums added in order to 0.0.
double DocumentedOrderSum(const std::vector<double>& values) {
  double total = 0.0;
  for (size_t begin = 0; begin < values.size(); begin += 8192) {
    double lanes[16] = {};
    const size_t end = std::min(values.size(), begin + 8192);
    for (size_t k = begin; k < end; ++k) {
      lanes[(k - begin) % 16] += values[k] * values[k];
    }
    for (size_t w = 8; w >= 1; w /= 2) {
      for (size_t i = 0; i < w; ++i) lanes[i] += lanes[i + w];
    }
    total += lanes[0];
  }
  return total;
}

struct SumCase {
  const char* name;
  // Runs the kernel for `isa` over data made from `f32` (converted to the
  // type), and fills `values` with the elements as doubles.
  std::function<double(KernelIsa)> run;
  std::vector<double> values;
};

std::vector<SumCase> MakeSumCases(size_t n, std::vector<float>& f32,
                                  std::vector<uint16_t>& f16,
                                  std::vector<uint16_t>& bf16) {
  f32 = SumInputF32(n, static_cast<uint32_t>(n));
  f16.resize(n);
  bf16.resize(n);
  std::vector<SumCase> cases(3);
  cases[0].name = "f32";
  cases[1].name = "f16";
  cases[2].name = "bf16";
  for (size_t i = 0; i < n; ++i) {
    f16[i] = FloatToHalfBits(f32[i]);
    bf16[i] = FloatToBFloat16Bits(f32[i]);
    cases[0].values.push_back(f32[i]);
    cases[1].values.push_back(HalfBitsToFloat(f16[i]));
    cases[2].values.push_back(BFloat16BitsToFloat(bf16[i]));
  }
  cases[0].run = [&f32, n](KernelIsa isa) {
    return kernels_internal::SumOfSquaresF32(isa, f32.data(), n);
  };
  cases[1].run = [&f16, n](KernelIsa isa) {
    return kernels_internal::SumOfSquaresF16(isa, f16.data(), n);
  };
  cases[2].run = [&bf16, n](KernelIsa isa) {
    return kernels_internal::SumOfSquaresBF16(isa, bf16.data(), n);
  };
  return cases;
}

// Every ISA and thread count gives the same bits, equal to the documented
// order, and within a relative 1e-12 of a plain sequential sum in long
// double. (A plain sum in double is itself off by up to ~1e-11 relative at
// 9M elements, more than the kernel's error bound of (516 + n / 8192) *
// 2^-53 = 2e-13 there, so it cannot be the yardstick.)
TEST(SumOfSquares, DeterministicAcrossIsasAndThreadsAndAccurate) {
  constexpr double kTolerance = 1e-12;  // Relative.
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{17}, size_t{8191},
                   size_t{8193}, size_t{100003}, size_t{131072},
                   (size_t{1} << 20) + 5, size_t{9} << 20}) {
    std::vector<float> f32;
    std::vector<uint16_t> f16, bf16;
    for (SumCase& c : MakeSumCases(n, f32, f16, bf16)) {
      SCOPED_TRACE(absl::StrCat(c.name, " n=", n));
      const double documented = DocumentedOrderSum(c.values);
      long double plain_sum = 0.0L;
      for (double v : c.values) plain_sum += static_cast<long double>(v) * v;
      const double plain = static_cast<double>(plain_sum);
      double largest_difference = 0.0;
      for (KernelIsa isa : SupportedKernelIsas()) {
        // The largest case (two batches of block sums) only with 1 and 8
        // threads, to keep the test fast under the sanitizers.
        for (int threads : {1, 2, 3, 8}) {
          if (n > (size_t{4} << 20) && threads != 1 && threads != 8) continue;
          ThreadsOverride override_threads(threads);
          const double got = c.run(isa);
          EXPECT_EQ(absl::bit_cast<uint64_t>(got),
                    absl::bit_cast<uint64_t>(documented))
              << KernelIsaName(isa) << " threads=" << threads
              << absl::StrFormat(": got %.17g, documented order %.17g", got,
                                 documented);
          largest_difference =
              std::max(largest_difference, std::fabs(got - plain));
        }
      }
      EXPECT_LE(largest_difference, kTolerance * plain)
          << absl::StrFormat("largest difference %.3g from the plain sum %.17g",
                             largest_difference, plain);
    }
  }
}

TEST(SumOfSquares, InfAndNanPropagate) {
  std::vector<float> x(1000, 1.0f);
  x[500] = INFINITY;
  EXPECT_TRUE(std::isinf(SumOfSquaresF32(x.data(), x.size())));
  x[999] = NAN;
  EXPECT_TRUE(std::isnan(SumOfSquaresF32(x.data(), x.size())));
}

TEST(Reductions, PublicAndDTypeDispatch) {
  const std::vector<float> x = {3.0f, -4.0f};
  const std::vector<uint16_t> h = {FloatToHalfBits(3.0f),
                                   FloatToHalfBits(-4.0f)};
  const std::vector<uint16_t> b = {FloatToBFloat16Bits(3.0f),
                                   FloatToBFloat16Bits(-4.0f)};
  EXPECT_EQ(SumOfSquaresF32(x.data(), 2), 25.0);
  EXPECT_EQ(SumOfSquaresF16(h.data(), 2), 25.0);
  EXPECT_EQ(SumOfSquaresBF16(b.data(), 2), 25.0);
  EXPECT_EQ(*SumOfSquares(x.data(), DType::kF32, 2), 25.0);
  EXPECT_EQ(*SumOfSquares(h.data(), DType::kF16, 2), 25.0);
  EXPECT_EQ(*SumOfSquares(b.data(), DType::kBF16, 2), 25.0);
  EXPECT_FALSE(*HasInfOrNan(x.data(), DType::kF32, 2));
  EXPECT_FALSE(*HasInfOrNan(h.data(), DType::kF16, 2));
  EXPECT_FALSE(*HasInfOrNan(b.data(), DType::kBF16, 2));
  const uint16_t inf16 = 0x7c00;
  EXPECT_TRUE(*HasInfOrNan(&inf16, DType::kF16, 1));
  EXPECT_FALSE(*HasInfOrNan(&inf16, DType::kBF16, 1));  // A finite bf16.
  EXPECT_TRUE(HasInfOrNanF16(&inf16, 1));
  EXPECT_FALSE(HasInfOrNanBF16(&inf16, 1));

  const DType bad = static_cast<DType>(5);
  EXPECT_EQ(SumOfSquares(x.data(), bad, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HasInfOrNan(nullptr, DType::kF32, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*SumOfSquares(nullptr, DType::kF32, 0), 0.0);
}

}  // namespace
}  // namespace chunkzero
