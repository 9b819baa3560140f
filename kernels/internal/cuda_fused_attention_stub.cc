// The fused attention without --config=cuda: kNoCuda.
#include "kernels/internal/cuda_fused_attention.h"
#include "kernels/internal/cuda_kernels_nvcc.h"

namespace chunkzero {
namespace cuda_kernels_internal {

int FusedAttentionForward(float*, float*, const float*, int, int, int, int,
                          bool, void*) {
  return kNoCuda;
}
int FusedAttentionBackward(float*, float*, const float*, const float*,
                           const float*, const float*, int, int, int, int, bool,
                           void*) {
  return kNoCuda;
}

}  // namespace cuda_kernels_internal
}  // namespace chunkzero
