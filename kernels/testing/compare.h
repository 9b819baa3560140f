// What the GPU layers' tests compare with: random inputs, their bf16
// rounding, and the error of a result relative to its reference's largest
// magnitude.
#ifndef CHUNKZERO_KERNELS_TESTING_COMPARE_H_
#define CHUNKZERO_KERNELS_TESTING_COMPARE_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "tensor/half.h"

namespace chunkzero {
namespace kernels_testing {

// n values uniform in [-scale, scale), the same for the same seed.
inline std::vector<float> RandomFloats(size_t n, uint32_t seed,
                                       float scale = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// max |got - want| / max |want| (the absolute error when want is all
// zeros), so that tiny elements do not dominate; infinite on a size
// mismatch or a NaN where want has none.
inline double RelativeError(const std::vector<float>& got,
                            const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double err = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = std::fabs(double{got[i]} - want[i]);
    if (std::isnan(d) && !std::isnan(want[i])) return INFINITY;
    err = std::max(err, d);
    scale = std::max(scale, std::fabs(double{want[i]}));
  }
  return scale == 0 ? err : err / scale;
}

// x rounded to bf16 (nearest, ties to even), as bit patterns.
inline std::vector<uint16_t> Bf16Bits(const std::vector<float>& x) {
  std::vector<uint16_t> bits(x.size());
  for (size_t i = 0; i < x.size(); ++i) bits[i] = FloatToBFloat16Bits(x[i]);
  return bits;
}

}  // namespace kernels_testing
}  // namespace chunkzero

#endif  // CHUNKZERO_KERNELS_TESTING_COMPARE_H_
