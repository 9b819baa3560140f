#include "tensor/ops/cast_tensor.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor/cuda/cuda_runtime.h"
#include "tensor/storage.h"

namespace chunkzero {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr Device kSim = Device::Simulated(0);

// 1 + 3 * 2^-8 lies halfway between two bf16 values and rounds to the even
// one, 1 + 2^-6; the others are exact.
const std::vector<float> kValues = {1.0f, -2.5f, 1.01171875f, 0.0f};

std::vector<uint16_t> Bits16(const Tensor& t) {
  std::vector<uint16_t> bits(t.numel());
  std::memcpy(bits.data(), t.raw_data(), t.nbytes());
  return bits;
}

TEST(CastTensor, ConvertsOnTheHostRoundingToNearestEven) {
  Tensor src = *Tensor::FromFloats(kValues, {2, 2});
  Tensor dst = *Tensor::Empty({4}, DType::kBF16);
  ASSERT_TRUE(CastTensor(dst, src).ok());
  EXPECT_THAT(Bits16(dst), ElementsAre(0x3F80, 0xC020, 0x3F82, 0x0000));
  EXPECT_THAT(*dst.ToFloats(), ElementsAre(1.0f, -2.5f, 1.015625f, 0.0f));
}

// Between the CPU and the simulated device, in both directions, and
// between two 16-bit types through f32.
TEST(CastTensor, CrossesHostBackedDevices) {
  Tensor on_sim = *Tensor::FromFloats(kValues, {4}).value().To(kSim);
  Tensor f16 = *Tensor::Empty({4}, DType::kF16);
  ASSERT_TRUE(CastTensor(f16, on_sim).ok());
  EXPECT_THAT(*f16.ToFloats(), ElementsAre(1.0f, -2.5f, 1.01171875f, 0.0f));
  Tensor bf16_on_sim = *Tensor::Empty({4}, DType::kBF16, kSim);
  ASSERT_TRUE(CastTensor(bf16_on_sim, f16).ok());
  EXPECT_EQ(bf16_on_sim.device(), kSim);
  EXPECT_THAT(Bits16(bf16_on_sim), ElementsAre(0x3F80, 0xC020, 0x3F82, 0));
}

TEST(CastTensor, RefusesWhatItCannotConvert) {
  Tensor src = *Tensor::FromFloats(kValues, {4});
  Tensor three = *Tensor::Empty({3}, DType::kF16);
  const absl::Status counts = CastTensor(three, src);
  EXPECT_EQ(counts.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(counts.message(), HasSubstr("the element counts differ"));

  Tensor unallocated = *Tensor::View(
      Storage::CreateUnallocated(8, Device::Cpu()), 0, {4}, DType::kF16);
  const absl::Status no_memory = CastTensor(unallocated, src);
  EXPECT_EQ(no_memory.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(no_memory.message(), HasSubstr("storage not materialised"));

  Tensor ints = *Tensor::Empty({4}, DType::kI32);
  const absl::Status dtype = CastTensor(ints, src);
  EXPECT_EQ(dtype.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dtype.message(), HasSubstr("casting f32[4]"));

  Tensor empty_dst = *Tensor::Empty({0}, DType::kF16);
  EXPECT_TRUE(CastTensor(empty_dst, *Tensor::Empty({0}, DType::kF32)).ok());
}

// On a GPU the kernel runs there, with the host's bits; a host source is
// copied up first, and a GPU source comes down for a host destination.
TEST(CastTensor, OnAGpuGivesTheHostsBits) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no GPU visible";
  const Device gpu = Device::Cuda(0);
  Tensor src = *Tensor::FromFloats(kValues, {4});
  Tensor on_gpu = *Tensor::Empty({4}, DType::kBF16, gpu);
  ASSERT_TRUE(CastTensor(on_gpu, src).ok());
  Tensor back = *on_gpu.To(Device::Cpu());
  EXPECT_THAT(Bits16(back), ElementsAre(0x3F80, 0xC020, 0x3F82, 0x0000));
  Tensor f32 = *Tensor::Empty({4}, DType::kF32);
  ASSERT_TRUE(CastTensor(f32, on_gpu).ok());
  EXPECT_THAT(*f32.ToFloats(), ElementsAre(1.0f, -2.5f, 1.015625f, 0.0f));
}

}  // namespace
}  // namespace chunkzero
