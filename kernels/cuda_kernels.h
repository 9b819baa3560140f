// The transformer kernels on a GPU: the CUDA counterparts of
// kernels/cpu_kernels.h
// (same arguments and layouts; see there for what each computes), on device
// memory of the current GPU.
//
//   CZ_RETURN_IF_ERROR(cuda_kernels::LayerNormForward(out, mean, rstd, x,
//                                                         w, b, N, C));
//
// Every call enqueues its kernels on `stream` (the compute stream,
// kComputeStream, unless given) and returns without waiting, except
// CrossEntropyForward, whose mean the host needs; a kernel's own failure
// shows at the next call that synchronises (a copy to the host). The results
// match the CPU layers to rounding: the per-element math is the CPU's
// (kernels/internal/layer_math.h), and every sum runs in a fixed order,
// so results repeat bit for bit from run to run: over rows, 32 strided
// partial sums per column added in order (the embedding's grads: the
// CPU's row order and bits); within a row, a warp's or a block's tree.
//
// Differences from the CPU layers: a token or target outside [0, V) gives
// NaN (in the embedding's row, in the row's loss) instead of being a
// precondition, as the GPU cannot stop to report it.
//
// Errors: Internal naming the layer and CUDA's error when a launch fails;
// Unimplemented without --config=cuda.
#ifndef CHUNKZERO_KERNELS_CUDA_KERNELS_H_
#define CHUNKZERO_KERNELS_CUDA_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensor/cuda/cuda_handles.h"
#include "tensor/dtype.h"

namespace chunkzero {
namespace cuda_kernels {

[[nodiscard]] absl::Status EmbeddingForward(float* out, const int32_t* tokens,
                                            const float* wte, const float* wpe,
                                            int B, int T, int C, int V,
                                            CudaStream stream = kComputeStream);
[[nodiscard]] absl::Status EmbeddingBackward(
    float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
    int T, int C, int V, int P, CudaStream stream = kComputeStream);

[[nodiscard]] absl::Status LayerNormForward(float* out, float* mean,
                                            float* rstd, const float* x,
                                            const float* w, const float* b,
                                            int N, int C,
                                            CudaStream stream = kComputeStream);
[[nodiscard]] absl::Status LayerNormBackward(
    float* dx, float* dw, float* db, const float* dout, const float* x,
    const float* w, const float* mean, const float* rstd, int N, int C,
    CudaStream stream = kComputeStream);

// out[N, C] = bias in every row (a product's bias, before a GEMM with beta
// 1), and out[C] = the column sums of in[N, C] (a bias grad).
[[nodiscard]] absl::Status BroadcastRows(float* out, const float* bias, int N,
                                         int C,
                                         CudaStream stream = kComputeStream);
[[nodiscard]] absl::Status ColumnSums(float* out, const float* in, int N, int C,
                                      CudaStream stream = kComputeStream);

[[nodiscard]] absl::Status GeluForward(float* out, const float* x, size_t n,
                                       CudaStream stream = kComputeStream);
[[nodiscard]] absl::Status GeluBackward(float* dx, const float* x,
                                        const float* dout, size_t n,
                                        CudaStream stream = kComputeStream);
[[nodiscard]] absl::Status Add(float* out, const float* a, const float* b,
                               size_t n, CudaStream stream = kComputeStream);
// out[n] = x[n] rounded to bf16 (nearest, ties to even): a bf16 product's
// operand (kernels/cuda_gemm.h).
[[nodiscard]] absl::Status RoundToBf16(uint16_t* out, const float* x, size_t n,
                                       CudaStream stream = kComputeStream);
// out[n] = the f32 value of 16-bit x[n] (`dtype` kBF16 or kF16; exact;
// InvalidArgument for another dtype), and x[n] = 0.
[[nodiscard]] absl::Status Widen(float* out, const uint16_t* x, DType dtype,
                                 size_t n, CudaStream stream = kComputeStream);
[[nodiscard]] absl::Status Zero(float* x, size_t n,
                                CudaStream stream = kComputeStream);

// The attention's softmax over scores att[rows, T] (row r is query
// position r % T: entries past it are masked to 0), and its backward: datt
// rows (dP on entry) become P * (dP - <P, dP>) * scale.
[[nodiscard]] absl::Status CausalSoftmax(float* att, size_t rows, int T,
                                         CudaStream stream = kComputeStream);
[[nodiscard]] absl::Status CausalSoftmaxBackward(
    float* datt, const float* att, size_t rows, int T, float scale,
    CudaStream stream = kComputeStream);

// Softmax cross-entropy over logits[N, V] in place (they become the
// probabilities: no second N x V buffer), the rows' losses into
// row_losses[N] (device memory). Returns their mean, summed on the host in
// row order as the CPU does: this call waits for the GPU.
[[nodiscard]] absl::StatusOr<double> CrossEntropyForward(
    float* logits, const int32_t* targets, int N, int V, double* row_losses,
    CudaStream stream = kComputeStream);
// `error` (a cudaError_t from the internal layer functions, or their
// kNoCuda) as a Status naming `what`: OK, Unimplemented without CUDA,
// Internal otherwise.
[[nodiscard]] absl::Status LaunchStatus(int error, const char* what);

[[nodiscard]] absl::Status CrossEntropyBackward(
    float* probs, const int32_t* targets, float dloss_per_row, int N, int V,
    CudaStream stream = kComputeStream);

}  // namespace cuda_kernels
}  // namespace chunkzero

#endif  // CHUNKZERO_KERNELS_CUDA_KERNELS_H_
