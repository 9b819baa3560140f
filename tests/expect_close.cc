#include "tests/expect_close.h"

#include <algorithm>
#include <cmath>

#include "gtest/gtest.h"

namespace chunkzero {

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                 double tol, const std::string& what,
                 std::optional<double> element_tol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0, diff2 = 0, want2 = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::fabs(double{want[i]}));
    diff2 += (double{got[i]} - want[i]) * (double{got[i]} - want[i]);
    want2 += double{want[i]} * want[i];
  }
  EXPECT_LE(std::sqrt(diff2), tol * std::sqrt(want2))
      << what << ": relative error of the tensor "
      << std::sqrt(diff2 / std::max(want2, 1e-300));
  double worst = 0;
  size_t worst_at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err =
        std::fabs(double{got[i]} - want[i]) /
        std::max(std::fabs(double{want[i]}), 0.1 * scale + 1e-30);
    if (!(err <= worst)) {
      worst = err;
      worst_at = i;
    }
  }
  EXPECT_LE(worst, element_tol.value_or(2 * tol))
      << what << ": largest relative difference " << worst << " at element "
      << worst_at << " (got " << got[worst_at] << ", want " << want[worst_at]
      << ")";
}

}  // namespace chunkzero
