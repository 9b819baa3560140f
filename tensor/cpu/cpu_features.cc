#include "tensor/cpu/cpu_features.h"

#include <cstdlib>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace chunkzero {
namespace {

CpuFeatures Probe() {
  CpuFeatures features;
#if defined(__x86_64__) && defined(__GNUC__)
  // libgcc's probe also checks (XGETBV) that the OS saves the YMM and ZMM
  // state, so a set bit means the instructions are usable.
  __builtin_cpu_init();
  // F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports
  // does not know "f16c".
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
  features.avx2 =
      __builtin_cpu_supports("avx2") && f16c && __builtin_cpu_supports("fma");
  features.avx512 = features.avx2 && __builtin_cpu_supports("avx512f") &&
                    __builtin_cpu_supports("avx512bw") &&
                    __builtin_cpu_supports("avx512vl");
#endif
  return features;
}

KernelIsa ComputeBest() {
  KernelIsa best = KernelIsa::kScalar;
  if (IsKernelIsaSupported(KernelIsa::kAvx2)) best = KernelIsa::kAvx2;
  if (IsKernelIsaSupported(KernelIsa::kAvx512)) best = KernelIsa::kAvx512;
  if (const char* env = std::getenv("CHUNKZERO_KERNEL_ISA")) {
    const absl::string_view cap(env);
    for (KernelIsa isa :
         {KernelIsa::kScalar, KernelIsa::kAvx2, KernelIsa::kAvx512}) {
      if (cap == KernelIsaName(isa) && isa < best) best = isa;
    }
  }
  return best;
}

}  // namespace

const CpuFeatures& GetCpuFeatures() {
  static const CpuFeatures features = Probe();
  return features;
}

absl::string_view KernelIsaName(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kScalar:
      return "scalar";
    case KernelIsa::kAvx2:
      return "avx2";
    case KernelIsa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

std::ostream& operator<<(std::ostream& os, KernelIsa isa) {
  return os << KernelIsaName(isa);
}

bool IsKernelIsaSupported(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kScalar:
      return true;
    case KernelIsa::kAvx2:
      return GetCpuFeatures().avx2;
    case KernelIsa::kAvx512:
      return GetCpuFeatures().avx512;
  }
  return false;
}

std::vector<KernelIsa> SupportedKernelIsas() {
  std::vector<KernelIsa> isas;
  for (KernelIsa isa :
       {KernelIsa::kScalar, KernelIsa::kAvx2, KernelIsa::kAvx512}) {
    if (IsKernelIsaSupported(isa)) isas.push_back(isa);
  }
  return isas;
}

KernelIsa BestKernelIsa() {
  static const KernelIsa best = ComputeBest();
  return best;
}

}  // namespace chunkzero
