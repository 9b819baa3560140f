#include "optim/cuda_fused_kernels.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "optim/fused_kernels.h"
#include "tensor/cpu/cast_kernels.h"
#include "tensor/cuda/cuda_runtime.h"

namespace chunkzero {
namespace {

constexpr size_t kN = 100003;  // Several grid-stride rounds, odd tail.

// Bytes on the host and a copy on the GPU.
class Array {
 public:
  Array(size_t n, DType dtype) : dtype_(dtype), host_(n * ElementSize(dtype)) {}
  ~Array() {
    if (device_ != nullptr) CudaFree(0, device_).IgnoreError();
  }
  Array(const Array&) = delete;
  Array& operator=(const Array&) = delete;

  uint8_t* host() { return host_.data(); }
  float* host_f32() { return reinterpret_cast<float*>(host_.data()); }
  const std::vector<uint8_t>& bytes() const { return host_; }
  DType dtype() const { return dtype_; }

  void* ToGpu() {
    if (device_ == nullptr) device_ = *CudaMalloc(0, host_.size());
    EXPECT_TRUE(CudaMemcpy(device_, host_.data(), host_.size()).ok());
    return device_;
  }
  std::vector<uint8_t> FromGpu() const {
    std::vector<uint8_t> out(host_.size());
    EXPECT_TRUE(CudaMemcpy(out.data(), device_, out.size()).ok());
    return out;
  }

 private:
  DType dtype_;
  std::vector<uint8_t> host_;
  void* device_ = nullptr;
};

// Random values of mixed magnitude with a sprinkling of zeros, subnormals,
// infinities and NaNs (one special per element at most).
void Fill(Array& a, uint32_t seed, bool positive) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> exponent(-8.0f, 2.0f);
  std::vector<float> f32(a.bytes().size() / ElementSize(a.dtype()));
  for (size_t i = 0; i < f32.size(); ++i) {
    float v = std::pow(10.0f, exponent(rng));
    if (!positive && (rng() & 1)) v = -v;
    switch (rng() % 997) {
      case 0:
        v = 0.0f;
        break;
      case 1:
        v = 1e-40f;
        break;
      case 2:
        v = std::numeric_limits<float>::infinity();
        break;
      case 3:
        v = std::numeric_limits<float>::quiet_NaN();
        break;
      default:
        break;
    }
    f32[i] = v;
  }
  ASSERT_TRUE(
      Cast(a.host(), a.dtype(), f32.data(), DType::kF32, f32.size()).ok());
}

class CudaFusedKernelsOnGpu : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no GPU visible (built with CUDA: " << BuiltWithCuda()
                   << ")";
    }
  }
};

AdamStep Step(float weight_decay, bool decoupled) {
  AdamStep step;
  step.lr = 3e-4f;
  step.weight_decay = weight_decay;
  step.decoupled_weight_decay = decoupled;
  step.bias_correction1 = 1.0f - std::pow(step.beta1, 3.0f);
  step.bias_correction2_sqrt = std::sqrt(1.0f - std::pow(step.beta2, 3.0f));
  step.grad_scale = 1.0f / 1024;
  return step;
}

// Every weight-decay mode, param_out of each dtype, absent, or the grad
// itself (grad reuse): the GPU's arrays equal the CPU's bit for bit.
TEST_P(CudaFusedKernelsOnGpu, AdamEqualsTheCpuBitForBit) {
  const DType grad_dtype = GetParam();
  struct Mode {
    float weight_decay;
    bool decoupled;
  };
  for (Mode mode : {Mode{0.0f, false}, Mode{0.1f, false}, Mode{0.1f, true}}) {
    for (int out_kind = 0; out_kind < 5; ++out_kind) {
      SCOPED_TRACE(testing::Message()
                   << "decay " << mode.weight_decay << " decoupled "
                   << mode.decoupled << " out " << out_kind);
      const AdamStep step = Step(mode.weight_decay, mode.decoupled);
      Array param(kN, DType::kF32), m(kN, DType::kF32), v(kN, DType::kF32),
          grad(kN, grad_dtype);
      Fill(param, 1, false);
      Fill(m, 2, false);
      Fill(v, 3, true);
      Fill(grad, 4, false);
      // out_kind: 0-2 a separate f32/f16/bf16 array, 3 none, 4 the grad.
      const DType out_dtypes[] = {DType::kF32, DType::kF16, DType::kBF16};
      const bool reuse = out_kind == 4;
      const bool none = out_kind == 3;
      const DType out_dtype = reuse  ? grad_dtype
                              : none ? DType::kF32
                                     : out_dtypes[out_kind];
      Array out(kN, out_dtype);

      void* d_param = param.ToGpu();
      void* d_m = m.ToGpu();
      void* d_v = v.ToGpu();
      void* d_grad = grad.ToGpu();
      void* d_out = reuse ? d_grad : none ? nullptr : out.ToGpu();
      ASSERT_TRUE(CudaFusedAdam(step, static_cast<float*>(d_param),
                                static_cast<float*>(d_m),
                                static_cast<float*>(d_v), d_grad, grad_dtype,
                                d_out, out_dtype, kN, nullptr)
                      .ok());
      ASSERT_TRUE(CudaStreamSynchronize(nullptr).ok());

      void* h_out = reuse ? grad.host() : none ? nullptr : out.host();
      ASSERT_TRUE(FusedAdam(step, param.host_f32(), m.host_f32(), v.host_f32(),
                            grad.host(), grad_dtype, h_out, out_dtype, kN)
                      .ok());
      EXPECT_EQ(param.FromGpu(), param.bytes());
      EXPECT_EQ(m.FromGpu(), m.bytes());
      EXPECT_EQ(v.FromGpu(), v.bytes());
      if (reuse) {
        EXPECT_EQ(grad.FromGpu(), grad.bytes());
      } else if (!none) {
        EXPECT_EQ(out.FromGpu(), out.bytes());
      }
    }
  }
}

TEST_P(CudaFusedKernelsOnGpu, SgdEqualsTheCpuBitForBit) {
  const DType grad_dtype = GetParam();
  struct Mode {
    float momentum;
    bool first;
    bool nesterov;
    float weight_decay;
  };
  for (Mode mode :
       {Mode{0.0f, false, false, 0.0f}, Mode{0.9f, true, false, 0.01f},
        Mode{0.9f, false, false, 0.0f}, Mode{0.9f, false, true, 0.01f}}) {
    SCOPED_TRACE(testing::Message()
                 << "momentum " << mode.momentum << " first " << mode.first
                 << " nesterov " << mode.nesterov);
    SgdStep step;
    step.lr = 0.05f;
    step.momentum = mode.momentum;
    step.first_step = mode.first;
    step.nesterov = mode.nesterov;
    step.dampening = 0.1f;
    step.weight_decay = mode.weight_decay;
    step.grad_scale = 0.5f;
    Array param(kN, DType::kF32), buf(kN, DType::kF32), grad(kN, grad_dtype),
        out(kN, DType::kBF16);
    Fill(param, 5, false);
    Fill(buf, 6, false);
    Fill(grad, 7, false);
    void* d_param = param.ToGpu();
    void* d_buf = buf.ToGpu();
    void* d_grad = grad.ToGpu();
    void* d_out = out.ToGpu();
    ASSERT_TRUE(CudaFusedSgd(step, static_cast<float*>(d_param),
                             static_cast<float*>(d_buf), d_grad, grad_dtype,
                             d_out, DType::kBF16, kN, nullptr)
                    .ok());
    ASSERT_TRUE(CudaStreamSynchronize(nullptr).ok());
    ASSERT_TRUE(FusedSgd(step, param.host_f32(), buf.host_f32(), grad.host(),
                         grad_dtype, out.host(), DType::kBF16, kN)
                    .ok());
    EXPECT_EQ(param.FromGpu(), param.bytes());
    EXPECT_EQ(buf.FromGpu(), buf.bytes());
    EXPECT_EQ(out.FromGpu(), out.bytes());
  }
}

TEST_P(CudaFusedKernelsOnGpu, AccumulateEqualsTheCpuBitForBit) {
  const DType grad_dtype = GetParam();
  for (bool first : {true, false}) {
    SCOPED_TRACE(first);
    Array acc(kN, DType::kF32), grad(kN, grad_dtype), master(kN, DType::kF32);
    Fill(acc, 8, false);
    Fill(grad, 9, false);
    Fill(master, 10, false);
    void* d_acc = acc.ToGpu();
    void* d_grad = grad.ToGpu();
    void* d_master = master.ToGpu();
    // Grad reuse: the restored weights overwrite the grad.
    ASSERT_TRUE(CudaAccumulateGradAndRestore(
                    static_cast<float*>(d_acc), d_grad, grad_dtype, first,
                    static_cast<const float*>(d_master), d_grad, grad_dtype, kN,
                    nullptr)
                    .ok());
    ASSERT_TRUE(CudaStreamSynchronize(nullptr).ok());
    ASSERT_TRUE(AccumulateGradAndRestore(acc.host_f32(), grad.host(),
                                         grad_dtype, first, master.host_f32(),
                                         grad.host(), grad_dtype, kN)
                    .ok());
    EXPECT_EQ(acc.FromGpu(), acc.bytes());
    EXPECT_EQ(grad.FromGpu(), grad.bytes());
  }
}

INSTANTIATE_TEST_SUITE_P(GradDTypes, CudaFusedKernelsOnGpu,
                         ::testing::Values(DType::kF32, DType::kF16,
                                           DType::kBF16),
                         [](const auto& info) {
                           return std::string(DTypeName(info.param));
                         });

// The CPU kernels' argument rules hold before anything reaches the GPU;
// valid arguments without CUDA are Unimplemented.
TEST(CudaFusedKernels, ChecksArgumentsLikeTheCpu) {
  float x = 0;
  uint16_t g = 0;
  const absl::Status null_state =
      CudaFusedAdam(AdamStep(), &x, nullptr, &x, &g, DType::kF16, nullptr,
                    DType::kF16, 1, nullptr);
  EXPECT_EQ(null_state.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(null_state.message(), "CudaFusedAdam: null array for 1 elements");
  const absl::Status bad_dtype =
      CudaFusedSgd(SgdStep(), &x, nullptr, &g, DType::kI32, nullptr,
                   DType::kF16, 1, nullptr);
  EXPECT_EQ(bad_dtype.code(), absl::StatusCode::kInvalidArgument);
  uint16_t pair[2] = {0, 0};
  const absl::Status partial = CudaAccumulateGradAndRestore(
      &x, pair, DType::kF16, true, &x, pair, DType::kF32, 1, nullptr);
  EXPECT_EQ(partial.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(partial.message(),
            "CudaAccumulateGradAndRestore: param_out (f32) overlaps grad "
            "(f16) without being the same array of the same dtype");
  const absl::Status empty =
      CudaFusedAdam(AdamStep(), nullptr, nullptr, nullptr, nullptr, DType::kF16,
                    nullptr, DType::kF16, 0, nullptr);
  if (BuiltWithCuda()) {
    EXPECT_TRUE(empty.ok()) << empty;  // Nothing to launch.
  } else {
    EXPECT_EQ(empty.code(), absl::StatusCode::kUnimplemented);
    EXPECT_EQ(empty.message(),
              "CudaFusedAdam over 0 elements on the GPU: this binary was "
              "built without --config=cuda");
  }
}

}  // namespace
}  // namespace chunkzero
