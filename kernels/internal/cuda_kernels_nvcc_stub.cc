// cuda_kernels_internal without --config=cuda: every layer returns kNoCuda.
#include "kernels/internal/cuda_kernels_nvcc.h"

namespace chunkzero {
namespace cuda_kernels_internal {

int EmbeddingForward(float*, const int32_t*, const float*, const float*, int,
                     int, int, int, void*) {
  return kNoCuda;
}
int EmbeddingBackward(float*, float*, const float*, const int32_t*, int, int,
                      int, int, int, void*) {
  return kNoCuda;
}
int LayerNormForward(float*, float*, float*, const float*, const float*,
                     const float*, int, int, void*) {
  return kNoCuda;
}
int LayerNormBackward(float*, float*, float*, const float*, const float*,
                      const float*, const float*, const float*, int, int,
                      void*) {
  return kNoCuda;
}
int BroadcastRows(float*, const float*, int, int, void*) { return kNoCuda; }
int ColumnSums(float*, const float*, int, int, void*) { return kNoCuda; }
int GeluForward(float*, const float*, size_t, void*) { return kNoCuda; }
int GeluBackward(float*, const float*, const float*, size_t, void*) {
  return kNoCuda;
}
int Add(float*, const float*, const float*, size_t, void*) { return kNoCuda; }
int RoundToBf16(uint16_t*, const float*, size_t, void*) { return kNoCuda; }
int WidenBf16(float*, const uint16_t*, size_t, void*) { return kNoCuda; }
int WidenF16(float*, const uint16_t*, size_t, void*) { return kNoCuda; }
int Zero(float*, size_t, void*) { return kNoCuda; }
int CausalSoftmax(float*, size_t, int, void*) { return kNoCuda; }
int CausalSoftmaxBackward(float*, const float*, size_t, int, float, void*) {
  return kNoCuda;
}
int CrossEntropyForward(float*, const int32_t*, int, int, double*, void*) {
  return kNoCuda;
}
int CrossEntropyBackward(float*, const int32_t*, float, int, int, void*) {
  return kNoCuda;
}
const char* ErrorName(int) {
  return "this binary was built without --config=cuda";
}

}  // namespace cuda_kernels_internal
}  // namespace chunkzero
