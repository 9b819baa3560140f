// Element-wise kernels on the GPU: one element per thread in a grid-stride
// loop, each through tensor/elementwise_math.h (and tensor/half.h), the
// CPU's reference, so the results match bit for bit.
#include <cuda_runtime.h>

#include "tensor/cuda/cuda_elementwise_kernels.h"
#include "tensor/elementwise_math.h"
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

template <typename T, typename Op>
__global__ void Update(T* y, const T* x, size_t n, Op op) {
  const size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    y[i] = op(y[i], x == nullptr ? y[i] : x[i]);
  }
}

// Enough blocks to fill the GPU; the grid-stride loop covers the rest.
unsigned Blocks(size_t n) {
  const size_t wanted = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(wanted < 65535 * 8 ? wanted : 65535 * 8);
}

// Reports (and clears, not being sticky) a launch error; never waits: an
// error while the kernel runs shows at the stream's next synchronisation.
int Launched() { return cudaGetLastError(); }

template <typename Out, typename In, typename Op>
int Launch(Out* dst, const In* src, size_t n, Op op, void* stream) {
  if (n == 0) return cudaSuccess;
  Map<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(dst, src,
                                                                     n, op);
  return Launched();
}

template <typename T, typename Op>
int LaunchUpdate(T* y, const T* x, size_t n, Op op, void* stream) {
  if (n == 0) return cudaSuccess;
  Update<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(y, x, n,
                                                                        op);
  return Launched();
}

template <typename D>
struct ScaleBy {
  float a;
  __device__ typename D::T operator()(typename D::T x, typename D::T) const {
    return elementwise_math::Scale<D>(x, a);
  }
};
template <typename D>
struct AxpyBy {
  float a;
  __device__ typename D::T operator()(typename D::T y, typename D::T x) const {
    return elementwise_math::Axpy<D>(y, a, x);
  }
};

template <typename D>
struct ScaledTo {
  float scale;
  __device__ typename D::T operator()(float x) const {
    return D::Store(x * scale);
  }
};

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

int CastF32ToF16(uint16_t* dst, const float* src, size_t n, void* stream) {
  return Launch(dst, src, n, ToHalf(), stream);
}
int CastF32ToBF16(uint16_t* dst, const float* src, size_t n, void* stream) {
  return Launch(dst, src, n, ToBFloat16(), stream);
}
int CastF16ToF32(float* dst, const uint16_t* src, size_t n, void* stream) {
  return Launch(dst, src, n, FromHalf(), stream);
}
int CastBF16ToF32(float* dst, const uint16_t* src, size_t n, void* stream) {
  return Launch(dst, src, n, FromBFloat16(), stream);
}

int CastScaledF32(float* dst, const float* src, float scale, size_t n,
                  void* stream) {
  return Launch(dst, src, n, ScaledTo<elementwise_math::F32>{scale}, stream);
}
int CastScaledF16(uint16_t* dst, const float* src, float scale, size_t n,
                  void* stream) {
  return Launch(dst, src, n, ScaledTo<elementwise_math::F16>{scale}, stream);
}
int CastScaledBF16(uint16_t* dst, const float* src, float scale, size_t n,
                   void* stream) {
  return Launch(dst, src, n, ScaledTo<elementwise_math::BF16>{scale}, stream);
}

int ScaleF32(float* x, float a, size_t n, void* stream) {
  return LaunchUpdate(x, static_cast<const float*>(nullptr), n,
                      ScaleBy<elementwise_math::F32>{a}, stream);
}
int ScaleF16(uint16_t* x, float a, size_t n, void* stream) {
  return LaunchUpdate(x, static_cast<const uint16_t*>(nullptr), n,
                      ScaleBy<elementwise_math::F16>{a}, stream);
}
int ScaleBF16(uint16_t* x, float a, size_t n, void* stream) {
  return LaunchUpdate(x, static_cast<const uint16_t*>(nullptr), n,
                      ScaleBy<elementwise_math::BF16>{a}, stream);
}
int AxpyF32(float* y, float a, const float* x, size_t n, void* stream) {
  return LaunchUpdate(y, x, n, AxpyBy<elementwise_math::F32>{a}, stream);
}
int AxpyF16(uint16_t* y, float a, const uint16_t* x, size_t n, void* stream) {
  return LaunchUpdate(y, x, n, AxpyBy<elementwise_math::F16>{a}, stream);
}
int AxpyBF16(uint16_t* y, float a, const uint16_t* x, size_t n, void* stream) {
  return LaunchUpdate(y, x, n, AxpyBy<elementwise_math::BF16>{a}, stream);
}

const char* ErrorName(int error) {
  return cudaGetErrorName(static_cast<cudaError_t>(error));
}

}  // namespace cuda_kernels
}  // namespace chunkzero
