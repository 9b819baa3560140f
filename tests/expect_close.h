// Tolerant comparison of float vectors for the cross-package tests.
#ifndef CHUNKZERO_TESTS_EXPECT_CLOSE_H_
#define CHUNKZERO_TESTS_EXPECT_CLOSE_H_

#include <optional>
#include <string>
#include <vector>

namespace chunkzero {

// Adds a GoogleTest failure unless the tensor-wise relative error
// ||got - want|| / ||want|| is <= tol and no element is off by more than
// element_tol (default 2 * tol) relative to max(|want|, 0.1 * max|want|).
// (In f16 two roundings of a grad, before and after the reduction, can put
// one element up to ~1.5e-3 off; the tensor stays well within 1e-3.)
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                 double tol, const std::string& what,
                 std::optional<double> element_tol = std::nullopt);

}  // namespace chunkzero

#endif  // CHUNKZERO_TESTS_EXPECT_CLOSE_H_
