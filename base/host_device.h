// CZ_HOST_DEVICE marks a function that host code and CUDA kernels share,
// so that the per-element math is written once and the CPU tests cover
// what the GPU runs.
//
//   CZ_HOST_DEVICE inline float Twice(float x) { return 2 * x; }
//
// nvcc sees __host__ __device__; every other compiler sees nothing.
#ifndef CHUNKZERO_BASE_HOST_DEVICE_H_
#define CHUNKZERO_BASE_HOST_DEVICE_H_

#if defined(__CUDACC__)
#define CZ_HOST_DEVICE __host__ __device__
#else
#define CZ_HOST_DEVICE
#endif

#endif  // CHUNKZERO_BASE_HOST_DEVICE_H_
