// Sum and dot product of float rows in a fixed order that the compiler can
// vectorise: it may not reassociate float additions, so the loops keep
// kLanes partial results (lane j sums elements j, j + kLanes, ...) and add
// the lanes in order at the end. The result is the same bits on every
// machine and for every split of the rows over threads.
#ifndef CHUNKZERO_KERNELS_INTERNAL_LANE_REDUCTIONS_H_
#define CHUNKZERO_KERNELS_INTERNAL_LANE_REDUCTIONS_H_

namespace chunkzero {
namespace lane_reductions {

constexpr int kLanes = 16;

inline float Sum(const float* x, int n) {
  float acc[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] += x[i + j];
  }
  float s = 0;
  for (; i < n; ++i) s += x[i];
  for (int j = 0; j < kLanes; ++j) s += acc[j];
  return s;
}

inline float Dot(const float* a, const float* b, int n) {
  float acc[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] += a[i + j] * b[i + j];
  }
  float s = 0;
  for (; i < n; ++i) s += a[i] * b[i];
  for (int j = 0; j < kLanes; ++j) s += acc[j];
  return s;
}

}  // namespace lane_reductions
}  // namespace chunkzero

#endif  // CHUNKZERO_KERNELS_INTERNAL_LANE_REDUCTIONS_H_
