#include "optim/fused_kernels.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/parallel_for.h"
#include "gtest/gtest.h"
#include "tensor/half.h"

namespace chunkzero {
namespace {

// ---- Test data ----

// n elements of a dtype, starting `offset` elements past a 64-byte
// boundary, followed by guard bytes that detect writes past the end.
class TestArray {
 public:
  static constexpr size_t kGuardBytes = 64;

  TestArray(size_t n, DType dtype, size_t offset)
      : n_(n),
        dtype_(dtype),
        offset_(offset),
        storage_(64 + (offset + n) * ElementSize(dtype) + kGuardBytes) {
    std::memset(data() + bytes(), 0xA5, kGuardBytes);
  }
  TestArray(const TestArray& other)
      : TestArray(other.n_, other.dtype_, other.offset_) {
    std::memcpy(data(), other.data(), bytes() + kGuardBytes);
  }
  TestArray& operator=(const TestArray&) = delete;

  unsigned char* data() {
    const auto base = reinterpret_cast<uintptr_t>(storage_.data());
    return storage_.data() + (64 - base % 64) % 64 +
           offset_ * ElementSize(dtype_);
  }
  const unsigned char* data() const {
    return const_cast<TestArray*>(this)->data();
  }
  float* f32() { return reinterpret_cast<float*>(data()); }
  DType dtype() const { return dtype_; }
  size_t bytes() const { return n_ * ElementSize(dtype_); }

  float Get(size_t i) const {
    uint16_t h;
    switch (dtype_) {
      case DType::kF32: {
        float f;
        std::memcpy(&f, data() + 4 * i, 4);
        return f;
      }
      case DType::kF16:
        std::memcpy(&h, data() + 2 * i, 2);
        return HalfBitsToFloat(h);
      case DType::kBF16:
        std::memcpy(&h, data() + 2 * i, 2);
        return BFloat16BitsToFloat(h);
      default:  // The kernels' dtypes only.
        break;
    }
    return 0;
  }
  // Stores v rounded to the dtype.
  void Set(size_t i, float v) {
    if (dtype_ == DType::kF32) {
      std::memcpy(data() + 4 * i, &v, 4);
      return;
    }
    const uint16_t h =
        dtype_ == DType::kF16 ? FloatToHalfBits(v) : FloatToBFloat16Bits(v);
    std::memcpy(data() + 2 * i, &h, 2);
  }

  bool GuardIntact() const {
    for (size_t i = 0; i < kGuardBytes; ++i) {
      if (data()[bytes() + i] != 0xA5) return false;
    }
    return true;
  }

  // "" if every element has the same bits as in `want` (or both are NaN:
  // the payload of a NaN made from several NaNs is not specified), else the
  // first mismatch. Guards included.
  std::string Diff(const TestArray& want) const {
    if (!GuardIntact()) return "guard bytes overwritten";
    const size_t size = ElementSize(dtype_);
    for (size_t i = 0; i < n_; ++i) {
      if (std::memcmp(data() + size * i, want.data() + size * i, size) == 0 ||
          (std::isnan(Get(i)) && std::isnan(want.Get(i)))) {
        continue;
      }
      return absl::StrCat("element ", i, ": got ", Get(i), " want ",
                          want.Get(i));
    }
    return "";
  }

 private:
  size_t n_;
  DType dtype_;
  size_t offset_;
  std::vector<unsigned char> storage_;
};

// Where the updated param goes.
enum class OutMode { kNull, kF32, kF16, kBF16, kAliasGrad };

std::string OutModeName(OutMode mode) {
  switch (mode) {
    case OutMode::kNull:
      return "null";
    case OutMode::kF32:
      return "f32";
    case OutMode::kF16:
      return "f16";
    case OutMode::kBF16:
      return "bf16";
    case OutMode::kAliasGrad:
      return "alias";
  }
  return "?";
}

struct Layout {
  size_t n = 0;
  size_t offset = 0;  // Of every array, in elements from 64 bytes.
  DType grad_dtype = DType::kF16;
  OutMode out_mode = OutMode::kNull;
  bool specials = true;  // Mix zeros, Inf, NaN and negatives in.

  DType out_dtype() const {
    switch (out_mode) {
      case OutMode::kF32:
        return DType::kF32;
      case OutMode::kBF16:
        return DType::kBF16;
      case OutMode::kAliasGrad:
        return grad_dtype;
      default:
        return DType::kF16;
    }
  }
  std::string Name() const {
    return absl::StrCat("n=", n, " offset=", offset,
                        " grad=", DTypeName(grad_dtype),
                        " out=", OutModeName(out_mode));
  }
};

// The arrays of one kernel call: three f32 arrays (param, exp_avg,
// exp_avg_sq; param, momentum_buffer; acc, master), the grad and param_out.
struct Problem {
  Problem(const Layout& layout, uint32_t seed)
      : layout(layout),
        f32(3, TestArray(layout.n, DType::kF32, layout.offset)),
        grad(layout.n, layout.grad_dtype, layout.offset),
        out(layout.n, layout.out_dtype(), layout.offset) {
    std::mt19937 rng(seed);
    for (size_t i = 0; i < layout.n; ++i) {
      f32[0].Set(i, Value(rng, 1.0f));
      f32[1].Set(i, Value(rng, 1e-2f));
      f32[2].Set(i, std::fabs(Value(rng, 1e-4f)));
      grad.Set(i, Value(rng, 1e-2f));
      out.Set(i, -7.0f);
    }
  }

  // Magnitudes within a few binades of `scale`, both signs; with specials,
  // one element in 16 is a zero, an infinity, a NaN or an f16 subnormal.
  float Value(std::mt19937& rng, float scale) const {
    const uint32_t r = static_cast<uint32_t>(rng());
    if (layout.specials && r % 16 == 0) {
      const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 3e-6f};
      return specials[(r >> 4) % 6];
    }
    const float magnitude =
        std::ldexp(scale * (1.0f + (r >> 8) % 4096 / 4096.0f),
                   static_cast<int>((r >> 20) % 8) - 4);
    return (r & 16) ? -magnitude : magnitude;
  }

  void* param_out() {
    switch (layout.out_mode) {
      case OutMode::kNull:
        return nullptr;
      case OutMode::kAliasGrad:
        return grad.data();
      default:
        return out.data();
    }
  }

  std::string Diff(const Problem& want) const {
    const char* names[] = {"f32[0]", "f32[1]", "f32[2]"};
    for (int k = 0; k < 3; ++k) {
      std::string diff = f32[k].Diff(want.f32[k]);
      if (!diff.empty()) return absl::StrCat(names[k], " ", diff);
    }
    if (std::string diff = grad.Diff(want.grad); !diff.empty()) {
      return "grad " + diff;
    }
    if (std::string diff = out.Diff(want.out); !diff.empty()) {
      return "out " + diff;
    }
    return "";
  }

  Layout layout;
  std::vector<TestArray> f32;
  TestArray grad;
  TestArray out;
};

// ---- The kernels over a Problem ----

using Kernel = std::function<absl::Status(KernelIsa, Problem&)>;

Kernel Adam(const AdamStep& step) {
  return [step](KernelIsa isa, Problem& p) {
    return optim_internal::FusedAdam(isa, step, p.f32[0].f32(), p.f32[1].f32(),
                                     p.f32[2].f32(), p.grad.data(),
                                     p.layout.grad_dtype, p.param_out(),
                                     p.layout.out_dtype(), p.layout.n);
  };
}

Kernel Sgd(const SgdStep& step) {
  return [step](KernelIsa isa, Problem& p) {
    return optim_internal::FusedSgd(
        isa, step, p.f32[0].f32(),
        step.momentum == 0 ? nullptr : p.f32[1].f32(), p.grad.data(),
        p.layout.grad_dtype, p.param_out(), p.layout.out_dtype(), p.layout.n);
  };
}

Kernel Accumulate(bool first) {
  return [first](KernelIsa isa, Problem& p) {
    return optim_internal::AccumulateGradAndRestore(
        isa, p.f32[0].f32(), p.grad.data(), p.layout.grad_dtype, first,
        p.f32[1].f32(), p.param_out(), p.layout.out_dtype(), p.layout.n);
  };
}

struct NamedKernel {
  std::string name;
  Kernel kernel;
};

// Adam as a training step would run it (t = 10).
AdamStep TypicalAdam() {
  AdamStep step;
  step.lr = 3e-4f;
  step.bias_correction1 = 1.0f - std::pow(0.9f, 10.0f);
  step.bias_correction2_sqrt = std::sqrt(1.0f - std::pow(0.999f, 10.0f));
  step.grad_scale = 1.0f / 1024;
  return step;
}

std::vector<NamedKernel> AllKernels() {
  std::vector<NamedKernel> kernels;
  AdamStep adam = TypicalAdam();
  kernels.push_back({"adam", Adam(adam)});
  adam.weight_decay = 0.1f;
  kernels.push_back({"adam+l2", Adam(adam)});
  adam.decoupled_weight_decay = true;
  kernels.push_back({"adamw", Adam(adam)});

  SgdStep sgd;
  kernels.push_back({"sgd", Sgd(sgd)});
  sgd.weight_decay = 1e-4f;
  sgd.momentum = 0.9f;
  kernels.push_back({"sgd+momentum", Sgd(sgd)});
  sgd.first_step = true;
  kernels.push_back({"sgd+momentum first", Sgd(sgd)});
  sgd.first_step = false;
  sgd.dampening = 0.1f;
  kernels.push_back({"sgd+dampening", Sgd(sgd)});
  sgd.dampening = 0.0f;
  sgd.nesterov = true;
  kernels.push_back({"sgd+nesterov", Sgd(sgd)});

  kernels.push_back({"accumulate first", Accumulate(true)});
  kernels.push_back({"accumulate", Accumulate(false)});
  return kernels;
}

// Short arrays in every combination of offset, grad dtype and out mode;
// the long one (multithreaded, 3 of 4 elements in whole vectors) in a few.
std::vector<Layout> AllLayouts() {
  std::vector<Layout> layouts;
  auto add = [&](size_t n, size_t offset, DType grad, OutMode out) {
    Layout layout;
    layout.n = n;
    layout.offset = offset;
    layout.grad_dtype = grad;
    layout.out_mode = out;
    layouts.push_back(layout);
  };
  for (size_t n : {0, 1, 15, 17, 1000}) {
    for (size_t offset : {0, 3}) {
      for (DType grad : {DType::kF32, DType::kF16, DType::kBF16}) {
        for (OutMode out : {OutMode::kNull, OutMode::kF32, OutMode::kF16,
                            OutMode::kBF16, OutMode::kAliasGrad}) {
          add(n, offset, grad, out);
        }
      }
    }
  }
  add(100003, 0, DType::kF16, OutMode::kAliasGrad);
  add(100003, 3, DType::kBF16, OutMode::kAliasGrad);
  add(100003, 1, DType::kF32, OutMode::kF16);
  add(100003, 0, DType::kF16, OutMode::kBF16);
  add(100003, 0, DType::kBF16, OutMode::kNull);
  return layouts;
}

// ---- Every ISA against the scalar kernels ----

TEST(FusedKernels, EveryIsaBitIdenticalToScalar) {
  const std::vector<NamedKernel> kernels = AllKernels();
  for (const Layout& layout : AllLayouts()) {
    const Problem input(layout,
                        static_cast<uint32_t>(layout.n + layout.offset));
    for (const NamedKernel& kernel : kernels) {
      Problem want = input;
      ASSERT_TRUE(kernel.kernel(KernelIsa::kScalar, want).ok());
      for (KernelIsa isa : SupportedKernelIsas()) {
        if (isa == KernelIsa::kScalar) continue;
        SCOPED_TRACE(absl::StrCat(KernelIsaName(isa), " ", kernel.name, " ",
                                  layout.Name()));
        Problem got = input;
        ASSERT_TRUE(kernel.kernel(isa, got).ok());
        ASSERT_EQ(got.Diff(want), "");
      }
    }
  }
}

class FusedKernelsIsaTest : public ::testing::TestWithParam<KernelIsa> {
 protected:
  void SetUp() override {
    if (!IsKernelIsaSupported(GetParam())) {
      GTEST_SKIP() << "CPU lacks " << KernelIsaName(GetParam());
    }
  }
};

// Inf and NaN grads reach the outputs: g = Inf makes m and v Inf and the
// update Inf / Inf = NaN; SGD moves the weight to -Inf.
TEST_P(FusedKernelsIsaTest, InfAndNanPropagate) {
  Layout layout;
  layout.n = 40;
  layout.out_mode = OutMode::kAliasGrad;
  layout.specials = false;
  for (float bad : {INFINITY, NAN}) {
    SCOPED_TRACE(absl::StrCat("grad ", bad));
    Problem adam(layout, 1), sgd(layout, 1);
    for (size_t i = 0; i < layout.n; ++i) {
      adam.grad.Set(i, bad);
      sgd.grad.Set(i, bad);
    }
    ASSERT_TRUE(Adam(TypicalAdam())(GetParam(), adam).ok());
    SgdStep step;
    ASSERT_TRUE(Sgd(step)(GetParam(), sgd).ok());
    for (size_t i = 0; i < layout.n; ++i) {
      EXPECT_TRUE(std::isnan(adam.f32[0].Get(i))) << i;
      EXPECT_TRUE(std::isnan(adam.grad.Get(i))) << i;  // param_out
      EXPECT_EQ(std::isnan(bad), std::isnan(adam.f32[1].Get(i))) << i;
      EXPECT_TRUE(std::isnan(adam.f32[2].Get(i)) || adam.f32[2].Get(i) == bad);
      EXPECT_EQ(std::isnan(bad), std::isnan(sgd.f32[0].Get(i))) << i;
      if (!std::isnan(bad)) {
        EXPECT_EQ(sgd.grad.Get(i), -INFINITY) << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, FusedKernelsIsaTest,
                         ::testing::Values(KernelIsa::kScalar, KernelIsa::kAvx2,
                                           KernelIsa::kAvx512),
                         [](const ::testing::TestParamInfo<KernelIsa>& info) {
                           return std::string(KernelIsaName(info.param));
                         });

// ---- Threads ----

TEST(FusedKernels, TwoThreadsEqualOne) {
  Layout layout;
  layout.n = 300007;
  layout.grad_dtype = DType::kF16;
  layout.out_mode = OutMode::kAliasGrad;
  const std::vector<NamedKernel> all = AllKernels();
  for (const NamedKernel& kernel : {all[2], all[6], all[9]}) {
    SCOPED_TRACE(kernel.name);
    Problem one(layout, 5);
    Problem two = one;
    SetParallelThreadsForTesting(1);
    ASSERT_TRUE(kernel.kernel(BestKernelIsa(), one).ok());
    SetParallelThreadsForTesting(2);
    ASSERT_TRUE(kernel.kernel(BestKernelIsa(), two).ok());
    SetParallelThreadsForTesting(0);
    EXPECT_EQ(two.Diff(one), "");
  }
}

TEST(FusedKernels, PublicEntryPointsRunTheBestIsa) {
  Layout layout;
  layout.n = 100003;
  layout.out_mode = OutMode::kF16;
  Problem want(layout, 9);
  Problem got = want;
  const AdamStep step = TypicalAdam();
  ASSERT_TRUE(Adam(step)(BestKernelIsa(), want).ok());
  ASSERT_TRUE(FusedAdam(step, got.f32[0].f32(), got.f32[1].f32(),
                        got.f32[2].f32(), got.grad.data(), DType::kF16,
                        got.out.data(), DType::kF16, layout.n)
                  .ok());
  EXPECT_EQ(got.Diff(want), "");

  SgdStep sgd;
  sgd.momentum = 0.5f;
  ASSERT_TRUE(Sgd(sgd)(BestKernelIsa(), want).ok());
  ASSERT_TRUE(FusedSgd(sgd, got.f32[0].f32(), got.f32[1].f32(), got.grad.data(),
                       DType::kF16, got.out.data(), DType::kF16, layout.n)
                  .ok());
  EXPECT_EQ(got.Diff(want), "");

  ASSERT_TRUE(Accumulate(false)(BestKernelIsa(), want).ok());
  ASSERT_TRUE(AccumulateGradAndRestore(got.f32[0].f32(), got.grad.data(),
                                       DType::kF16, false, got.f32[1].f32(),
                                       got.out.data(), DType::kF16, layout.n)
                  .ok());
  EXPECT_EQ(got.Diff(want), "");
}

// ---- The scalar kernels against plain per-element references ----

// The formulas of fused_kernels.h, element by element, in f32.
void ReferenceAdam(const AdamStep& s, float& p, float& m, float& v, float g) {
  const float one_minus_beta1 = 1.0f - s.beta1;
  const float one_minus_beta2 = 1.0f - s.beta2;
  const float step_size = s.lr / s.bias_correction1;
  const float decay_factor = 1.0f - s.lr * s.weight_decay;
  g = g * s.grad_scale;
  if (s.weight_decay != 0 && !s.decoupled_weight_decay) {
    g = g + s.weight_decay * p;
  }
  if (s.weight_decay != 0 && s.decoupled_weight_decay) p = p * decay_factor;
  m = s.beta1 * m + one_minus_beta1 * g;
  v = s.beta2 * v + one_minus_beta2 * (g * g);
  const float denom = std::sqrt(v) / s.bias_correction2_sqrt + s.eps;
  p = p - step_size * (m / denom);
}

// The same in double, from the same f32 hyper-parameters.
void DoubleAdam(const AdamStep& s, double& p, double& m, double& v, double g) {
  g = g * s.grad_scale;
  if (s.weight_decay != 0 && !s.decoupled_weight_decay) {
    g = g + double{s.weight_decay} * p;
  }
  if (s.weight_decay != 0 && s.decoupled_weight_decay) {
    p = p * (1.0 - double{s.lr} * s.weight_decay);
  }
  m = s.beta1 * m + (1.0 - s.beta1) * g;
  v = s.beta2 * v + (1.0 - s.beta2) * (g * g);
  const double denom = std::sqrt(v) / s.bias_correction2_sqrt + s.eps;
  p = p - double{s.lr} / s.bias_correction1 * (m / denom);
}

void ReferenceSgd(const SgdStep& s, float& p, float& buf, float g) {
  g = g * s.grad_scale;
  if (s.weight_decay != 0) g = g + s.weight_decay * p;
  if (s.momentum != 0) {
    buf = s.first_step ? g : s.momentum * buf + (1.0f - s.dampening) * g;
    g = s.nesterov ? g + s.momentum * buf : buf;
  }
  p = p - s.lr * g;
}

void DoubleSgd(const SgdStep& s, double& p, double& buf, double g) {
  g = g * s.grad_scale;
  if (s.weight_decay != 0) g = g + double{s.weight_decay} * p;
  if (s.momentum != 0) {
    buf = s.first_step ? g : s.momentum * buf + (1.0 - s.dampening) * g;
    g = s.nesterov ? g + s.momentum * buf : buf;
  }
  p = p - s.lr * g;
}

float RoundTo(DType dtype, float v) {
  TestArray one(1, dtype, 0);
  one.Set(0, v);
  return one.Get(0);
}

// Relative difference, against the larger magnitude.
double Relative(float got, double want) {
  return std::fabs(got - want) / std::max(std::fabs(want), 1e-30);
}

// Finite data without cancellation (m and g of one sign, small updates), so
// that the f32 results are within a few ulps of exact.
Layout ReferenceLayout(DType grad_dtype, OutMode out_mode) {
  Layout layout;
  layout.n = 1000;
  layout.offset = 1;
  layout.grad_dtype = grad_dtype;
  layout.out_mode = out_mode;
  layout.specials = false;
  return layout;
}
Problem ReferenceProblem(const Layout& layout) {
  Problem p(layout, 3);
  for (size_t i = 0; i < layout.n; ++i) {
    p.f32[0].Set(i, std::fabs(p.f32[0].Get(i)) + 1.0f);
    p.f32[1].Set(i, std::fabs(p.f32[1].Get(i)));
    p.grad.Set(i, std::fabs(p.grad.Get(i)));
  }
  return p;
}

TEST(FusedKernels, ScalarAdamMatchesReferences) {
  AdamStep adam = TypicalAdam();
  for (float weight_decay : {0.0f, 0.01f}) {
    for (bool decoupled : {false, true}) {
      adam.weight_decay = weight_decay;
      adam.decoupled_weight_decay = decoupled;
      for (DType grad : {DType::kF32, DType::kF16, DType::kBF16}) {
        for (OutMode out : {OutMode::kF16, OutMode::kAliasGrad}) {
          const Layout layout = ReferenceLayout(grad, out);
          SCOPED_TRACE(absl::StrCat("wd=", weight_decay, " decoupled=",
                                    decoupled, " ", layout.Name()));
          Problem input = ReferenceProblem(layout);
          Problem got = input;
          ASSERT_TRUE(Adam(adam)(KernelIsa::kScalar, got).ok());
          for (size_t i = 0; i < layout.n; ++i) {
            const float g = input.grad.Get(i);
            float p = input.f32[0].Get(i), m = input.f32[1].Get(i),
                  v = input.f32[2].Get(i);
            ReferenceAdam(adam, p, m, v, g);
            ASSERT_EQ(FloatBits(got.f32[0].Get(i)), FloatBits(p)) << i;
            ASSERT_EQ(FloatBits(got.f32[1].Get(i)), FloatBits(m)) << i;
            ASSERT_EQ(FloatBits(got.f32[2].Get(i)), FloatBits(v)) << i;
            const TestArray& param_out =
                out == OutMode::kAliasGrad ? got.grad : got.out;
            ASSERT_EQ(param_out.Get(i), RoundTo(layout.out_dtype(), p)) << i;

            double pd = input.f32[0].Get(i), md = input.f32[1].Get(i),
                   vd = input.f32[2].Get(i);
            DoubleAdam(adam, pd, md, vd, g);
            ASSERT_LE(Relative(p, pd), 1e-6) << i;
            ASSERT_LE(Relative(m, md), 1e-6) << i;
            ASSERT_LE(Relative(v, vd), 1e-6) << i;
          }
        }
      }
    }
  }
}

TEST(FusedKernels, ScalarSgdMatchesReferences) {
  std::vector<SgdStep> steps(5);
  steps[1].momentum = 0.9f;
  steps[1].weight_decay = 1e-2f;
  steps[2] = steps[1];
  steps[2].first_step = true;
  steps[3] = steps[1];
  steps[3].dampening = 0.25f;
  steps[4] = steps[1];
  steps[4].nesterov = true;
  for (const SgdStep& sgd : steps) {
    const Layout layout = ReferenceLayout(DType::kBF16, OutMode::kF32);
    SCOPED_TRACE(
        absl::StrCat("momentum=", sgd.momentum, " first=", sgd.first_step,
                     " dampening=", sgd.dampening, " nesterov=", sgd.nesterov));
    Problem input = ReferenceProblem(layout);
    Problem got = input;
    ASSERT_TRUE(Sgd(sgd)(KernelIsa::kScalar, got).ok());
    for (size_t i = 0; i < layout.n; ++i) {
      const float g = input.grad.Get(i);
      float p = input.f32[0].Get(i), buf = input.f32[1].Get(i);
      ReferenceSgd(sgd, p, buf, g);
      ASSERT_EQ(FloatBits(got.f32[0].Get(i)), FloatBits(p)) << i;
      ASSERT_EQ(FloatBits(got.f32[1].Get(i)), FloatBits(buf)) << i;
      ASSERT_EQ(FloatBits(got.out.Get(i)), FloatBits(p)) << i;

      double pd = input.f32[0].Get(i), bufd = input.f32[1].Get(i);
      DoubleSgd(sgd, pd, bufd, g);
      ASSERT_LE(Relative(p, pd), 1e-6) << i;
      ASSERT_LE(Relative(buf, bufd), 1e-6) << i;
    }
  }
}

TEST(FusedKernels, ScalarAccumulateMatchesReference) {
  const Layout layout = ReferenceLayout(DType::kF16, OutMode::kAliasGrad);
  for (bool first : {true, false}) {
    SCOPED_TRACE(absl::StrCat("first=", first));
    Problem input = ReferenceProblem(layout);
    Problem got = input;
    ASSERT_TRUE(Accumulate(first)(KernelIsa::kScalar, got).ok());
    for (size_t i = 0; i < layout.n; ++i) {
      const float acc =
          (first ? 0.0f : input.f32[0].Get(i)) + input.grad.Get(i);
      ASSERT_EQ(FloatBits(got.f32[0].Get(i)), FloatBits(acc)) << i;
      ASSERT_EQ(got.grad.Get(i),  // The restored weights.
                HalfBitsToFloat(FloatToHalfBits(input.f32[1].Get(i))))
          << i;
    }
  }
}

// ---- Errors ----

TEST(FusedKernels, RejectsBadArguments) {
  float f[8] = {};
  uint16_t h[8] = {};
  const AdamStep adam;
  auto code = [](const absl::Status& s) { return s.code(); };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;

  EXPECT_EQ(code(FusedAdam(adam, nullptr, f, f + 4, h, DType::kF16, nullptr,
                           DType::kF16, 4)),
            kInvalid);
  EXPECT_EQ(code(FusedAdam(adam, f, f + 4, f + 4, nullptr, DType::kF16, nullptr,
                           DType::kF16, 4)),
            kInvalid);
  EXPECT_EQ(code(FusedAdam(adam, f, f, f, h, static_cast<DType>(7), nullptr,
                           DType::kF16, 0)),
            kInvalid);
  EXPECT_EQ(code(FusedAdam(adam, f, f, f, h, DType::kF16, nullptr,
                           static_cast<DType>(9), 0)),
            kInvalid);
  EXPECT_EQ(FusedAdam(adam, f, f, f, h, DType::kI64, nullptr, DType::kF16, 0)
                .message(),
            "FusedAdam: i64 is not f32, f16 or bf16");
  // param_out aliasing grad: same dtype only, and exactly the same array.
  EXPECT_EQ(code(FusedAdam(adam, f, f + 2, f + 4, h, DType::kF16, h,
                           DType::kBF16, 2)),
            kInvalid);
  EXPECT_EQ(code(FusedAdam(adam, f, f + 2, f + 4, h, DType::kF16, h + 1,
                           DType::kF16, 2)),
            kInvalid);
  EXPECT_EQ(
      code(FusedAdam(adam, f, f + 2, f + 4, h, DType::kF16, h, DType::kF16, 2)),
      absl::StatusCode::kOk);
  // n == 0 accepts null arrays.
  EXPECT_TRUE(FusedAdam(adam, nullptr, nullptr, nullptr, nullptr, DType::kF32,
                        nullptr, DType::kF32, 0)
                  .ok());

  SgdStep sgd;
  EXPECT_TRUE(
      FusedSgd(sgd, f, nullptr, h, DType::kF16, h, DType::kF16, 8).ok());
  sgd.momentum = 0.9f;
  const absl::Status no_buffer =
      FusedSgd(sgd, f, nullptr, h, DType::kF16, h, DType::kF16, 8);
  EXPECT_EQ(code(no_buffer), kInvalid);
  EXPECT_NE(no_buffer.message().find("FusedSgd"), absl::string_view::npos);

  EXPECT_EQ(code(AccumulateGradAndRestore(f, h, DType::kF16, true, nullptr, h,
                                          DType::kF16, 4)),
            kInvalid);
  EXPECT_EQ(code(AccumulateGradAndRestore(f, h, DType::kF16, true, f + 4, h,
                                          DType::kF32, 4)),
            kInvalid);
}

}  // namespace
}  // namespace chunkzero
