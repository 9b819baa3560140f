// What the CPU supports, and which kernel implementation to use.
//
//   if (GetCpuFeatures().avx512) { ... }
//   KernelIsa isa = BestKernelIsa();           // e.g. KernelIsa::kAvx512
//   for (KernelIsa i : SupportedKernelIsas()) RunWith(i);  // tests, benches
//
// Kernels in tensor/cpu come in three bit-identical implementations: plain
// C++ (always available), AVX2 (+F16C, FMA) and AVX-512 (F, BW, VL). Each
// public kernel runs BestKernelIsa(); tests and benchmarks pick one
// explicitly through the kernels' internal entry points
// (tensor/cpu/internal/kernels_isa.h).
//
// The environment variable CHUNKZERO_KERNEL_ISA=scalar|avx2|avx512 caps
// BestKernelIsa() (for debugging and for measuring the fallbacks); it never
// raises it above what the CPU supports.
//
// Thread-safety: all functions are thread-safe; the CPU is probed once.
#ifndef CHUNKZERO_TENSOR_CPU_CPU_FEATURES_H_
#define CHUNKZERO_TENSOR_CPU_CPU_FEATURES_H_

#include <ostream>
#include <vector>

#include "absl/strings/string_view.h"

namespace chunkzero {

// Instruction-set groups the kernels use. A group is set only when the CPU
// has every extension in it and the OS saves the registers it needs.
struct CpuFeatures {
  bool avx2 = false;    // AVX2 + F16C + FMA.
  bool avx512 = false;  // AVX-512 F + BW + VL.
};

// The running CPU's features (probed once).
const CpuFeatures& GetCpuFeatures();

// Kernel implementations, from slowest to fastest.
enum class KernelIsa {
  kScalar = 0,
  kAvx2 = 1,
  kAvx512 = 2,
};

// "scalar", "avx2" or "avx512".
absl::string_view KernelIsaName(KernelIsa isa);
std::ostream& operator<<(std::ostream& os, KernelIsa isa);

// True if this CPU (and this build) can run `isa`. kScalar always can.
bool IsKernelIsaSupported(KernelIsa isa);

// Every supported ISA, kScalar first.
std::vector<KernelIsa> SupportedKernelIsas();

// The fastest supported ISA, capped by CHUNKZERO_KERNEL_ISA if it is set.
KernelIsa BestKernelIsa();

}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_CPU_CPU_FEATURES_H_
