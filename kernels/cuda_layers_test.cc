// The GPU product layers against the CPU ones (kernels/cpu_kernels.h),
// in f32 and bf16. Bf16Scratch is tested on the simulated device.
#include "kernels/cuda_layers.h"

#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu_kernels.h"
#include "kernels/testing/compare.h"
#include "kernels/testing/device_buffers.h"
#include "tensor/cuda/cuda_runtime.h"
#include "tensor/half.h"
#include "tensor/memory/memory_tracker.h"

namespace chunkzero {
namespace cuda_layers {
namespace {

using ::chunkzero::kernels_testing::Bf16Bits;
using ::chunkzero::kernels_testing::GpuTest;
using ::chunkzero::kernels_testing::RandomFloats;
using ::chunkzero::kernels_testing::RelativeError;
using ::testing::HasSubstr;

constexpr Device kSim = Device::Simulated(0);

// Slots grow to their largest request and keep it; the bytes count as
// activations.
TEST(Bf16Scratch, SlotsGrowAndAreCountedAsActivations) {
  MemoryTracker tracker;
  Bf16Scratch scratch(kSim, {MemoryCategory::kActivation, &tracker});
  absl::StatusOr<uint16_t*> a = scratch.Get(0, 100);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*scratch.Get(0, 40), *a);  // Smaller: the same block.
  ASSERT_TRUE(scratch.Get(2, 10).ok());
  EXPECT_EQ(scratch.bytes(), 220u);
  EXPECT_EQ(tracker.Current(kSim, MemoryCategory::kActivation), 220);
  ASSERT_TRUE(scratch.Get(0, 300).ok());  // Grows: the old block goes.
  EXPECT_EQ(scratch.bytes(), 620u);
  EXPECT_EQ(tracker.Current(kSim, MemoryCategory::kActivation), 620);
  const absl::Status bad = scratch.Get(3, 1).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.message(), "bf16 scratch slot 3 is not in [0, 3)");
}

TEST(CudaGptLayers, WithoutAGpuTheProductSaysWhy) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is visible";
  Bf16Scratch scratch(Device::Cuda(0));
  float x = 1, w = 2, out = 0;
  const absl::Status status =
      MatmulForward(&out, &x, {&w}, nullptr, 1, 1, 1, Precision::kF32, scratch);
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("gemm(N, N, m=1, n=1, k=1, f32)"));
}

// ---- With a GPU ----

class CudaGptLayersOnGpu : public GpuTest {
 protected:
  Bf16Scratch scratch_{Device::Cuda(0)};
};

TEST_F(CudaGptLayersOnGpu, ProductsMatchTheCpu) {
  constexpr int N = 24, IC = 40, OC = 72;
  const std::vector<float> x = RandomFloats(N * IC, 1),
                           w = RandomFloats(IC * OC, 2),
                           bias = RandomFloats(OC, 3),
                           dout = RandomFloats(N * OC, 4);
  for (Precision precision : {Precision::kF32, Precision::kBf16}) {
    SCOPED_TRACE(precision == Precision::kBf16 ? "bf16" : "f32");
    std::vector<float> out(N * OC), dx(N * IC), dw(IC * OC), db(OC),
        tout(N * OC), tdx(N * IC), tdw(OC * IC);
    cpu_kernels::MatmulForward(out.data(), x.data(), w.data(), bias.data(), N,
                               IC, OC, precision);
    cpu_kernels::MatmulBackward(dx.data(), dw.data(), db.data(), dout.data(),
                                x.data(), w.data(), N, IC, OC, precision);
    // The tied layout reads w as [OC, IC].
    cpu_kernels::MatmulTransposedForward(tout.data(), x.data(), w.data(), N, IC,
                                         OC, precision);
    cpu_kernels::MatmulTransposedBackward(tdx.data(), tdw.data(), dout.data(),
                                          x.data(), w.data(), N, IC, OC,
                                          precision);
    float *g_x = Up(x), *g_dout = Up(dout), *g_out = Up(out), *g_dx = Up(dx),
          *g_dw = Up(dw), *g_db = Up(db);
    // bf16 products read the bf16 copy when there is one.
    const CudaWeight weight = precision == Precision::kBf16
                                  ? CudaWeight{nullptr, Up(Bf16Bits(w))}
                                  : CudaWeight{Up(w), nullptr};
    ASSERT_TRUE(MatmulForward(g_out, g_x, weight, Up(bias), N, IC, OC,
                              precision, scratch_)
                    .ok());
    EXPECT_LT(RelativeError(Down(g_out, N * OC), out), 1e-5);
    ASSERT_TRUE(MatmulBackward(g_dx, g_dw, g_db, g_dout, g_x, weight, N, IC, OC,
                               precision, scratch_)
                    .ok());
    EXPECT_LT(RelativeError(Down(g_dx, N * IC), dx), 1e-5);
    EXPECT_LT(RelativeError(Down(g_dw, IC * OC), dw), 1e-5);
    EXPECT_LT(RelativeError(Down(g_db, OC), db), 1e-6);
    ASSERT_TRUE(MatmulTransposedForward(g_out, g_x, weight, N, IC, OC,
                                        precision, scratch_)
                    .ok());
    EXPECT_LT(RelativeError(Down(g_out, N * OC), tout), 1e-5);
    ASSERT_TRUE(MatmulTransposedBackward(g_dx, g_dw, g_dout, g_x, weight, N, IC,
                                         OC, precision, scratch_)
                    .ok());
    EXPECT_LT(RelativeError(Down(g_dx, N * IC), tdx), 1e-5);
    EXPECT_LT(RelativeError(Down(g_dw, OC * IC), tdw), 1e-5);
  }
}

// The CPU attention (the reference): its output, probabilities and dqkv.
struct CpuAttention {
  std::vector<float> out, att, dqkv;
};
CpuAttention RunCpuAttention(const std::vector<float>& qkv,
                             const std::vector<float>& dout, int B, int T,
                             int C, int NH, Precision precision) {
  const int N = B * T;
  CpuAttention r{std::vector<float>(N * C),
                 std::vector<float>(size_t{1} * B * NH * T * T),
                 std::vector<float>(N * 3 * C)};
  std::vector<float> datt(size_t{1} * T * T);
  cpu_kernels::AttentionForward(r.out.data(), r.att.data(), qkv.data(), B, T, C,
                                NH, precision);
  std::vector<float> used_up = r.att;  // The backward writes over it.
  cpu_kernels::AttentionBackward(r.dqkv.data(), datt.data(), 1, dout.data(),
                                 qkv.data(), used_up.data(), B, T, C, NH,
                                 precision);
  return r;
}

// In bf16 the probabilities are rounded before their products, and the CPU
// and GPU probabilities differ in the last f32 bits, so an element may
// round to the neighbouring bf16 value: a looser bound there.
TEST_F(CudaGptLayersOnGpu, AttentionMatchesTheCpu) {
  constexpr int B = 2, T = 37, C = 48, NH = 4, N = B * T;
  const std::vector<float> qkv = RandomFloats(N * 3 * C, 1, 2),
                           dout = RandomFloats(N * C, 2);
  for (Precision precision : {Precision::kF32, Precision::kBf16}) {
    SCOPED_TRACE(precision == Precision::kBf16 ? "bf16" : "f32");
    const double bound = precision == Precision::kBf16 ? 2e-2 : 1e-5;
    const CpuAttention want =
        RunCpuAttention(qkv, dout, B, T, C, NH, precision);
    const std::vector<float>&out = want.out, &att = want.att, &dqkv = want.dqkv;
    float *g_qkv = Up(qkv), *g_out = Up(out), *g_att = Up(att),
          *g_dqkv = Up(dqkv), *g_datt = Up(att);
    ASSERT_TRUE(
        AttentionForward(g_out, g_att, g_qkv, B, T, C, NH, precision, scratch_)
            .ok());
    EXPECT_LT(RelativeError(Down(g_att, att.size()), att), 1e-5);
    EXPECT_LT(RelativeError(Down(g_out, N * C), out), bound);
    ASSERT_TRUE(AttentionBackward(g_dqkv, g_datt, Up(dout), g_qkv, g_att, B, T,
                                  C, NH, precision, scratch_)
                    .ok());
    EXPECT_LT(RelativeError(Down(g_dqkv, N * 3 * C), dqkv), bound);
  }
}

// The fused attention takes whole heads of at most 128: refused before
// anything runs, on any machine.
TEST(CudaGptLayers, FusedAttentionRefusesWideHeads) {
  float x = 0;
  const absl::Status status =
      FusedAttentionForward(&x, &x, &x, 1, 1, 300, 1, Precision::kF32);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "fused attention: head size 300 (C 300, 1 heads); it takes whole "
            "heads of at most 128");
}

// Fused, the attention gives the CPU's output and grads (to rounding)
// while keeping only a log-sum-exp per query row. T = 100 spans two blocks
// of 64 query rows and ends inside a tile of 32 keys.
TEST_F(CudaGptLayersOnGpu, FusedAttentionMatchesTheCpu) {
  constexpr int B = 2, T = 100, C = 128, NH = 2, N = B * T;  // hd 64.
  const std::vector<float> qkv = RandomFloats(N * 3 * C, 1, 2),
                           dout = RandomFloats(N * C, 2);
  for (Precision precision : {Precision::kF32, Precision::kBf16}) {
    SCOPED_TRACE(precision == Precision::kBf16 ? "bf16" : "f32");
    const double out_bound = precision == Precision::kBf16 ? 2e-2 : 1e-5;
    const double grad_bound = precision == Precision::kBf16 ? 2e-2 : 1e-4;
    const CpuAttention want =
        RunCpuAttention(qkv, dout, B, T, C, NH, precision);
    const std::vector<float>&out = want.out, &dqkv = want.dqkv;
    float *g_qkv = Up(qkv), *g_out = Zeros<float>(N * C),
          *g_lse = Zeros<float>(B * NH * T),
          *g_delta = Zeros<float>(B * NH * T),
          *g_dqkv = Up(std::vector<float>(N * 3 * C, 7.0f));  // Overwritten.
    ASSERT_TRUE(
        FusedAttentionForward(g_out, g_lse, g_qkv, B, T, C, NH, precision)
            .ok());
    EXPECT_LT(RelativeError(Down(g_out, N * C), out), out_bound);
    ASSERT_TRUE(FusedAttentionBackward(g_dqkv, g_delta, Up(dout), g_qkv, g_out,
                                       g_lse, B, T, C, NH, precision)
                    .ok());
    EXPECT_LT(RelativeError(Down(g_dqkv, N * 3 * C), dqkv), grad_bound);
    // Each row's log-sum-exp: the first query sees one key, so its lse is
    // its own scaled score.
    const std::vector<float> lse = Down(g_lse, B * NH * T);
    float qk = 0;
    for (int d = 0; d < C / NH; ++d) qk += qkv[d] * qkv[C + d];
    if (precision == Precision::kF32) {
      EXPECT_NEAR(lse[0], qk / 8.0f, 1e-5f);  // 1 / sqrt(64)
    }
  }
}

}  // namespace
}  // namespace cuda_layers
}  // namespace chunkzero
