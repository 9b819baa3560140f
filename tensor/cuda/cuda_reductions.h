// Overflow check and sums of squares over GPU arrays, with the CPU's
// results (tensor/cpu/reduction_kernels.h).
//
//   std::vector<CudaReductionInput> grads = {{g0, n0}, {g1, n1}};
//   CZ_ASSIGN_OR_RETURN(std::vector<double> sq,
//                       CudaSumsOfSquares(/*device_index=*/0, DType::kBF16,
//                                         grads, kComputeStream));
//   // sq[i] == SumOfSquares(g_i on the host), bit for bit.
//
// Pointers are device memory of GPU `device_index`. The kernels run on
// `stream` after whatever is queued there, into a scratch buffer kept per
// GPU (grown when a batch needs more, never allocated per call, never from
// a stream-ordered pool, which some virtualisation layers lack); one copy
// brings every result of a call to the host, and one event wait is the
// call's only host wait. So a step's norm over all of a GPU's chunks costs
// one copy and one wait. Calls for one GPU take turns (its scratch); calls
// for different GPUs run at once.
//
// The sums add in the CPU's fixed order (tensor/elementwise_math.h), so
// they are exactly SumOfSquares's bits; as there, a sum is Inf or NaN iff
// an element is, so one pass gives both the norm and the overflow check.
//
// InvalidArgument for a dtype other than f32, f16 or bf16, or a null x
// with n > 0; Internal naming the CUDA error if a kernel or the copy fails
// (ResourceExhausted if the scratch cannot grow); built without
// --config=cuda every call is Unimplemented.
#ifndef CHUNKZERO_TENSOR_CUDA_CUDA_REDUCTIONS_H_
#define CHUNKZERO_TENSOR_CUDA_CUDA_REDUCTIONS_H_

#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tensor/cuda/cuda_handles.h"
#include "tensor/dtype.h"

namespace chunkzero {

struct CudaReductionInput {
  const void* x = nullptr;  // Device memory.
  size_t n = 0;             // Elements.
};

[[nodiscard]] absl::StatusOr<std::vector<double>> CudaSumsOfSquares(
    int device_index, DType dtype, absl::Span<const CudaReductionInput> inputs,
    CudaStream stream = kComputeStream);

// One input: CudaSumsOfSquares of {x, n}.
[[nodiscard]] absl::StatusOr<double> CudaSumOfSquares(
    int device_index, const void* x, DType dtype, size_t n,
    CudaStream stream = kComputeStream);

[[nodiscard]] absl::StatusOr<bool> CudaHasInfOrNan(
    int device_index, const void* x, DType dtype, size_t n,
    CudaStream stream = kComputeStream);

}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_CUDA_CUDA_REDUCTIONS_H_
