#include "tensor/cuda/cuda_reductions.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/cpu/cast_kernels.h"
#include "tensor/cpu/reduction_kernels.h"
#include "tensor/cuda/cuda_runtime.h"

namespace chunkzero {
namespace {

class CudaReductionsOnGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no GPU visible (built with CUDA: " << BuiltWithCuda()
                   << ")";
    }
  }
};

// n f32 values of mixed signs and magnitudes (1e-6 .. 1e3), so the order of
// summation shows in the low bits, cast to `dtype`.
std::vector<uint8_t> Values(size_t n, DType dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> exponent(-6.0f, 3.0f);
  std::vector<float> f32(n);
  for (float& v : f32) {
    v = std::pow(10.0f, exponent(rng)) * ((rng() & 1) ? 1.0f : -1.0f);
  }
  std::vector<uint8_t> out(n * ElementSize(dtype));
  EXPECT_TRUE(Cast(out.data(), dtype, f32.data(), DType::kF32, n).ok());
  return out;
}

// Copies `host` to the GPU, runs `op` on the device copy, frees it.
template <typename Op>
auto OnGpu(const std::vector<uint8_t>& host, Op op) {
  void* device = *CudaMalloc(0, host.size());
  EXPECT_TRUE(CudaMemcpy(device, host.data(), host.size()).ok());
  auto result = op(device);
  EXPECT_TRUE(CudaFree(0, device).ok());
  return result;
}

uint64_t Bits(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return bits;
}

// Every length class: empty, under a lane group, around one 8192-element
// block, several blocks with a short tail, and more than the 1024 block
// sums the final pass stages at a time.
TEST_F(CudaReductionsOnGpu, SumOfSquaresEqualsTheCpuBitForBit) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{17}, size_t{8191},
                     size_t{8192}, size_t{8193}, size_t{3 * 8192 + 5},
                     size_t{1030 * 8192 + 77}}) {
      SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " n=" << n);
      const std::vector<uint8_t> x = Values(n, dtype, static_cast<uint32_t>(n));
      const absl::StatusOr<double> cpu = SumOfSquares(x.data(), dtype, n);
      ASSERT_TRUE(cpu.ok());
      const absl::StatusOr<double> gpu =
          OnGpu(x, [&](void* d) { return CudaSumOfSquares(0, d, dtype, n); });
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      EXPECT_EQ(Bits(*gpu), Bits(*cpu)) << *gpu << " vs " << *cpu;
    }
  }
}

// A batch gives each input's CPU bits from one copy and one wait, in the
// inputs' order, empty inputs included; a later, larger batch grows the
// GPU's scratch and still gives the CPU's bits.
TEST_F(CudaReductionsOnGpu, ABatchGivesEachInputsSumBitForBit) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    for (const std::vector<size_t>& lengths :
         {std::vector<size_t>{17, 0, 8193},
          std::vector<size_t>{3 * 8192 + 5, 1, 0, 1030 * 8192 + 77, 9, 8192}}) {
      std::vector<std::vector<uint8_t>> host;
      std::vector<void*> device;
      std::vector<CudaReductionInput> inputs;
      for (size_t i = 0; i < lengths.size(); ++i) {
        host.push_back(Values(lengths[i], dtype, static_cast<uint32_t>(i + 7)));
        absl::StatusOr<void*> d = CudaMalloc(0, host.back().size());
        ASSERT_TRUE(d.ok()) << d.status();
        ASSERT_TRUE(
            CudaMemcpy(*d, host.back().data(), host.back().size()).ok());
        device.push_back(*d);
        inputs.push_back({*d, lengths[i]});
      }
      const absl::StatusOr<std::vector<double>> sums =
          CudaSumsOfSquares(0, dtype, inputs);
      ASSERT_TRUE(sums.ok()) << sums.status();
      ASSERT_EQ(sums->size(), lengths.size());
      for (size_t i = 0; i < lengths.size(); ++i) {
        const absl::StatusOr<double> cpu =
            SumOfSquares(host[i].data(), dtype, lengths[i]);
        ASSERT_TRUE(cpu.ok());
        EXPECT_EQ(Bits((*sums)[i]), Bits(*cpu)) << "input " << i;
      }
      for (void* d : device) EXPECT_TRUE(CudaFree(0, d).ok());
      EXPECT_TRUE(CudaPendingError().ok()) << CudaPendingError();
    }
  }
}

TEST_F(CudaReductionsOnGpu, FindsInfAndNanAnywhere) {
  constexpr size_t n = 5 * 8192 + 3;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const std::vector<uint8_t> finite = Values(n, dtype, 1);
    EXPECT_FALSE(*OnGpu(
        finite, [&](void* d) { return CudaHasInfOrNan(0, d, dtype, n); }));
    const float specials[] = {std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::quiet_NaN()};
    for (size_t at : {size_t{0}, size_t{8192}, n - 1}) {
      for (float special : specials) {
        std::vector<uint8_t> x = finite;
        const size_t width = ElementSize(dtype);
        ASSERT_TRUE(
            Cast(x.data() + at * width, dtype, &special, DType::kF32, 1).ok());
        EXPECT_TRUE(
            *OnGpu(x, [&](void* d) { return CudaHasInfOrNan(0, d, dtype, n); }))
            << "at " << at;
        const absl::StatusOr<double> sum =
            OnGpu(x, [&](void* d) { return CudaSumOfSquares(0, d, dtype, n); });
        ASSERT_TRUE(sum.ok());
        EXPECT_FALSE(std::isfinite(*sum)) << "at " << at;
      }
    }
  }
}

TEST(CudaReductions, SaysWhatItCannotDo) {
  if (!BuiltWithCuda()) {
    const absl::StatusOr<double> sum =
        CudaSumOfSquares(0, nullptr, DType::kBF16, 3);
    EXPECT_EQ(sum.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_EQ(sum.status().message(),
              "SumOfSquares of 3 bf16 elements on the GPU: this binary was "
              "built without --config=cuda");
    EXPECT_EQ(CudaHasInfOrNan(0, nullptr, DType::kF32, 1).status().code(),
              absl::StatusCode::kUnimplemented);
    const CudaReductionInput inputs[] = {{nullptr, 2}, {nullptr, 5}};
    EXPECT_EQ(CudaSumsOfSquares(0, DType::kF16, inputs).status().message(),
              "SumOfSquares of 7 f16 elements on the GPU: this binary was "
              "built without --config=cuda");
    return;
  }
  EXPECT_EQ(CudaSumOfSquares(0, nullptr, DType::kI32, 3).status().message(),
            "no GPU SumOfSquares for i32 (f32, f16, bf16 only)");
  EXPECT_EQ(CudaHasInfOrNan(0, nullptr, DType::kF16, 3).status().message(),
            "GPU HasInfOrNan of 3 elements: null array");
  // Nothing to read: no kernel, no GPU needed.
  EXPECT_EQ(*CudaSumOfSquares(0, nullptr, DType::kF32, 0), 0.0);
  const CudaReductionInput empty[] = {{nullptr, 0}, {nullptr, 0}};
  EXPECT_EQ(*CudaSumsOfSquares(0, DType::kBF16, empty),
            (std::vector<double>{0.0, 0.0}));
  const CudaReductionInput one_null[] = {{nullptr, 0}, {nullptr, 4}};
  EXPECT_EQ(CudaSumsOfSquares(0, DType::kBF16, one_null).status().message(),
            "GPU SumOfSquares of 4 elements: null array");
}

}  // namespace
}  // namespace chunkzero
