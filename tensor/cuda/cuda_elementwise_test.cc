#include "tensor/cuda/cuda_elementwise.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/cpu/cast_kernels.h"
#include "tensor/cpu/elementwise_kernels.h"
#include "tensor/cuda/cuda_runtime.h"

namespace chunkzero {
namespace {

// f32 values that exercise every rounding path: signed zeros, f16
// subnormals and their rounding boundaries, ties, overflow to infinity,
// infinities and NaNs with payloads, then random bits.
std::vector<float> Probes() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          65504.0f,
                          65519.99f,
                          65520.0f,
                          1e-8f,
                          5.96e-8f,
                          2.98e-8f,
                          6.1035e-5f,
                          1.0009765625f,
                          3.14159f,
                          1e38f,
                          -1e38f,
                          1.17549435e-38f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()};
  for (uint32_t bits : {0x7fc00001u, 0xff800123u, 0x7f801000u}) {
    float nan;
    std::memcpy(&nan, &bits, sizeof(nan));
    v.push_back(nan);
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 100000; ++i) {
    const uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    v.push_back(f);
  }
  return v;
}

// Runs CudaCast on copies of `src` in GPU memory and returns the bytes.
std::vector<uint8_t> CastOnGpu(const void* src, DType from, DType to,
                               size_t n) {
  const size_t in_bytes = n * ElementSize(from),
               out_bytes = n * ElementSize(to);
  void* d_src = *CudaMalloc(0, in_bytes);
  void* d_dst = *CudaMalloc(0, out_bytes);
  EXPECT_TRUE(CudaMemcpy(d_src, src, in_bytes).ok());
  const absl::Status cast = CudaCast(d_dst, to, d_src, from, n);
  EXPECT_TRUE(cast.ok()) << cast;
  std::vector<uint8_t> out(out_bytes);
  EXPECT_TRUE(CudaMemcpy(out.data(), d_dst, out_bytes).ok());
  EXPECT_TRUE(CudaFree(0, d_src).ok());
  EXPECT_TRUE(CudaFree(0, d_dst).ok());
  return out;
}

std::vector<uint8_t> CastOnCpu(const void* src, DType from, DType to,
                               size_t n) {
  std::vector<uint8_t> out(n * ElementSize(to));
  EXPECT_TRUE(Cast(out.data(), to, src, from, n).ok());
  return out;
}

// The GPU's casts are the CPU's, bit for bit, both ways, for f16 and bf16.
TEST(CudaCast, EqualsTheCpuCastBitForBit) {
  if (CudaDeviceCount() == 0) {
    GTEST_SKIP() << "no GPU visible (built with CUDA: " << BuiltWithCuda()
                 << ")";
  }
  const std::vector<float> f32 = Probes();
  const size_t n = f32.size();
  for (DType half : {DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(half));
    const std::vector<uint8_t> narrowed =
        CastOnCpu(f32.data(), DType::kF32, half, n);
    EXPECT_EQ(CastOnGpu(f32.data(), DType::kF32, half, n), narrowed);
    // Widening every 16-bit pattern, NaNs and subnormals included.
    std::vector<uint16_t> all(1 << 16);
    for (size_t b = 0; b < all.size(); ++b) all[b] = static_cast<uint16_t>(b);
    EXPECT_EQ(CastOnGpu(all.data(), half, DType::kF32, all.size()),
              CastOnCpu(all.data(), half, DType::kF32, all.size()));
  }
}

// Copies `bytes` to the GPU, runs `op` on the device pointers (y, x), and
// returns y's bytes.
template <typename Op>
std::vector<uint8_t> OnGpu(const std::vector<uint8_t>& y,
                           const std::vector<uint8_t>& x, Op op) {
  void* d_y = *CudaMalloc(0, y.size());
  void* d_x = *CudaMalloc(0, x.size());
  EXPECT_TRUE(CudaMemcpy(d_y, y.data(), y.size()).ok());
  EXPECT_TRUE(CudaMemcpy(d_x, x.data(), x.size()).ok());
  const absl::Status status = op(d_y, d_x);
  EXPECT_TRUE(status.ok()) << status;
  std::vector<uint8_t> out(y.size());
  EXPECT_TRUE(CudaMemcpy(out.data(), d_y, out.size()).ok());
  EXPECT_TRUE(CudaFree(0, d_y).ok());
  EXPECT_TRUE(CudaFree(0, d_x).ok());
  return out;
}

// Scale and axpy on the GPU equal the CPU kernels bit for bit in every
// dtype, over the cast probes (signed zeros, subnormals, ties, overflow,
// infinities; one NaN operand at most).
TEST(CudaScaleAndAxpy, EqualTheCpuKernelsBitForBit) {
  if (CudaDeviceCount() == 0) {
    GTEST_SKIP() << "no GPU visible (built with CUDA: " << BuiltWithCuda()
                 << ")";
  }
  const std::vector<float> probes = Probes();
  const size_t n = probes.size();
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    std::vector<uint8_t> x = CastOnCpu(probes.data(), DType::kF32, dtype, n);
    // y: the probes reversed, so each x meets a different y.
    std::vector<float> reversed(probes.rbegin(), probes.rend());
    // Where both would be NaN, the result's payload is unspecified.
    for (size_t i = 0; i < n; ++i) {
      if (std::isnan(probes[i]) && std::isnan(reversed[i])) reversed[i] = 1;
    }
    std::vector<uint8_t> y = CastOnCpu(reversed.data(), DType::kF32, dtype, n);
    for (float a : {0.0f, -1.0f, 1.0f / 1024, 3.3f, 65504.0f}) {
      SCOPED_TRACE(a);
      std::vector<uint8_t> scaled = x;
      ASSERT_TRUE(Scale(scaled.data(), dtype, a, n).ok());
      EXPECT_EQ(
          OnGpu(x, x,
                [&](void* d_y, void*) { return CudaScale(d_y, dtype, a, n); }),
          scaled);
      std::vector<uint8_t> updated = y;
      ASSERT_TRUE(Axpy(updated.data(), dtype, a, x.data(), n).ok());
      EXPECT_EQ(OnGpu(y, x,
                      [&](void* d_y, void* d_x) {
                        return CudaAxpy(d_y, dtype, a, d_x, n);
                      }),
                updated);
    }
  }
}

// The scaled cast (the grad write of the backward) equals CastScaled.
TEST(CudaCastScaled, EqualsTheCpuBitForBit) {
  if (CudaDeviceCount() == 0) {
    GTEST_SKIP() << "no GPU visible (built with CUDA: " << BuiltWithCuda()
                 << ")";
  }
  const std::vector<float> probes = Probes();
  const size_t n = probes.size();
  std::vector<uint8_t> src(n * 4);
  std::memcpy(src.data(), probes.data(), src.size());
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (float scale : {1.0f, 1.0f / 65536, 3.0f, 65504.0f}) {
      SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " x" << scale);
      std::vector<uint8_t> want(n * ElementSize(dtype));
      ASSERT_TRUE(CastScaled(want.data(), dtype, probes.data(), scale, n).ok());
      std::vector<uint8_t> dst(want.size(), 0);
      EXPECT_EQ(OnGpu(dst, src,
                      [&](void* d_dst, void* d_src) {
                        return CudaCastScaled(
                            d_dst, dtype, static_cast<float*>(d_src), scale, n);
                      }),
                want);
    }
  }
}

// Without --config=cuda the call says so; pairs without a kernel are
// refused naming them.
TEST(CudaCast, SaysWhatItCannotDo) {
  if (!BuiltWithCuda()) {
    const absl::Status status =
        CudaCast(nullptr, DType::kF16, nullptr, DType::kF32, 4);
    EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
    EXPECT_EQ(status.message(),
              "casting 4 elements from f32 to f16 on the GPU: this binary "
              "was built without --config=cuda");
    EXPECT_EQ(CudaScale(nullptr, DType::kBF16, 2.0f, 3).message(),
              "scale of 3 bf16 elements on the GPU: this binary was built "
              "without --config=cuda");
    EXPECT_EQ(CudaAxpy(nullptr, DType::kF32, 2.0f, nullptr, 5).code(),
              absl::StatusCode::kUnimplemented);
    EXPECT_EQ(CudaCastScaled(nullptr, DType::kF16, nullptr, 2.0f, 5).message(),
              "scaled cast of 5 elements to f16 on the GPU: this binary was "
              "built without --config=cuda");
    return;
  }
  EXPECT_EQ(CudaScale(nullptr, DType::kI32, 2.0f, 3).message(),
            "no GPU scale for i32 (f32, f16, bf16 only)");
  EXPECT_EQ(CudaAxpy(nullptr, DType::kI64, 2.0f, nullptr, 3).message(),
            "no GPU axpy for i64 (f32, f16, bf16 only)");
  EXPECT_EQ(CudaCastScaled(nullptr, DType::kU8, nullptr, 2.0f, 3).message(),
            "no GPU scaled cast for u8 (f32, f16, bf16 only)");
  const absl::Status status =
      CudaCast(nullptr, DType::kF16, nullptr, DType::kI32, 4);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "no GPU cast from i32 to f16 (f32 <-> f16 / bf16 only)");
}

}  // namespace
}  // namespace chunkzero
