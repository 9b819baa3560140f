#include "models/common/parameter_scopes.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "base/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/common/cpu_weight_reader.h"
#include "models/common/recording_hooks.h"
#include "tensor/memory/allocator.h"
#include "tensor/memory/memory_tracker.h"

namespace chunkzero {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Tensor Floats(std::vector<float> values, Shape shape,
              DType dtype = DType::kF32) {
  return *Tensor::FromFloats(values, shape, dtype);
}

// A matrix [2, 2] and its bias [2], and a norm weight [2].
struct Fixture {
  explicit Fixture(DType dtype = DType::kF32) : scopes("Toy", &reader) {
    w = scopes.Add("w", Floats({1, 2, 3, 4}, {2, 2}, dtype));
    b = scopes.Add("b", Floats({0.5f, -0.5f}, {2}, dtype));
    norm = scopes.Add("norm", Floats({2, 3}, {2}, dtype));
    layer = scopes.MakeScope({w, b}, /*matrices=*/0b1);
    EXPECT_TRUE(scopes.MakeGradBuffer(6).ok());
  }
  CpuWeightReader reader;
  ParameterScopes scopes;
  int w, b, norm;
  ParameterScopes::Scope layer;
};

TEST(ParameterScopes, ForwardReadsF32InPlace) {
  Fixture f;
  RecordingHooks hooks;
  ASSERT_TRUE(
      f.scopes
          .RunForward(
              hooks, f.layer,
              [&](const ParameterScopes::GroupWeights& w) {
                EXPECT_EQ(w[0], f.scopes.Parameters()[0]->data().data<float>());
                EXPECT_EQ(w[1][1], -0.5f);
                EXPECT_EQ(w.bf16[0], nullptr);
                return absl::OkStatus();
              })
          .ok());
  EXPECT_THAT(hooks.calls, ElementsAre("PreForward w,b", "PostForward w,b"));
  EXPECT_EQ(f.scopes.workspace_bytes(), 6 * 4);  // Only the grad buffer.
}

TEST(ParameterScopes, BackwardHandsEachGroupInOrder) {
  Fixture f;
  RecordingHooks hooks;
  ASSERT_TRUE(f.scopes
                  .RunForward(hooks, f.layer,
                              [](const auto&) { return absl::OkStatus(); })
                  .ok());
  const absl::Status done = f.scopes.RunBackwardByGroup(
      hooks, f.layer, [&](ParameterScopes::Access& s) -> absl::Status {
        CZ_ASSIGN_OR_RETURN(ParameterScopes::GroupGrads bias, s.Grads(1, 1));
        bias.g[0][0] = 7;
        bias.g[0][1] = 8;
        CZ_RETURN_IF_ERROR(s.Hand());
        CZ_ASSIGN_OR_RETURN(ParameterScopes::GroupGrads weight, s.Grads(0, 1));
        for (int i = 0; i < 4; ++i) weight.g[0][i] = i;
        return absl::OkStatus();  // Handed after fn.
      });
  ASSERT_TRUE(done.ok()) << done;
  EXPECT_THAT(hooks.calls, ElementsAre("PreForward w,b", "PostForward w,b",
                                       "PreBackward w,b", "HandGrad b",
                                       "HandGrad w", "PostBackward w,b"));
  EXPECT_THAT(hooks.grads["b"][0], ElementsAre(7, 8));
  EXPECT_THAT(hooks.grads["w"][0], ElementsAre(0, 1, 2, 3));
}

TEST(ParameterScopes, WidensSixteenBitAndKeepsBf16MatrixBits) {
  Fixture f(DType::kBF16);
  RecordingHooks hooks;
  f.scopes.set_bf16_products(true);
  ASSERT_TRUE(f.scopes
                  .RunForward(hooks, f.layer,
                              [&](const ParameterScopes::GroupWeights& w) {
                                // The matrix only as bits, the bias widened.
                                EXPECT_EQ(w[0], nullptr);
                                EXPECT_NE(w.bf16[0], nullptr);
                                EXPECT_EQ(w.bf16[0][1], 0x4000);  // 2.0
                                EXPECT_EQ(w[1][0], 0.5f);
                                return absl::OkStatus();
                              })
                  .ok());
  EXPECT_EQ(f.scopes.workspace_bytes(), 6 * 4 + 2 * 4);
  f.scopes.set_bf16_products(false);
  ASSERT_TRUE(f.scopes
                  .RunForward(hooks, f.layer,
                              [&](const ParameterScopes::GroupWeights& w) {
                                EXPECT_EQ(w[0][3], 4.0f);
                                EXPECT_EQ(w.bf16[0], nullptr);
                                return absl::OkStatus();
                              })
                  .ok());
  // Grown once, to the largest group widened.
  EXPECT_EQ(f.scopes.workspace_bytes(), 6 * 4 + 6 * 4);
}

TEST(ParameterScopes, RefusesUnmaterialisedAndOutOfRange) {
  Fixture f;
  RecordingHooks hooks;
  f.scopes.Parameters()[1]->set_data(Tensor());
  absl::Status s = f.scopes.RunForward(
      hooks, f.layer, [](const auto&) { return absl::OkStatus(); });
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("parameter 'b' is not materialised"));

  Fixture g;
  s = g.scopes.RunBackwardByGroup(
      hooks, g.layer,
      [](ParameterScopes::Access& a) { return a.Grads(1, 2).status(); });
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("Toy: parameters [1, 3) of a scope of 2"));
}

TEST(ParameterScopes, CountsWorkingMemoryUnderTheLimit) {
  Fixture f;
  MemoryTracker tracker;
  const Device cpu = Device::Cpu();
  tracker.SetLimit(cpu, 100);
  ASSERT_TRUE(f.scopes.set_memory_accounting(&tracker, cpu).ok());
  EXPECT_EQ(tracker.Current(cpu, MemoryCategory::kActivation), 24);
  ASSERT_TRUE(f.scopes.HoldBuffers(70).ok());
  EXPECT_EQ(tracker.Current(cpu, MemoryCategory::kActivation), 94);
  const absl::Status over = f.scopes.HoldBuffers(80);
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(f.scopes.workspace_bytes(), 94);  // Unchanged.
  ASSERT_TRUE(f.scopes.HoldBuffers(10).ok());
  EXPECT_EQ(tracker.Current(cpu, MemoryCategory::kActivation), 34);
  ASSERT_TRUE(f.scopes.set_memory_accounting(nullptr, cpu).ok());
  EXPECT_EQ(tracker.Current(cpu, MemoryCategory::kActivation), 0);
}

// Host memory for a simulated device that refuses while `refuse` is set.
class RefusingAllocator final : public Allocator {
 public:
  explicit RefusingAllocator(Device device) : device_(device) {}
  Device device() const override { return device_; }
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    if (refuse) return absl::ResourceExhaustedError("refused for the test");
    return std::malloc(std::max<size_t>(bytes, 1));
  }
  void Deallocate(void* ptr, size_t) override { std::free(ptr); }
  bool refuse = false;

 private:
  Device device_;
};

class SimWeightReader final : public WeightReader {
 public:
  Device device() const override { return Device::Simulated(41); }
  bool Reads(Device device) const override {
    return device.is_host_accessible();
  }
  absl::Status Widen(float* out, const void* x, DType dtype,
                     size_t n) override {
    return cpu_.Widen(out, x, dtype, n);
  }

 private:
  CpuWeightReader cpu_;
};

// A widen buffer that cannot grow is no longer held at all (growing frees
// the old one first), and the tracker says so.
TEST(ParameterScopes, AFailedWidenReportsWhatIsStillHeld) {
  RefusingAllocator allocator(Device::Simulated(41));
  AllocatorRegistry::Default().Register(&allocator);
  SimWeightReader reader;
  ParameterScopes scopes("Toy", &reader);
  const int w = scopes.Add("w", Floats({1, 2, 3, 4}, {2, 2}, DType::kF16));
  const int norm = scopes.Add("norm", Floats({2, 3}, {2}, DType::kF16));
  ASSERT_TRUE(scopes.MakeGradBuffer(4).ok());
  MemoryTracker tracker;
  const Device sim = Device::Simulated(41);
  ASSERT_TRUE(scopes.set_memory_accounting(&tracker, sim).ok());
  RecordingHooks hooks;
  auto run = [&](const ParameterScopes::Scope& scope) {
    return scopes.RunForward(hooks, scope,
                             [](const auto&) { return absl::OkStatus(); });
  };
  ASSERT_TRUE(run(scopes.MakeScope({norm}, 0)).ok());
  EXPECT_EQ(tracker.Current(sim, MemoryCategory::kActivation), 16 + 8);
  allocator.refuse = true;
  const absl::Status s = run(scopes.MakeScope({w}, 0));
  allocator.refuse = false;
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("widening the weights of parameter 'w'"));
  EXPECT_EQ(scopes.workspace_bytes(), 16);
  EXPECT_EQ(tracker.Current(sim, MemoryCategory::kActivation), 16);
  ASSERT_TRUE(run(scopes.MakeScope({w}, 0)).ok());
  EXPECT_EQ(tracker.Current(sim, MemoryCategory::kActivation), 16 + 16);
  ASSERT_TRUE(scopes.set_memory_accounting(nullptr, sim).ok());
  EXPECT_EQ(tracker.Current(sim, MemoryCategory::kActivation), 0);
  // The registry keeps the allocator; a host one serves sim:41 again.
  static RefusingAllocator* const host = new RefusingAllocator(sim);
  AllocatorRegistry::Default().Register(host);
}

TEST(ParameterScopes, LoadStateDictChecksEverythingFirst) {
  Fixture f;
  std::map<std::string, Tensor> state = {{"w", Floats({9, 9, 9, 9}, {2, 2})},
                                         {"b", Floats({1, 1}, {2})},
                                         {"norm", Floats({1, 1, 1}, {3})}};
  absl::Status s = f.scopes.LoadStateDict(state, "toy");
  EXPECT_THAT(s.message(), HasSubstr("'norm' is"));
  EXPECT_EQ(f.scopes.Find("w")->data().ToFloats()->at(0), 1.0f);  // Kept.
  state["norm"] = Floats({5, 6}, {2}, DType::kBF16);
  state["extra"] = Floats({0}, {1});
  s = f.scopes.LoadStateDict(state, "toy");
  EXPECT_THAT(s.message(), HasSubstr("'extra' is not a toy parameter"));
  state.erase("extra");
  ASSERT_TRUE(f.scopes.LoadStateDict(state, "toy").ok());
  EXPECT_THAT(*f.scopes.Find("norm")->data().ToFloats(), ElementsAre(5, 6));
  EXPECT_EQ(f.scopes.Find("nope"), nullptr);
}

}  // namespace
}  // namespace chunkzero
