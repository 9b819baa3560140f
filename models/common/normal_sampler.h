// NormalSampler: N(0, 1) draws that are the same on every platform, for
// models' initialisation: Box-Muller on 53-bit uniforms from
// std::mt19937_64, both values of each pair used in turn (the standard
// library's normal_distribution is not the same everywhere).
//
//   NormalSampler normal(/*seed=*/1234);
//   for (float& v : weights) v = static_cast<float>(0.02 * normal.Next());
#ifndef CHUNKZERO_MODELS_COMMON_NORMAL_SAMPLER_H_
#define CHUNKZERO_MODELS_COMMON_NORMAL_SAMPLER_H_

#include <cmath>
#include <cstdint>
#include <random>

namespace chunkzero {

class NormalSampler {
 public:
  explicit NormalSampler(uint64_t seed) : rng_(seed) {}

  // Moves on as `n` calls of Next() would, without computing the values
  // (for a deferred parameter whose values are made later from a copy).
  void Skip(int64_t n) {
    if (n > 0 && has_spare_) {
      has_spare_ = false;
      --n;
    }
    if (n <= 0) return;
    // Each pair of values takes two uniforms; an odd one out leaves its
    // partner as the spare.
    rng_.discard(static_cast<unsigned long long>(n / 2) * 2);
    if (n % 2 != 0) Next();
  }

  double Next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    // u1 in (0, 1] so that the log is finite; u2 in [0, 1).
    const double u1 = 1.0 - Uniform();
    const double u2 = Uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    constexpr double kTwoPi = 6.283185307179586;
    spare_ = r * std::sin(kTwoPi * u2);
    has_spare_ = true;
    return r * std::cos(kTwoPi * u2);
  }

 private:
  double Uniform() { return (rng_() >> 11) * 0x1.0p-53; }

  std::mt19937_64 rng_;
  bool has_spare_ = false;
  double spare_ = 0;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_MODELS_COMMON_NORMAL_SAMPLER_H_
