// GptModel on a GPU against the same model on the CPU (the reference):
// the loss and every parameter's grad, in f32 and with bf16 products.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/testing/compare.h"
#include "models/common/testing/one_step.h"
#include "models/gpt2/gpt_model.h"
#include "tensor/cuda/cuda_runtime.h"
#include "tensor/memory/memory_tracker.h"

namespace chunkzero {
namespace {

using ::chunkzero::kernels_testing::RelativeError;
using ::chunkzero::model_testing::Norm;
using ::chunkzero::model_testing::OneStep;
using ::chunkzero::model_testing::StepResult;
using ::testing::HasSubstr;

GptConfig SmallConfig() {
  GptConfig c;
  c.layers = 2;
  c.d_model = 64;
  c.heads = 4;
  c.seq_len = 40;
  c.vocab = 97;
  return c;
}

TEST(GptModelOnGpu, WithoutAGpuCreateSaysWhy) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is visible";
  absl::StatusOr<std::unique_ptr<GptModel>> model =
      GptModel::Create(SmallConfig(), 1, DType::kF32, Device::Cuda(0));
  EXPECT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(),
              HasSubstr("making parameter 'wte.weight' on cuda:0"));
}

// The CPU model is the reference. f32: the loss and each grad's norm
// within 1e-5, each grad within 1e-4 of its largest element. bf16
// products (and bf16 parameters): the GPU and CPU round the same operands,
// but probabilities that differ in the last f32 bit may round to
// neighbouring bf16 values, so the bounds are looser.
TEST(GptModelOnGpu, LossAndGradsMatchTheCpuModel) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no GPU visible";
  struct Case {
    DType dtype;
    gemm::Precision precision;
    bool fused;
    double loss_bound, norm_bound, grad_bound;
  };
  for (const Case& c :
       {Case{DType::kF32, gemm::Precision::kF32, false, 1e-5, 1e-5, 1e-4},
        Case{DType::kF32, gemm::Precision::kF32, true, 1e-5, 1e-5, 1e-4},
        Case{DType::kBF16, gemm::Precision::kBf16, false, 1e-3, 2e-2, 5e-2},
        Case{DType::kBF16, gemm::Precision::kBf16, true, 1e-3, 2e-2, 5e-2}}) {
    SCOPED_TRACE(
        absl::StrCat(DTypeName(c.dtype), c.fused ? ", fused attention" : ""));
    constexpr int B = 3, T = 33;  // T > 32: several lanes per softmax row.
    auto cpu = *GptModel::Create(SmallConfig(), 5, c.dtype);
    absl::StatusOr<std::unique_ptr<GptModel>> gpu =
        GptModel::Create(SmallConfig(), 5, c.dtype, Device::Cuda(0));
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    EXPECT_EQ((*gpu)->compute_device(), Device::Cuda(0));
    cpu->set_matmul_precision(c.precision);
    (*gpu)->set_matmul_precision(c.precision);
    ASSERT_TRUE((*gpu)->set_fused_attention(c.fused).ok());
    MemoryTracker tracker;
    ASSERT_TRUE((*gpu)->set_memory_accounting(&tracker, Device::Cuda(0)).ok());
    const StepResult want = OneStep(*cpu, B, T, SmallConfig().vocab);
    const StepResult got = OneStep(**gpu, B, T, SmallConfig().vocab);
    EXPECT_NEAR(got.loss, want.loss, c.loss_bound * std::fabs(want.loss));
    for (const auto& [name, grad] : want.grads) {
      SCOPED_TRACE(name);
      const std::vector<float>& g = got.grads.at(name);
      EXPECT_NEAR(Norm(g), Norm(grad), c.norm_bound * Norm(grad) + 1e-12);
      EXPECT_LT(RelativeError(g, grad), c.grad_bound);
    }
    // Activations and the bf16 scratch count on the GPU.
    EXPECT_GE(tracker.Current(Device::Cuda(0), MemoryCategory::kActivation),
              (*gpu)->workspace_bytes());
    // A second step on the same buffers gives the same loss.
    EXPECT_EQ(OneStep(**gpu, B, T, SmallConfig().vocab).loss, got.loss);
  }
}

}  // namespace
}  // namespace chunkzero
