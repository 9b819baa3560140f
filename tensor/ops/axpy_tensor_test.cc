#include "tensor/ops/axpy_tensor.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor/cuda/cuda_runtime.h"

namespace chunkzero {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(AxpyTensor, AddsOnTheHostAndTheSimulatedDevice) {
  for (Device device : {Device::Cpu(), Device::Simulated(0)}) {
    SCOPED_TRACE(device.ToString());
    Tensor y = *Tensor::FromFloats({1, 2, 3}, {3})->To(device);
    const Tensor x = *Tensor::FromFloats({10, 20, 30}, {3})->To(device);
    ASSERT_TRUE(AxpyTensor(y, 0.5f, x).ok());
    EXPECT_THAT(*y.ToFloats(), ElementsAre(6, 12, 18));
  }
}

TEST(AxpyTensor, RefusesWhatItCannotAdd) {
  Tensor y = *Tensor::FromFloats({1, 2}, {2});
  const Tensor wrong_size = *Tensor::FromFloats({1, 2, 3}, {3});
  const Tensor f16 = *Tensor::FromFloats({1, 2}, {2}, DType::kF16);
  const Tensor elsewhere = *y.To(Device::Simulated(0));
  for (const Tensor* x : {&wrong_size, &f16, &elsewhere}) {
    const absl::Status status = AxpyTensor(y, 1, *x);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("want two materialised f32"));
  }
}

TEST(AxpyTensor, AddsOnAGpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no GPU visible";
  Tensor y = *Tensor::FromFloats({1, 2, 3}, {3})->To(Device::Cuda(0));
  const Tensor x = *Tensor::FromFloats({10, 20, 30}, {3})->To(Device::Cuda(0));
  ASSERT_TRUE(AxpyTensor(y, 0.5f, x).ok());
  EXPECT_THAT(*y.ToFloats(), ElementsAre(6, 12, 18));
}

}  // namespace
}  // namespace chunkzero
