// optim_internal::cuda without --config=cuda: every kernel returns kNoCuda.
#include "optim/internal/cuda_fused_kernels_nvcc.h"

namespace chunkzero {
namespace optim_internal {
namespace cuda {

int Adam(const AdamConstants&, float*, float*, float*, const void*, Element,
         void*, Element, size_t, CudaStream) {
  return kNoCuda;
}
int Sgd(const SgdConstants&, float*, float*, const void*, Element, void*,
        Element, size_t, CudaStream) {
  return kNoCuda;
}
int Accumulate(bool, float*, const void*, Element, const float*, void*, Element,
               size_t, CudaStream) {
  return kNoCuda;
}

const char* ErrorName(int) {
  return "this binary was built without --config=cuda";
}

}  // namespace cuda
}  // namespace optim_internal
}  // namespace chunkzero
