// The fused optimizer kernels of optim/fused_kernels.h on the GPU: the same
// arguments, element math, results and argument errors, over device
// memory, enqueued on a CUDA stream.
//
//   CZ_RETURN_IF_ERROR(CudaFusedAdam(step, master, exp_avg, exp_avg_sq,
//                                    grad16, DType::kBF16, grad16,
//                                    DType::kBF16, n, compute_stream));
//
// Every element runs optim/internal/fused_math.h, the CPU scalar kernels'
// definition, compiled with IEEE division and square root and no FMA
// contraction, so the results equal the CPU's bit for bit (NaN payloads
// aside where several operands are NaN). Each call enqueues one kernel on
// `stream` (null: the legacy default stream) and returns at once; a launch
// failure is Internal naming the kernel and the CUDA error, and a fault
// while the kernel runs shows at the stream's next synchronisation. Built
// without --config=cuda every call is Unimplemented (after the argument
// checks).
#ifndef CHUNKZERO_OPTIM_CUDA_FUSED_KERNELS_H_
#define CHUNKZERO_OPTIM_CUDA_FUSED_KERNELS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "optim/fused_step.h"
#include "tensor/cuda/cuda_handles.h"
#include "tensor/dtype.h"

namespace chunkzero {

[[nodiscard]] absl::Status CudaFusedAdam(const AdamStep& step, float* param,
                                         float* exp_avg, float* exp_avg_sq,
                                         const void* grad, DType grad_dtype,
                                         void* param_out, DType out_dtype,
                                         size_t n, CudaStream stream);

[[nodiscard]] absl::Status CudaFusedSgd(const SgdStep& step, float* param,
                                        float* momentum_buffer,
                                        const void* grad, DType grad_dtype,
                                        void* param_out, DType out_dtype,
                                        size_t n, CudaStream stream);

[[nodiscard]] absl::Status CudaAccumulateGradAndRestore(
    float* acc, const void* grad, DType grad_dtype, bool first,
    const float* master, void* param_out, DType out_dtype, size_t n,
    CudaStream stream);

}  // namespace chunkzero

#endif  // CHUNKZERO_OPTIM_CUDA_FUSED_KERNELS_H_
