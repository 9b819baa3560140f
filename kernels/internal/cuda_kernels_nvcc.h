// The CUDA transformer kernels as nvcc compiles them
// (kernels/internal/cuda_kernels_nvcc.cu): plain functions over device
// pointers, free of Abseil, each enqueuing its kernels on `stream` (a
// cudaStream_t; null: the legacy default stream, the compute stream)
// without waiting, and returning the launch's
// cudaError_t (0: success), or kNoCuda without --config=cuda. Call them
// through kernels/cuda_kernels.h, which documents them and turns the
// result into a Status.
#ifndef CHUNKZERO_KERNELS_INTERNAL_CUDA_KERNELS_NVCC_H_
#define CHUNKZERO_KERNELS_INTERNAL_CUDA_KERNELS_NVCC_H_

#include <cstddef>
#include <cstdint>

namespace chunkzero {
namespace cuda_kernels_internal {

// What every function returns in a build without --config=cuda (where
// cuda_kernels_nvcc_stub.cc stands in): not a cudaError_t.
inline constexpr int kNoCuda = -1;

int EmbeddingForward(float* out, const int32_t* tokens, const float* wte,
                     const float* wpe, int N, int T, int C, int V,
                     void* stream);
int EmbeddingBackward(float* dwte, float* dwpe, const float* dout,
                      const int32_t* tokens, int N, int T, int C, int V, int P,
                      void* stream);
int LayerNormForward(float* out, float* mean, float* rstd, const float* x,
                     const float* w, const float* b, int N, int C,
                     void* stream);
int LayerNormBackward(float* dx, float* dw, float* db, const float* dout,
                      const float* x, const float* w, const float* mean,
                      const float* rstd, int N, int C, void* stream);
int BroadcastRows(float* out, const float* bias, int N, int C, void* stream);
int ColumnSums(float* out, const float* in, int N, int C, void* stream);
int GeluForward(float* out, const float* x, size_t n, void* stream);
int GeluBackward(float* dx, const float* x, const float* dout, size_t n,
                 void* stream);
int Add(float* out, const float* a, const float* b, size_t n, void* stream);
int RoundToBf16(uint16_t* out, const float* x, size_t n, void* stream);
int WidenBf16(float* out, const uint16_t* x, size_t n, void* stream);
int WidenF16(float* out, const uint16_t* x, size_t n, void* stream);
int Zero(float* x, size_t n, void* stream);
int CausalSoftmax(float* att, size_t rows, int T, void* stream);
int CausalSoftmaxBackward(float* datt, const float* att, size_t rows, int T,
                          float scale, void* stream);
int CrossEntropyForward(float* logits, const int32_t* targets, int N, int V,
                        double* row_losses, void* stream);
int CrossEntropyBackward(float* probs, const int32_t* targets, float dloss,
                         int N, int V, void* stream);
// The name of a cudaError_t, for messages.
const char* ErrorName(int error);

}  // namespace cuda_kernels_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_KERNELS_INTERNAL_CUDA_KERNELS_NVCC_H_
