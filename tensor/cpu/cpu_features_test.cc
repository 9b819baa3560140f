#include "tensor/cpu/cpu_features.h"

#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "gtest/gtest.h"

namespace chunkzero {
namespace {

TEST(CpuFeatures, ScalarIsAlwaysSupported) {
  EXPECT_TRUE(IsKernelIsaSupported(KernelIsa::kScalar));
  ASSERT_FALSE(SupportedKernelIsas().empty());
  EXPECT_EQ(SupportedKernelIsas().front(), KernelIsa::kScalar);
}

TEST(CpuFeatures, SupportMatchesFeatures) {
  const CpuFeatures& features = GetCpuFeatures();
  EXPECT_EQ(IsKernelIsaSupported(KernelIsa::kAvx2), features.avx2);
  EXPECT_EQ(IsKernelIsaSupported(KernelIsa::kAvx512), features.avx512);
  // The AVX-512 kernels also use AVX2/F16C instructions.
  if (features.avx512) {
    EXPECT_TRUE(features.avx2);
  }
  std::cout << "CPU: avx2+f16c+fma=" << features.avx2
            << " avx512f+bw+vl=" << features.avx512
            << " best=" << BestKernelIsa() << "\n";
}

TEST(CpuFeatures, BestIsSupportedAndListed) {
  const KernelIsa best = BestKernelIsa();
  EXPECT_TRUE(IsKernelIsaSupported(best));
  // Without CHUNKZERO_KERNEL_ISA the best is the last supported one.
  if (std::getenv("CHUNKZERO_KERNEL_ISA") == nullptr) {
    EXPECT_EQ(best, SupportedKernelIsas().back());
  }
}

TEST(CpuFeatures, Names) {
  EXPECT_EQ(KernelIsaName(KernelIsa::kScalar), "scalar");
  EXPECT_EQ(KernelIsaName(KernelIsa::kAvx2), "avx2");
  EXPECT_EQ(KernelIsaName(KernelIsa::kAvx512), "avx512");
  std::ostringstream os;
  os << KernelIsa::kAvx2;
  EXPECT_EQ(os.str(), "avx2");
}

class IsaAvailability : public ::testing::TestWithParam<KernelIsa> {};

// Runs one instruction of the ISA when it is reported, so that a wrong
// report fails here (SIGILL) and not deep in a kernel.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,f16c,fma"))) float Avx2Probe(float x) {
  volatile float v = x;
  return _cvtsh_ss(_cvtss_sh(v, 0));
}
__attribute__((target("avx512f,avx512bw,avx512vl"))) int Avx512Probe(int x) {
  volatile int v = x;
  const __m512i a = _mm512_set1_epi32(v);
  int lanes[16];
  _mm512_storeu_si512(lanes, _mm512_add_epi32(a, a));
  return lanes[15];
}
#endif

TEST_P(IsaAvailability, RunsWhenReported) {
  const KernelIsa isa = GetParam();
  if (!IsKernelIsaSupported(isa)) {
    GTEST_SKIP() << "CPU lacks " << KernelIsaName(isa);
  }
#if defined(__x86_64__) && defined(__GNUC__)
  if (isa == KernelIsa::kAvx2) {
    EXPECT_EQ(Avx2Probe(1.5f), 1.5f);
  }
  if (isa == KernelIsa::kAvx512) {
    EXPECT_EQ(Avx512Probe(2), 4);
  }
#endif
}

INSTANTIATE_TEST_SUITE_P(AllIsas, IsaAvailability,
                         ::testing::Values(KernelIsa::kScalar, KernelIsa::kAvx2,
                                           KernelIsa::kAvx512),
                         [](const ::testing::TestParamInfo<KernelIsa>& info) {
                           return std::string(KernelIsaName(info.param));
                         });

}  // namespace
}  // namespace chunkzero
