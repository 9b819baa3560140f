// The fused optimizer kernels on the GPU, as nvcc compiles them
// (optim/internal/cuda_fused_kernels_nvcc.cu): plain functions over device
// pointers, free of Abseil. Each enqueues one kernel on `stream` and
// returns at once with the launch's cudaError_t (0: success), or kNoCuda
// without --config=cuda (cuda_fused_kernels_nvcc_stub.cc stands in). Call
// them through optim/cuda_fused_kernels.h, which checks the arguments and
// turns the result into a Status.
#ifndef CHUNKZERO_OPTIM_INTERNAL_CUDA_FUSED_KERNELS_NVCC_H_
#define CHUNKZERO_OPTIM_INTERNAL_CUDA_FUSED_KERNELS_NVCC_H_

#include <cstddef>

#include "optim/internal/fused_constants.h"
#include "tensor/cuda/cuda_handles.h"

namespace chunkzero {
namespace optim_internal {
namespace cuda {

// What every function returns in a build without --config=cuda: not a
// cudaError_t.
inline constexpr int kNoCuda = -1;

// Element types of grad and param_out; kNone: param_out is null.
enum class Element { kF32, kF16, kBF16, kNone };

int Adam(const AdamConstants& c, float* param, float* exp_avg,
         float* exp_avg_sq, const void* grad, Element grad_type,
         void* param_out, Element out_type, size_t n, CudaStream stream);
int Sgd(const SgdConstants& c, float* param, float* momentum_buffer,
        const void* grad, Element grad_type, void* param_out, Element out_type,
        size_t n, CudaStream stream);
int Accumulate(bool first, float* acc, const void* grad, Element grad_type,
               const float* master, void* param_out, Element out_type, size_t n,
               CudaStream stream);

// The name of a cudaError_t, for messages.
const char* ErrorName(int error);

}  // namespace cuda
}  // namespace optim_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_OPTIM_INTERNAL_CUDA_FUSED_KERNELS_NVCC_H_
