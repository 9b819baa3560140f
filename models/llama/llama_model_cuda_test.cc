// LlamaModel on a GPU against the same model on the CPU (the reference):
// the loss and every parameter's grad, in f32 and with bf16 products, with
// grouped-query heads and a tied embedding. Without a GPU: what Create and
// the layers say instead.
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda_rmsnorm_rope_swiglu_kernels.h"
#include "kernels/layer_backend.h"
#include "kernels/testing/compare.h"
#include "models/common/testing/one_step.h"
#include "models/llama/llama_model.h"
#include "tensor/cuda/cuda_runtime.h"
#include "tensor/memory/memory_tracker.h"

namespace chunkzero {
namespace {

using ::chunkzero::kernels_testing::RelativeError;
using ::chunkzero::model_testing::Norm;
using ::chunkzero::model_testing::OneStep;
using ::chunkzero::model_testing::StepResult;
using ::testing::HasSubstr;

LlamaConfig SmallConfig(bool tied) {
  LlamaConfig c;
  c.layers = 2;
  c.d_model = 64;
  c.heads = 4;
  c.kv_heads = 2;
  c.ffn = 96;
  c.seq_len = 40;
  c.vocab = 97;
  c.rope_theta = 500000;
  c.tie_word_embeddings = tied;
  return c;
}

TEST(LlamaModelOnGpu, WithoutAGpuCreateAndTheLayersSayWhy) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is visible";
  absl::StatusOr<std::unique_ptr<LlamaModel>> model =
      LlamaModel::Create(SmallConfig(false), 1, DType::kF32, Device::Cuda(0));
  EXPECT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(),
              HasSubstr("making parameter 'model.embed_tokens.weight' on "
                        "cuda:0"));
  if (BuiltWithCuda()) return;
  // Each layer names itself in a build without CUDA.
  absl::StatusOr<std::unique_ptr<LayerBackend>> layers =
      MakeCudaLayerBackend(Device::Cuda(0));
  ASSERT_TRUE(layers.ok()) << layers.status();
  const absl::Status norm = cuda_kernels::RmsNormForward(
      nullptr, nullptr, nullptr, nullptr, 4, 8, 1e-5f);
  EXPECT_EQ(norm.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(norm.message(), HasSubstr("RMSNorm forward on the GPU"));
  EXPECT_THAT(
      cuda_kernels::ExpandQkv(nullptr, nullptr, nullptr, nullptr, 2, 4, 2, 8)
          .message(),
      HasSubstr("grouped-query expansion on the GPU"));
  EXPECT_THAT(MakeCudaLayerBackend(Device::Cpu()).status().message(),
              HasSubstr("need a GPU, not cpu"));
}

// The CPU model is the reference, with GptModelOnGpu's bounds: f32 within
// 1e-5 (loss, grad norms) and 1e-4 of a grad's largest element; bf16
// products looser, as operands that differ in the last f32 bit may round
// to neighbouring bf16 values.
TEST(LlamaModelOnGpu, LossAndGradsMatchTheCpuModel) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no GPU visible";
  struct Case {
    DType dtype;
    gemm::Precision precision;
    bool tied;
    double loss_bound, norm_bound, grad_bound;
  };
  for (const Case& c :
       {Case{DType::kF32, gemm::Precision::kF32, false, 1e-5, 1e-5, 1e-4},
        Case{DType::kF32, gemm::Precision::kF32, true, 1e-5, 1e-5, 1e-4},
        Case{DType::kBF16, gemm::Precision::kBf16, false, 1e-3, 2e-2, 5e-2}}) {
    SCOPED_TRACE(absl::StrCat(DTypeName(c.dtype), c.tied ? ", tied" : ""));
    constexpr int B = 3, T = 33;
    auto cpu = *LlamaModel::Create(SmallConfig(c.tied), 5, c.dtype);
    absl::StatusOr<std::unique_ptr<LlamaModel>> gpu =
        LlamaModel::Create(SmallConfig(c.tied), 5, c.dtype, Device::Cuda(0));
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    EXPECT_EQ((*gpu)->compute_device(), Device::Cuda(0));
    cpu->set_matmul_precision(c.precision);
    (*gpu)->set_matmul_precision(c.precision);
    MemoryTracker tracker;
    ASSERT_TRUE((*gpu)->set_memory_accounting(&tracker, Device::Cuda(0)).ok());
    const StepResult want = OneStep(*cpu, B, T, SmallConfig(c.tied).vocab);
    const StepResult got = OneStep(**gpu, B, T, SmallConfig(c.tied).vocab);
    EXPECT_NEAR(got.loss, want.loss, c.loss_bound * std::fabs(want.loss));
    for (const auto& [name, grad] : want.grads) {
      SCOPED_TRACE(name);
      const std::vector<float>& g = got.grads.at(name);
      EXPECT_NEAR(Norm(g), Norm(grad), c.norm_bound * Norm(grad) + 1e-12);
      EXPECT_LT(RelativeError(g, grad), c.grad_bound);
    }
    EXPECT_GE(tracker.Current(Device::Cuda(0), MemoryCategory::kActivation),
              (*gpu)->workspace_bytes());
    // A second step on the same buffers gives the same loss.
    EXPECT_EQ(OneStep(**gpu, B, T, SmallConfig(c.tied).vocab).loss, got.loss);
  }
}

}  // namespace
}  // namespace chunkzero
