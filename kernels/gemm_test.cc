#include "kernels/gemm.h"

#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/parallel_for.h"
#include "gtest/gtest.h"
#include "kernels/onednn_matmul.h"
#include "tensor/half.h"

namespace chunkzero {
namespace gemm {
namespace {

// A stored matrix of `rows` x `cols` with leading dimension `ld`, filled
// with values from a fixed recipe; the padding holds NaN, so a read past a
// row shows in the result.
std::vector<float> Matrix(int rows, int cols, int ld, float seed) {
  std::vector<float> x(static_cast<size_t>(rows) * ld,
                       std::numeric_limits<float>::quiet_NaN());
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < cols; ++j) {
      x[static_cast<size_t>(i) * ld + j] = std::sin(seed * (i * 131 + j + 1));
    }
  }
  return x;
}

// alpha op(A) op(B) + beta C in double, row by row.
std::vector<double> Reference(Transpose ta, Transpose tb, int m, int n, int k,
                              double alpha, const std::vector<float>& a,
                              int lda, const std::vector<float>& b, int ldb,
                              double beta, const std::vector<float>& c,
                              int ldc) {
  std::vector<double> out(static_cast<size_t>(m) * n);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = 0;
      for (int p = 0; p < k; ++p) {
        const float av = ta == Transpose::kNo ? a[size_t(i) * lda + p]
                                              : a[size_t(p) * lda + i];
        const float bv = tb == Transpose::kNo ? b[size_t(p) * ldb + j]
                                              : b[size_t(j) * ldb + p];
        sum += double(av) * bv;
      }
      out[size_t(i) * n + j] =
          alpha * sum + (beta == 0 ? 0.0 : beta * c[size_t(i) * ldc + j]);
    }
  }
  return out;
}

struct Case {
  Transpose ta, tb;
  int m, n, k;
  float alpha, beta;
};

std::string Name(const Case& c) {
  return absl::StrCat(
      c.ta == Transpose::kYes ? "T" : "N", c.tb == Transpose::kYes ? "T" : "N",
      " m=", c.m, " n=", c.n, " k=", c.k, " alpha=", c.alpha, " beta=", c.beta);
}

// Every transpose pair, with shapes that cut the tiles unevenly (m and n
// past one tile, not multiples of it) or are smaller than one, and
// alpha/beta other than 1/0.
constexpr Case kEveryTransposePair[] = {
    {Transpose::kNo, Transpose::kNo, 300, 1100, 37, 1.0f, 0.0f},
    {Transpose::kNo, Transpose::kYes, 257, 1025, 64, 0.5f, 1.0f},
    {Transpose::kYes, Transpose::kNo, 513, 70, 129, -2.0f, 0.25f},
    {Transpose::kYes, Transpose::kYes, 1, 1, 1000, 1.0f, -1.0f},
    {Transpose::kNo, Transpose::kNo, 5, 3, 1, 1.0f, 0.0f},
    {Transpose::kYes, Transpose::kYes, 33, 17, 19, 1.0f, 0.0f},
};

// A case's A, B and C as stored, with leading dimensions past the row
// length (the padding holds NaN).
struct Stored {
  int lda, ldb, ldc;
  std::vector<float> a, b, c;
};

Stored StoredOperands(const Case& c) {
  const int a_rows = c.ta == Transpose::kNo ? c.m : c.k;
  const int a_cols = c.ta == Transpose::kNo ? c.k : c.m;
  const int b_rows = c.tb == Transpose::kNo ? c.k : c.n;
  const int b_cols = c.tb == Transpose::kNo ? c.n : c.k;
  Stored s{a_cols + 3, b_cols + 5, c.n + 2, {}, {}, {}};
  s.a = Matrix(a_rows, a_cols, s.lda, 0.37f);
  s.b = Matrix(b_rows, b_cols, s.ldb, 0.11f);
  s.c = Matrix(c.m, c.n, s.ldc, 0.07f);
  return s;
}

TEST(GemmTest, MatchesADoubleReferenceForEveryTransposePair) {
  for (const Case& c : kEveryTransposePair) {
    SCOPED_TRACE(Name(c));
    const Stored stored = StoredOperands(c);
    const int lda = stored.lda, ldb = stored.ldb, ldc = stored.ldc;
    const std::vector<float>& a = stored.a;
    const std::vector<float>& b = stored.b;
    std::vector<float> out = stored.c;
    const std::vector<double> want = Reference(
        c.ta, c.tb, c.m, c.n, c.k, c.alpha, a, lda, b, ldb, c.beta, out, ldc);
    Gemm(c.ta, c.tb, c.m, c.n, c.k, c.alpha, a.data(), lda, b.data(), ldb,
         c.beta, out.data(), ldc);
    // f32 accumulation of k products of magnitude <= 1: within k ulps of the
    // sum of magnitudes, plus beta C's rounding.
    const double bound =
        4.0 * c.k * std::numeric_limits<float>::epsilon() * std::abs(c.alpha) +
        1e-6;
    for (int i = 0; i < c.m; ++i) {
      for (int j = 0; j < c.n; ++j) {
        ASSERT_NEAR(out[size_t(i) * ldc + j], want[size_t(i) * c.n + j], bound)
            << "at " << i << ", " << j;
      }
      // The padding past n is untouched (still NaN).
      for (int j = c.n; j < ldc; ++j) {
        ASSERT_TRUE(std::isnan(out[size_t(i) * ldc + j])) << i << ", " << j;
      }
    }
  }
}

TEST(GemmTest, BetaZeroIgnoresWhatCHeld) {
  const int m = 4, n = 3, k = 2;
  const std::vector<float> a = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<float> b = {1, 0, 2, 0, 1, 3};
  std::vector<float> c(m * n, std::numeric_limits<float>::quiet_NaN());
  Gemm(Transpose::kNo, Transpose::kNo, m, n, k, 1.0f, a.data(), k, b.data(), n,
       0.0f, c.data(), n);
  EXPECT_EQ(c, (std::vector<float>{1, 2, 8, 3, 4, 18, 5, 6, 28, 7, 8, 38}));
}

TEST(GemmTest, EmptyProductsScaleOrLeaveC) {
  std::vector<float> c = {1, 2, 3, 4, 5, 6};
  const float unused = 0;
  // k == 0: C = beta C.
  Gemm(Transpose::kNo, Transpose::kNo, 2, 3, 0, 1.0f, &unused, 1, &unused, 3,
       0.5f, c.data(), 3);
  EXPECT_EQ(c, (std::vector<float>{0.5, 1, 1.5, 2, 2.5, 3}));
  c[0] = std::numeric_limits<float>::quiet_NaN();
  GemmOnThisThread(Transpose::kNo, Transpose::kNo, 2, 3, 0, 1.0f, &unused, 1,
                   &unused, 3, 0.0f, c.data(), 3);
  EXPECT_EQ(c, std::vector<float>(6, 0.0f));
  // m == 0 or n == 0: nothing is read or written.
  c.assign(6, 7.0f);
  Gemm(Transpose::kNo, Transpose::kNo, 0, 3, 4, 1.0f, nullptr, 4, nullptr, 3,
       0.0f, c.data(), 3);
  Gemm(Transpose::kNo, Transpose::kNo, 2, 0, 4, 1.0f, nullptr, 4, nullptr, 1,
       0.0f, c.data(), 1);
  EXPECT_EQ(c, std::vector<float>(6, 7.0f));
}

// The tiles are fixed by the shape, so the bits do not depend on how many
// threads ran them, nor on which entry point.
TEST(GemmTest, BitsDoNotDependOnTheThreadCount) {
  const int m = 700, n = 2100, k = 96;
  const std::vector<float> a = Matrix(m, k, k, 0.3f);
  const std::vector<float> b = Matrix(n, k, k, 0.7f);
  std::vector<float> want(size_t(m) * n);
  GemmOnThisThread(Transpose::kNo, Transpose::kYes, m, n, k, 1.0f, a.data(), k,
                   b.data(), k, 0.0f, want.data(), n);
  for (const int threads : {1, 2, 3, 8}) {
    SetParallelThreadsForTesting(threads);
    std::vector<float> got(size_t(m) * n);
    Gemm(Transpose::kNo, Transpose::kYes, m, n, k, 1.0f, a.data(), k, b.data(),
         k, 0.0f, got.data(), n);
    EXPECT_TRUE(got == want) << threads << " threads";
  }
  SetParallelThreadsForTesting(0);
}

TEST(GemmTest, RejectedArgumentsThrowNamingTheCall) {
  const std::vector<float> a(16, 1.0f), b(16, 1.0f);
  std::vector<float> c(16);
  // lda 2 < k 4: rows would overlap. Refused before oneDNN sees it.
  try {
    Gemm(Transpose::kNo, Transpose::kNo, 2, 2, 4, 1.0f, a.data(), 2, b.data(),
         2, 0.0f, c.data(), 2);
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "f32 matmul(N, N, m=2, n=2, k=4, lda=2, ldb=2, ldc=2) failed: "
              "invalid arguments");
  }
  EXPECT_THROW(GemmOnThisThread(Transpose::kNo, Transpose::kNo, 2, 2, 4, 1.0f,
                                a.data(), 2, b.data(), 2, 0.0f, c.data(), 2),
               std::runtime_error);
}

// Rounds every element of x to the nearest bf16 value (ties to even), in
// place; tensor/half.h's scalar conversion.
void RoundToBf16(std::vector<float>* x) {
  for (float& v : *x) {
    if (!std::isnan(v)) v = BFloat16BitsToFloat(FloatToBFloat16Bits(v));
  }
}

// Runs a test body with Bf16RouteHere() forced to one route.
class ScopedBf16Route {
 public:
  explicit ScopedBf16Route(Bf16Route route) { SetBf16RouteForTesting(route); }
  ~ScopedBf16Route() { SetBf16RouteForTesting(std::nullopt); }
};

// Whether this processor's oneDNN has a bf16 matmul at all (it has none
// below AVX-512); tests of that route skip without one.
bool HasBf16Matmul() {
  return !internal::MatmulImplementation(internal::Operands::kBf16).empty();
}

// On the f32 route, kBf16 is the f32 product of the bf16-rounded inputs, bit
// for bit, on both entry points; it differs from the f32 product of the
// originals.
TEST(GemmTest, Bf16OnTheF32RouteMultipliesTheBf16RoundedInputs) {
  ScopedBf16Route route(Bf16Route::kF32OnRoundedInputs);
  const int m = 300, n = 1030, k = 70;
  const int lda = m + 3, ldb = k + 1, ldc = n + 2;  // A^T and B^T stored.
  std::vector<float> a = Matrix(k, m, lda, 0.37f);
  std::vector<float> b = Matrix(n, k, ldb, 0.11f);
  std::vector<float> bf16(size_t(m) * ldc, 1.0f), here = bf16, want = bf16,
                                                  f32 = bf16;
  Gemm(Transpose::kYes, Transpose::kYes, m, n, k, 0.5f, a.data(), lda, b.data(),
       ldb, 1.0f, bf16.data(), ldc, Precision::kBf16);
  GemmOnThisThread(Transpose::kYes, Transpose::kYes, m, n, k, 0.5f, a.data(),
                   lda, b.data(), ldb, 1.0f, here.data(), ldc,
                   Precision::kBf16);
  Gemm(Transpose::kYes, Transpose::kYes, m, n, k, 0.5f, a.data(), lda, b.data(),
       ldb, 1.0f, f32.data(), ldc);
  RoundToBf16(&a);
  RoundToBf16(&b);
  Gemm(Transpose::kYes, Transpose::kYes, m, n, k, 0.5f, a.data(), lda, b.data(),
       ldb, 1.0f, want.data(), ldc);
  EXPECT_TRUE(bf16 == want);
  EXPECT_TRUE(here == want);
  EXPECT_FALSE(bf16 == f32);
  // bf16 has 8 significant bits: the products move by about 2^-8 of a
  // term, never by more than k of them.
  double largest = 0;
  for (size_t i = 0; i < f32.size(); ++i) {
    largest = std::max(largest, double(std::abs(bf16[i] - f32[i])));
  }
  EXPECT_GT(largest, 1e-4);
  EXPECT_LT(largest, 0.5 * k * 2 * std::ldexp(1.0, -8));
}

// On the matmul route, kBf16 is the product of the bf16-rounded inputs
// accumulated in f32 in oneDNN's order: within f32 rounding of the exact
// product of the rounded inputs, for every transpose pair (packing op(A)
// and op(B) transposes), unevenly cut tiles, padded leading dimensions and
// alpha/beta; the padding of C is not written.
TEST(GemmTest, Bf16MatmulMultipliesTheBf16RoundedInputs) {
  if (!HasBf16Matmul()) GTEST_SKIP() << "oneDNN has no bf16 matmul here";
  ScopedBf16Route route(Bf16Route::kBf16Matmul);
  for (const Case& c : kEveryTransposePair) {
    SCOPED_TRACE(Name(c));
    const Stored stored = StoredOperands(c);
    const int lda = stored.lda, ldb = stored.ldb, ldc = stored.ldc;
    const std::vector<float>& a = stored.a;
    const std::vector<float>& b = stored.b;
    std::vector<float> out = stored.c;
    std::vector<float> here = out;
    std::vector<float> rounded_a = a, rounded_b = b;
    RoundToBf16(&rounded_a);
    RoundToBf16(&rounded_b);
    const std::vector<double> want =
        Reference(c.ta, c.tb, c.m, c.n, c.k, c.alpha, rounded_a, lda, rounded_b,
                  ldb, c.beta, out, ldc);
    Gemm(c.ta, c.tb, c.m, c.n, c.k, c.alpha, a.data(), lda, b.data(), ldb,
         c.beta, out.data(), ldc, Precision::kBf16);
    GemmOnThisThread(c.ta, c.tb, c.m, c.n, c.k, c.alpha, a.data(), lda,
                     b.data(), ldb, c.beta, here.data(), ldc, Precision::kBf16);
    const double bound =
        4.0 * c.k * std::numeric_limits<float>::epsilon() * std::abs(c.alpha) +
        1e-6;
    for (int i = 0; i < c.m; ++i) {
      for (int j = 0; j < c.n; ++j) {
        const size_t at = size_t(i) * ldc + j;
        ASSERT_NEAR(out[at], want[size_t(i) * c.n + j], bound)
            << "at " << i << ", " << j;
        ASSERT_EQ(here[at], out[at]) << "at " << i << ", " << j;
      }
      for (int j = c.n; j < ldc; ++j) {
        ASSERT_TRUE(std::isnan(out[size_t(i) * ldc + j])) << i << ", " << j;
      }
    }
  }
}

// Small integers are bf16 values and their sums are exact in f32, so every
// order of addition gives the exact product; beta == 0 ignores a NaN C.
TEST(GemmTest, Bf16MatmulIsExactOnSmallIntegers) {
  if (!HasBf16Matmul()) GTEST_SKIP() << "oneDNN has no bf16 matmul here";
  ScopedBf16Route route(Bf16Route::kBf16Matmul);
  const int m = 4, n = 3, k = 2;
  const std::vector<float> a = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<float> b = {1, 0, 2, 0, 1, 3};
  std::vector<float> c(m * n, std::numeric_limits<float>::quiet_NaN());
  Gemm(Transpose::kNo, Transpose::kNo, m, n, k, 1.0f, a.data(), k, b.data(), n,
       0.0f, c.data(), n, Precision::kBf16);
  EXPECT_EQ(c, (std::vector<float>{1, 2, 8, 3, 4, 18, 5, 6, 28, 7, 8, 38}));
  // C = 2 A B - C, with B stored transposed.
  const std::vector<float> bt = {1, 0, 0, 1, 2, 3};
  Gemm(Transpose::kNo, Transpose::kYes, m, n, k, 2.0f, a.data(), k, bt.data(),
       k, -1.0f, c.data(), n, Precision::kBf16);
  EXPECT_EQ(c, (std::vector<float>{1, 2, 8, 3, 4, 18, 5, 6, 28, 7, 8, 38}));
}

TEST(GemmTest, Bf16MatmulBitsDoNotDependOnTheThreadCount) {
  if (!HasBf16Matmul()) GTEST_SKIP() << "oneDNN has no bf16 matmul here";
  ScopedBf16Route route(Bf16Route::kBf16Matmul);
  const int m = 700, n = 2100, k = 96;
  const std::vector<float> a = Matrix(k, m, m, 0.3f);
  const std::vector<float> b = Matrix(n, k, k, 0.7f);
  std::vector<float> want(size_t(m) * n);
  GemmOnThisThread(Transpose::kYes, Transpose::kYes, m, n, k, 1.0f, a.data(), m,
                   b.data(), k, 0.0f, want.data(), n, Precision::kBf16);
  for (const int threads : {1, 2, 3, 8}) {
    SetParallelThreadsForTesting(threads);
    std::vector<float> got(size_t(m) * n);
    Gemm(Transpose::kYes, Transpose::kYes, m, n, k, 1.0f, a.data(), m, b.data(),
         k, 0.0f, got.data(), n, Precision::kBf16);
    EXPECT_TRUE(got == want) << threads << " threads";
  }
  SetParallelThreadsForTesting(0);
}

// Operands given as bf16 bits (PackBf16 of the f32 values, dense) give the
// bits of the f32 operands in kBf16 products, on both routes and for every
// transpose pair, either operand or both; in kF32 products bits are the
// f32 values they widen to.
TEST(GemmTest, Bf16BitOperandsEqualTheirF32Values) {
  for (const Bf16Route route :
       {Bf16Route::kF32OnRoundedInputs, Bf16Route::kBf16Matmul}) {
    if (route == Bf16Route::kBf16Matmul && !HasBf16Matmul()) continue;
    ScopedBf16Route forced(route);
    for (const Case& c : kEveryTransposePair) {
      SCOPED_TRACE(absl::StrCat(Name(c), route == Bf16Route::kBf16Matmul
                                             ? " bf16 matmul"
                                             : " f32 route"));
      const int a_rows = c.ta == Transpose::kNo ? c.m : c.k;
      const int a_cols = c.ta == Transpose::kNo ? c.k : c.m;
      const int b_rows = c.tb == Transpose::kNo ? c.k : c.n;
      const int b_cols = c.tb == Transpose::kNo ? c.n : c.k;
      const std::vector<float> a = Matrix(a_rows, a_cols, a_cols, 0.37f);
      const std::vector<float> b = Matrix(b_rows, b_cols, b_cols, 0.11f);
      std::vector<uint16_t> a_bits(a.size()), b_bits(b.size());
      PackBf16(a.data(), a_rows, a_cols, a_cols, a_bits.data());
      PackBf16(b.data(), b_rows, b_cols, b_cols, b_bits.data());
      const Operand fa(a.data(), a_cols), fb(b.data(), b_cols);
      const Operand ba = Operand::Bf16(a_bits.data(), a_cols);
      const Operand bb = Operand::Bf16(b_bits.data(), b_cols);
      const std::vector<float> c0 = Matrix(c.m, c.n, c.n, 0.07f);
      auto product = [&](const Operand& x, const Operand& y,
                         Precision precision) {
        std::vector<float> out = c0;
        Gemm(c.ta, c.tb, c.m, c.n, c.k, c.alpha, x, y, c.beta, out.data(), c.n,
             precision);
        return out;
      };
      const std::vector<float> want = product(fa, fb, Precision::kBf16);
      EXPECT_TRUE(product(ba, fb, Precision::kBf16) == want);
      EXPECT_TRUE(product(fa, bb, Precision::kBf16) == want);
      EXPECT_TRUE(product(ba, bb, Precision::kBf16) == want);
      // kF32 on bits: the f32 product of the widened values.
      std::vector<float> wa(a.size()), wb(b.size());
      for (size_t i = 0; i < a.size(); ++i)
        wa[i] = BFloat16BitsToFloat(a_bits[i]);
      for (size_t i = 0; i < b.size(); ++i)
        wb[i] = BFloat16BitsToFloat(b_bits[i]);
      EXPECT_TRUE(product(ba, bb, Precision::kF32) ==
                  product(Operand(wa.data(), a_cols),
                          Operand(wb.data(), b_cols), Precision::kF32));
    }
  }
}

TEST(GemmTest, PackBf16RoundsEachValueToNearestEven) {
  const int rows = 37, cols = 70, ld = 75;
  std::vector<float> x = Matrix(rows, cols, ld, 0.9f);
  x[3] = std::numeric_limits<float>::infinity();
  x[4] = 1.0f + std::ldexp(1.0f, -8);  // A tie: rounds to even, 1.0.
  std::vector<uint16_t> bits(size_t(rows) * cols);
  PackBf16(x.data(), rows, cols, ld, bits.data());
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < cols; ++j) {
      ASSERT_EQ(bits[size_t(i) * cols + j],
                FloatToBFloat16Bits(x[size_t(i) * ld + j]))
          << i << ", " << j;
    }
  }
  EXPECT_EQ(bits[3], 0x7f80);
  EXPECT_EQ(bits[4], 0x3f80);
}

TEST(GemmTest, BitOperandsAreCheckedLikeFloatOnes) {
  const std::vector<uint16_t> a(16, 0x3f80);
  const std::vector<float> b(16, 1.0f);
  std::vector<float> c(16);
  try {
    Gemm(Transpose::kNo, Transpose::kNo, 2, 2, 4, 1.0f,
         Operand::Bf16(a.data(), 2), Operand(b.data(), 2), 0.0f, c.data(), 2,
         Precision::kF32);
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "f32 matmul(N, N, m=2, n=2, k=4, lda=2, ldb=2, ldc=2) failed: "
              "invalid arguments");
  }
}

TEST(GemmTest, ChoosesTheBf16MatmulWhereItsKernelsOutrunF32) {
  const std::string brg = "brg:avx512_core_bf16";
  EXPECT_EQ(ChooseBf16Route("avx512_core_amx", false, "brg:avx512_core_amx"),
            Bf16Route::kBf16Matmul);
  EXPECT_EQ(ChooseBf16Route("avx512_core_amx", true, "brg:avx512_core_amx"),
            Bf16Route::kBf16Matmul);
  EXPECT_EQ(ChooseBf16Route("avx512_core_bf16", true, brg),
            Bf16Route::kBf16Matmul);
  // Intel without AMX: the dot products run at half the FMA rate.
  EXPECT_EQ(ChooseBf16Route("avx512_core_bf16", false, brg),
            Bf16Route::kF32OnRoundedInputs);
  // No bf16 instructions, or no brgemm kernel: never an emulated bf16.
  EXPECT_EQ(ChooseBf16Route("avx512_core", true, "gemm:jit"),
            Bf16Route::kF32OnRoundedInputs);
  EXPECT_EQ(ChooseBf16Route("avx512_core_amx", false, "ref:any"),
            Bf16Route::kF32OnRoundedInputs);
  EXPECT_EQ(ChooseBf16Route("avx2", true, ""), Bf16Route::kF32OnRoundedInputs);
  // This processor's route is the rule applied to what it reports.
  EXPECT_EQ(Bf16RouteHere(), ChooseBf16Route(GemmIsa(), __builtin_cpu_is("amd"),
                                             internal::MatmulImplementation(
                                                 internal::Operands::kBf16)));
}

TEST(GemmTest, KernelNamesSayWhatRunsEachPrecision) {
  const std::string f32 =
      absl::StrCat("onednn 2.6.3 matmul ",
                   internal::MatmulImplementation(internal::Operands::kF32));
  EXPECT_EQ(GemmKernelName(), f32);
  EXPECT_EQ(GemmKernelName(Precision::kF32), f32);
  {
    ScopedBf16Route route(Bf16Route::kF32OnRoundedInputs);
    EXPECT_EQ(GemmKernelName(Precision::kBf16),
              absl::StrCat(f32, " (f32 FMAs)"));
  }
  if (HasBf16Matmul()) {
    ScopedBf16Route route(Bf16Route::kBf16Matmul);
    EXPECT_EQ(GemmKernelName(Precision::kBf16),
              absl::StrCat(
                  "onednn 2.6.3 matmul ",
                  internal::MatmulImplementation(internal::Operands::kBf16)));
    EXPECT_EQ(GemmKernelName(), f32);
  }
}

TEST(GemmTest, Bf16ChecksTheLeadingDimensionsBeforeCopying) {
  const std::vector<float> a(16, 1.0f), b(16, 1.0f);
  std::vector<float> c(16);
  for (const Bf16Route route :
       {Bf16Route::kF32OnRoundedInputs, Bf16Route::kBf16Matmul}) {
    ScopedBf16Route forced(route);
    const std::string message = absl::StrCat(
        route == Bf16Route::kBf16Matmul ? "bf16 matmul" : "f32 matmul",
        "(N, N, m=2, n=2, k=4, lda=2, ldb=2, ldc=2) failed: invalid "
        "arguments");
    for (const bool on_this_thread : {false, true}) {
      try {
        if (on_this_thread) {
          GemmOnThisThread(Transpose::kNo, Transpose::kNo, 2, 2, 4, 1.0f,
                           a.data(), 2, b.data(), 2, 0.0f, c.data(), 2,
                           Precision::kBf16);
        } else {
          Gemm(Transpose::kNo, Transpose::kNo, 2, 2, 4, 1.0f, a.data(), 2,
               b.data(), 2, 0.0f, c.data(), 2, Precision::kBf16);
        }
        FAIL() << "no exception";
      } catch (const std::runtime_error& e) {
        EXPECT_EQ(std::string(e.what()), message);
      }
    }
  }
}

// Never a generic kernel where the processor has vector units: oneDNN's
// instruction set is at least the widest one the CPU reports.
TEST(GemmTest, UsesTheWidestInstructionSetTheProcessorHas) {
  const std::string isa = GemmIsa();
  EXPECT_NE(isa, "default");
  if (__builtin_cpu_supports("avx2")) {
    EXPECT_TRUE(isa == "avx2" || isa == "avx2_vnni" ||
                absl::StartsWith(isa, "avx512"))
        << isa;
  }
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq")) {
    EXPECT_TRUE(absl::StartsWith(isa, "avx512_core")) << isa;
  }
  // The f32 products run a jit kernel: brgemm ("brg:avx512_core") where
  // oneDNN has one for the ISA, its jit sgemm ("gemm:jit") below it; never
  // the reference loops.
  const std::string f32 =
      internal::MatmulImplementation(internal::Operands::kF32);
  EXPECT_TRUE(absl::StartsWith(f32, "brg:") || f32 == "gemm:jit") << f32;
  if (absl::StartsWith(isa, "avx512_core")) {
    EXPECT_TRUE(absl::StartsWith(f32, "brg:avx512_core")) << f32;
  }
}

}  // namespace
}  // namespace gemm
}  // namespace chunkzero
