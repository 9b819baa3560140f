// Helpers shared by the kernel tests (testonly).
//
//   class MyTest : public IsaTest {};              // skips unsupported ISAs
//   INSTANTIATE_ALL_ISAS(MyTest);
//   OffsetBuffer<float> in(n, /*offset=*/3);        // misaligned by 3 floats
//   EXPECT_EQ(FirstBitMismatch(got, want, n), "");
#ifndef CHUNKZERO_TENSOR_CPU_KERNEL_TEST_UTIL_H_
#define CHUNKZERO_TENSOR_CPU_KERNEL_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "tensor/cpu/cpu_features.h"

namespace chunkzero {
namespace kernel_test {

// A test parameterised over every KernelIsa; SetUp skips the ones this CPU
// lacks, so the test log shows which ISAs ran.
class IsaTest : public ::testing::TestWithParam<KernelIsa> {
 protected:
  void SetUp() override {
    if (!IsKernelIsaSupported(GetParam())) {
      GTEST_SKIP() << "CPU lacks " << KernelIsaName(GetParam());
    }
  }
  KernelIsa isa() const { return GetParam(); }
};

inline std::string IsaParamName(
    const ::testing::TestParamInfo<KernelIsa>& info) {
  return std::string(KernelIsaName(info.param));
}

#define INSTANTIATE_ALL_ISAS(suite)                                            \
  INSTANTIATE_TEST_SUITE_P(AllIsas, suite,                                     \
                           ::testing::Values(::chunkzero::KernelIsa::kScalar,  \
                                             ::chunkzero::KernelIsa::kAvx2,    \
                                             ::chunkzero::KernelIsa::kAvx512), \
                           ::chunkzero::kernel_test::IsaParamName)

// n elements of T that start `offset` elements past a 64-byte boundary,
// followed by kGuard guard elements set to a fixed pattern, so that writes
// past the end can be detected (GuardIntact()).
template <typename T>
class OffsetBuffer {
 public:
  static constexpr size_t kGuard = 64;

  OffsetBuffer(size_t n, size_t offset)
      : n_(n), storage_((offset + n + kGuard) * sizeof(T) + 64) {
    const uintptr_t base = reinterpret_cast<uintptr_t>(storage_.data());
    const uintptr_t aligned = (base + 63) / 64 * 64;
    data_ = reinterpret_cast<T*>(aligned) + offset;
    std::memset(data_ + n, 0xA5, kGuard * sizeof(T));
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return n_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }

  bool GuardIntact() const {
    const unsigned char* guard =
        reinterpret_cast<const unsigned char*>(data_ + n_);
    for (size_t i = 0; i < kGuard * sizeof(T); ++i) {
      if (guard[i] != 0xA5) return false;
    }
    return true;
  }

 private:
  size_t n_;
  std::vector<unsigned char> storage_;
  T* data_;
};

inline uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
inline uint32_t Bits(uint32_t u) { return u; }
inline uint32_t Bits(uint16_t u) { return u; }
inline uint32_t Bits(unsigned char u) { return u; }

// "" if got[i] and want[i] have the same bits for all i < n; else the number
// of mismatches and the first one, with both bit patterns.
template <typename T>
std::string FirstBitMismatch(const T* got, const T* want, size_t n) {
  size_t mismatches = 0;
  size_t first = 0;
  for (size_t i = 0; i < n; ++i) {
    if (Bits(got[i]) != Bits(want[i])) {
      if (mismatches++ == 0) first = i;
    }
  }
  if (mismatches == 0) return "";
  return absl::StrFormat(
      "%d of %d elements differ; first at %d: got 0x%x, "
      "want 0x%x",
      mismatches, n, first, Bits(got[first]), Bits(want[first]));
}

// Lengths that cover empty, scalar-only, one vector, vector + tail and the
// multithreaded path (>= 128K elements) of every kernel.
inline std::vector<size_t> TestLengths() {
  return {0,  1,  7,  15,  16,  17,   31,     32,    33,
          63, 64, 65, 127, 129, 1000, 100003, 300007};
}

// Element offsets from a 64-byte boundary.
inline std::vector<size_t> TestOffsets() { return {0, 1, 3}; }

}  // namespace kernel_test
}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_CPU_KERNEL_TEST_UTIL_H_
