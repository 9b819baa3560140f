// cuda_kernels_internal without --config=cuda: every layer returns kNoCuda.
#include "kernels/internal/cuda_rmsnorm_rope_swiglu_kernels_nvcc.h"

namespace chunkzero {
namespace cuda_kernels_internal {

int TokenEmbeddingForward(float*, const int32_t*, const float*, int, int, int,
                          void*) {
  return kNoCuda;
}
int TokenEmbeddingBackward(float*, const float*, const int32_t*, int, int, int,
                           void*) {
  return kNoCuda;
}
int RmsNormForward(float*, float*, const float*, const float*, int, int, float,
                   void*) {
  return kNoCuda;
}
int RmsNormBackward(float*, float*, const float*, const float*, const float*,
                    const float*, int, int, void*) {
  return kNoCuda;
}
int Rope(float*, const float*, const float*, int, int, int, int, float, void*) {
  return kNoCuda;
}
int SwiGluForward(float*, const float*, const float*, size_t, void*) {
  return kNoCuda;
}
int SwiGluBackward(float*, float*, const float*, const float*, const float*,
                   size_t, void*) {
  return kNoCuda;
}
int ExpandQkv(float*, const float*, const float*, const float*, int, int, int,
              int, void*) {
  return kNoCuda;
}
int ReduceQkvGrad(float*, float*, float*, const float*, int, int, int, int,
                  void*) {
  return kNoCuda;
}

}  // namespace cuda_kernels_internal
}  // namespace chunkzero
