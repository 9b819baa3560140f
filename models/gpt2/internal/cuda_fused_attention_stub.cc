// The fused attention without --config=cuda: kNoCuda.
#include "models/gpt2/internal/cuda_fused_attention.h"
#include "models/gpt2/internal/cuda_gpt_kernels_nvcc.h"

namespace chunkzero {
namespace cuda_gpt_internal {

int FusedAttentionForward(float*, float*, const float*, int, int, int, int,
                          bool, void*) {
  return kNoCuda;
}
int FusedAttentionBackward(float*, float*, const float*, const float*,
                           const float*, const float*, int, int, int, int, bool,
                           void*) {
  return kNoCuda;
}

}  // namespace cuda_gpt_internal
}  // namespace chunkzero
