// Whole-array kernel entry points that take the ISA to run. Private to
// //tensor/cpu and //tools/bench: the public kernels
// (tensor/cpu/cast_kernels.h, elementwise_kernels.h, reduction_kernels.h)
// call these with BestKernelIsa(); tests and benchmarks call them with each
// supported ISA.
//
//   for (KernelIsa isa : SupportedKernelIsas()) {
//     kernels_internal::CastF32ToF16(isa, out, in, n);
//   }
//
// Semantics, shapes and thread-safety are those of the public functions of
// the same names. Large arrays are split over ParallelFor (base/
// parallel_for.h) in ranges whose boundaries depend only on n, never on the
// thread count, so results do not depend on it either.
//
// REQUIRES (every function): IsKernelIsaSupported(isa).
#ifndef CHUNKZERO_TENSOR_CPU_INTERNAL_KERNELS_ISA_H_
#define CHUNKZERO_TENSOR_CPU_INTERNAL_KERNELS_ISA_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "tensor/cpu/cpu_features.h"
#include "tensor/dtype.h"

namespace chunkzero {
namespace kernels_internal {

// Arrays shorter than this run on the calling thread alone.
inline constexpr size_t kParallelMinElements = size_t{1} << 17;
// Each thread gets at least this many elements.
inline constexpr size_t kParallelGrainElements = size_t{1} << 16;
// Casts whose output is at least this large use non-temporal stores (they
// would evict the cache anyway, and skip reading the output lines first).
inline constexpr size_t kDefaultStreamingThresholdBytes = size_t{8} << 20;

// Copy splits over threads from this size on, in ranges of at least the
// grain.
inline constexpr size_t kParallelMinCopyBytes = size_t{1} << 20;
inline constexpr size_t kParallelGrainCopyBytes = size_t{1} << 19;

// Overrides kDefaultStreamingThresholdBytes (tests, benchmarks); pass
// kDefaultStreamingThresholdBytes to restore it. Thread-safe.
void SetStreamingThresholdForTesting(size_t bytes);
size_t StreamingThresholdBytes();

// Shared argument check of the dtype-dispatched kernels: InvalidArgument
// naming `op` if a dtype is not a DType enumerator or a buffer is null while
// n > 0.
[[nodiscard]] absl::Status CheckKernelArgs(
    absl::string_view op, std::initializer_list<DType> dtypes, size_t n,
    std::initializer_list<const void*> buffers);

// Copy has one implementation for every ISA: memcpy (which the C library
// already specialises per CPU), split over threads.
void Copy(void* out, const void* in, size_t bytes);

void CastF32ToF16(KernelIsa isa, uint16_t* out, const float* in, size_t n);
void CastF16ToF32(KernelIsa isa, float* out, const uint16_t* in, size_t n);
void CastF32ToBF16(KernelIsa isa, uint16_t* out, const float* in, size_t n);
void CastBF16ToF32(KernelIsa isa, float* out, const uint16_t* in, size_t n);
void CastF16ToBF16(KernelIsa isa, uint16_t* out, const uint16_t* in, size_t n);
void CastBF16ToF16(KernelIsa isa, uint16_t* out, const uint16_t* in, size_t n);

void ScaleF32(KernelIsa isa, float* x, float a, size_t n);
void ScaleF16(KernelIsa isa, uint16_t* x, float a, size_t n);
void ScaleBF16(KernelIsa isa, uint16_t* x, float a, size_t n);
void AxpyF32(KernelIsa isa, float* y, float a, const float* x, size_t n);
void AxpyF16(KernelIsa isa, uint16_t* y, float a, const uint16_t* x, size_t n);
void AxpyBF16(KernelIsa isa, uint16_t* y, float a, const uint16_t* x, size_t n);

bool HasInfOrNanF32(KernelIsa isa, const float* x, size_t n);
bool HasInfOrNanF16(KernelIsa isa, const uint16_t* x, size_t n);
bool HasInfOrNanBF16(KernelIsa isa, const uint16_t* x, size_t n);

double SumOfSquaresF32(KernelIsa isa, const float* x, size_t n);
double SumOfSquaresF16(KernelIsa isa, const uint16_t* x, size_t n);
double SumOfSquaresBF16(KernelIsa isa, const uint16_t* x, size_t n);

}  // namespace kernels_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_CPU_INTERNAL_KERNELS_ISA_H_
