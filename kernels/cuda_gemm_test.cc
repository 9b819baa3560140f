#include "kernels/cuda_gemm.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/testing/compare.h"
#include "tensor/cuda/cuda_runtime.h"
#include "tensor/half.h"

namespace chunkzero {
namespace gemm {
namespace {

using ::chunkzero::kernels_testing::Bf16Bits;
using ::chunkzero::kernels_testing::RandomFloats;
using ::chunkzero::kernels_testing::RelativeError;
using ::testing::HasSubstr;

constexpr Transpose kNo = Transpose::kNo;
constexpr Transpose kYes = Transpose::kYes;

TEST(CudaGemm, RefusesBadArgumentsBeforeRunning) {
  float c = 0;
  const DeviceMatrix a{nullptr, 3}, b{nullptr, 5};
  struct Case {
    absl::Status status;
    const char* says;
  };
  const Case cases[] = {
      {CudaGemm(kNo, kNo, -1, 5, 3, 1, a, b, 0, &c, 5, Precision::kF32),
       "gemm(N, N, m=-1, n=5, k=3, f32): negative size"},
      {CudaGemm(kNo, kNo, 2, 5, 3, 1, a, b, 0, &c, 5, Precision::kF32, 0),
       "gemm(N, N, m=2, n=5, k=3, f32, batch 0): batch below 1"},
      {CudaGemm(kNo, kNo, 2, 5, 4, 1, a, b, 0, &c, 5, Precision::kF32),
       "gemm(N, N, m=2, n=5, k=4, f32): leading dimension of A is 3, below "
       "its row of 4"},
      {CudaGemm(kNo, kYes, 2, 5, 3, 1, a, {nullptr, 2}, 0, &c, 5,
                Precision::kBf16),
       "gemm(N, T, m=2, n=5, k=3, bf16): leading dimension of B is 2, below "
       "its row of 3"},
      {CudaGemm(kYes, kNo, 2, 5, 3, 1, {nullptr, 2}, b, 0, &c, 4,
                Precision::kF32),
       "gemm(T, N, m=2, n=5, k=3, f32): leading dimension of C is 4, below "
       "its row of 5"},
      {CudaGemm(kNo, kNo, 2, 5, 3, 1, {nullptr, 3, -1}, b, 0, &c, 5,
                Precision::kF32, 2),
       "gemm(N, N, m=2, n=5, k=3, f32, batch 2): negative batch stride"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.status.code(), absl::StatusCode::kInvalidArgument) << c.says;
    EXPECT_EQ(c.status.message(), c.says);
  }
  // An empty C is written by nobody: nothing to run, on any machine.
  EXPECT_TRUE(
      CudaGemm(kNo, kNo, 0, 5, 3, 1, a, b, 0, &c, 5, Precision::kF32).ok());
}

TEST(CudaGemm, WithoutAGpuItSaysWhy) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is visible";
  float c = 0;
  const absl::Status status = CudaGemm(kNo, kNo, 1, 1, 1, 1, {nullptr, 1},
                                       {nullptr, 1}, 0, &c, 1, Precision::kF32);
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("gemm(N, N, m=1, n=1, k=1, f32): "));
}

// Copies `bytes` of host data to a new device buffer.
void* ToGpu(const void* host, size_t bytes) {
  void* p = *CudaMalloc(0, bytes);
  EXPECT_TRUE(CudaMemcpy(p, host, bytes).ok());
  return p;
}

// The reference: row-major C = alpha op(A) op(B) + beta C, accumulated in
// double. For kBf16 the inputs come already rounded (their products are
// exact).
void NaiveGemm(Transpose ta, Transpose tb, int m, int n, int k, float alpha,
               const float* a, int lda, const float* b, int ldb, float beta,
               float* c, int ldc) {
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = 0;
      for (int p = 0; p < k; ++p) {
        const float x = ta == kYes ? a[p * lda + i] : a[i * lda + p];
        const float y = tb == kYes ? b[j * ldb + p] : b[p * ldb + j];
        sum += double{x} * y;
      }
      c[i * ldc + j] = static_cast<float>(alpha * sum + beta * c[i * ldc + j]);
    }
  }
}

// x rounded to bf16, as values.
std::vector<float> Bf16Values(const std::vector<float>& x) {
  std::vector<float> v(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    v[i] = BFloat16BitsToFloat(FloatToBFloat16Bits(x[i]));
  }
  return v;
}

// Every transpose pair, both precisions, a batch of three with padded
// leading dimensions and beta != 0, against products summed in double.
TEST(CudaGemm, MatchesTheCpuProducts) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no GPU visible";
  constexpr int m = 67, n = 45, k = 129, batch = 3, pad = 3;
  for (Precision precision : {Precision::kF32, Precision::kBf16}) {
    for (Transpose ta : {kNo, kYes}) {
      for (Transpose tb : {kNo, kYes}) {
        SCOPED_TRACE(testing::Message()
                     << (ta == kYes ? "T" : "N") << (tb == kYes ? "T" : "N")
                     << (precision == Precision::kBf16 ? " bf16" : " f32"));
        const int a_rows = ta == kYes ? k : m, a_cols = ta == kYes ? m : k;
        const int b_rows = tb == kYes ? n : k, b_cols = tb == kYes ? k : n;
        const int lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
        const int64_t sa = int64_t{a_rows} * lda, sb = int64_t{b_rows} * ldb,
                      sc = int64_t{m} * ldc;
        const bool bf16 = precision == Precision::kBf16;
        const std::vector<float> a = RandomFloats(sa * batch, 1),
                                 b = RandomFloats(sb * batch, 2);
        const std::vector<float> ra = bf16 ? Bf16Values(a) : a,
                                 rb = bf16 ? Bf16Values(b) : b;
        std::vector<float> c = RandomFloats(sc * batch, 3), want = c;
        for (int i = 0; i < batch; ++i) {
          NaiveGemm(ta, tb, m, n, k, 0.5f, ra.data() + i * sa, lda,
                    rb.data() + i * sb, ldb, 2.0f, want.data() + i * sc, ldc);
        }
        void *ga, *gb;
        if (bf16) {
          const std::vector<uint16_t> a16 = Bf16Bits(a), b16 = Bf16Bits(b);
          ga = ToGpu(a16.data(), a16.size() * 2);
          gb = ToGpu(b16.data(), b16.size() * 2);
        } else {
          ga = ToGpu(a.data(), a.size() * 4);
          gb = ToGpu(b.data(), b.size() * 4);
        }
        auto* gc = static_cast<float*>(ToGpu(c.data(), c.size() * 4));
        ASSERT_TRUE(CudaGemm(ta, tb, m, n, k, 0.5f, {ga, lda, sa},
                             {gb, ldb, sb}, 2.0f, gc, ldc, precision, batch, sc)
                        .ok());
        std::vector<float> got(c.size());
        ASSERT_TRUE(CudaMemcpy(got.data(), gc, got.size() * 4).ok());
        // The same exact products, added in f32 rather than double.
        EXPECT_LT(RelativeError(got, want), 1e-5);
        for (void* p : {ga, gb, static_cast<void*>(gc)}) {
          EXPECT_TRUE(CudaFree(0, p).ok());
        }
      }
    }
  }
}

}  // namespace
}  // namespace gemm
}  // namespace chunkzero
