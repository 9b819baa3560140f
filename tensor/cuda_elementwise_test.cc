#include "tensor/cuda_elementwise.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/cast_kernels.h"
#include "tensor/cuda_runtime.h"

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
    return;
  }
  const absl::Status status =
      CudaCast(nullptr, DType::kF16, nullptr, DType::kI32, 4);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "no GPU cast from i32 to f16 (f32 <-> f16 / bf16 only)");
}

}  // namespace
}  // namespace chunkzero
