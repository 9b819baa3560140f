// Casts between f32 and the 16-bit formats on the GPU: one element per
// thread in a grid-stride loop, each through tensor/half.h's scalar
// conversion, the CPU's reference, so the results match bit for bit.
#include <cuda_runtime.h>

#include "tensor/cuda_cast_kernels.h"
#include "tensor/half.h"

namespace chunkzero {
namespace cuda_kernels {
namespace {

constexpr int kThreads = 256;

template <typename Out, typename In, typename Op>
__global__ void Map(Out* dst, const In* src, size_t n, Op op) {
  const size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    dst[i] = op(src[i]);
  }
}

template <typename Out, typename In, typename Op>
int Launch(Out* dst, const In* src, size_t n, Op op) {
  if (n == 0) return cudaSuccess;
  // Enough blocks to fill the GPU; the grid-stride loop covers the rest.
  const size_t wanted = (n + kThreads - 1) / kThreads;
  const unsigned blocks =
      static_cast<unsigned>(wanted < 65535 * 8 ? wanted : 65535 * 8);
  Map<<<blocks, kThreads>>>(dst, src, n, op);
  const cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess) return launched;
  return cudaDeviceSynchronize();
}

struct ToHalf {
  __device__ uint16_t operator()(float x) const { return FloatToHalfBits(x); }
};
struct ToBFloat16 {
  __device__ uint16_t operator()(float x) const {
    return FloatToBFloat16Bits(x);
  }
};
struct FromHalf {
  __device__ float operator()(uint16_t x) const { return HalfBitsToFloat(x); }
};
struct FromBFloat16 {
  __device__ float operator()(uint16_t x) const {
    return BFloat16BitsToFloat(x);
  }
};

}  // namespace

int CastF32ToF16(uint16_t* dst, const float* src, size_t n) {
  return Launch(dst, src, n, ToHalf());
}
int CastF32ToBF16(uint16_t* dst, const float* src, size_t n) {
  return Launch(dst, src, n, ToBFloat16());
}
int CastF16ToF32(float* dst, const uint16_t* src, size_t n) {
  return Launch(dst, src, n, FromHalf());
}
int CastBF16ToF32(float* dst, const uint16_t* src, size_t n) {
  return Launch(dst, src, n, FromBFloat16());
}

const char* ErrorName(int error) {
  return cudaGetErrorName(static_cast<cudaError_t>(error));
}

}  // namespace cuda_kernels
}  // namespace chunkzero
