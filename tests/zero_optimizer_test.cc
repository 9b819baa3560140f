// ZeroOptimizer over ZeroDdp against a single-process reference: plain f32
// tensors and the optimizer algorithms written out straightforwardly here.
#include "optim/zero_optimizer.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/mutex.h"
#include "base/status_macros.h"
#include "chunk/chunk_disk_tier.h"
#include "chunk/chunk_manager.h"
#include "comm/staging_process_group.h"
#include "comm/testing/spawn_ranks.h"
#include "ddp/local_hooks.h"
#include "ddp/zero_ddp.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor/cuda/cuda_runtime.h"
#include "tensor/half.h"
#include "tensor/memory/caching_allocator.h"
#include "tensor/memory/memory_tracker.h"
#include "tests/expect_close.h"
#include "tests/test_models.h"

namespace chunkzero {
namespace {

using ::chunkzero::comm_testing::AllRanksOk;
using ::chunkzero::comm_testing::SpawnRanks;
using ::testing::HasSubstr;

constexpr uint32_t kModelSeed = 7;
constexpr uint32_t kDataSeed = 11;
using Values = std::map<std::string, std::vector<float>>;

// Passes grads on to ZeroDdp multiplied by the loss scale (the test models'
// backward has no seed to scale), optionally poisoning one with Inf.
class ScaledHooks : public ParamHooks {
 public:
  ScaledHooks(ParamHooks* inner, float scale, bool poison)
      : inner_(inner), scale_(scale), poison_(poison) {}
  absl::Status PreForward(absl::Span<Parameter* const> p) override {
    return inner_->PreForward(p);
  }
  absl::Status PostForward(absl::Span<Parameter* const> p) override {
    return inner_->PostForward(p);
  }
  absl::Status PreBackward(absl::Span<Parameter* const> p) override {
    return inner_->PreBackward(p);
  }
  absl::Status PostBackward(absl::Span<Parameter* const> p) override {
    return inner_->PostBackward(p);
  }
  absl::Status HandGrad(Parameter& param, const Tensor& grad) override {
    std::vector<float> g = *grad.ToFloats();
    for (float& x : g) x *= scale_;
    if (poison_) {
      g[0] = std::numeric_limits<float>::infinity();
      poison_ = false;
    }
    return inner_->HandGrad(param, *Tensor::FromFloats(g, grad.shape()));
  }
  void RecordDeferredError(absl::Status status) override {
    inner_->RecordDeferredError(std::move(status));
  }

 private:
  ParamHooks* inner_;
  float scale_;
  bool poison_;
};

struct RunConfig {
  TestModelKind kind = TestModelKind::kMlp;
  int world = 1;
  std::optional<int64_t> chunk_size;
  ChunkLayout layout = ChunkLayout::kSharded;
  DType dtype = DType::kF32;
  ZeroOptimizerOptions opt;
  int steps = 10;
  int micro_batches = 1;
  int rows_per_micro = 3;  // Rows per rank per micro-batch.
  Device device = Device::Cpu();
  // Poisons one grad on `poison_rank` with Inf in each of `poison_steps`.
  int poison_rank = -1;
  std::set<int> poison_steps;
  // Called on every rank after FinishBackward of the step's last
  // micro-batch (before Step) and after Step.
  std::function<absl::Status(int step, ZeroDdp&, ZeroOptimizer&, ChunkManager&)>
      before_step, after_step;
  // Called once, before the first step (e.g. LoadState).
  std::function<absl::Status(ZeroDdp&, ZeroOptimizer&)> at_start;
  int first_step = 0;  // Data position of the first step (resume).
  // ZeroDdpOptions: prefetch depth, and the declaration order given as
  // first_use_order.
  int max_prefetch = 1;
  bool known_order = false;
  // Runs the collectives through a StagingProcessGroup for this device (a
  // GPU's buffers cannot be read by the in-process backend).
  std::optional<Device> stage_on;
  // OffloadPolicy::kNvme: where each rank's disk tier goes (and the tiers'
  // stats at the end, per rank).
  std::string nvme_dir;
  // With kNvme: the parameter chunks rest on the tier too (the host tier,
  // with no limit), and every payload goes to disk before each step.
  bool params_to_disk = false;
};

std::string Describe(const RunConfig& c) {
  return absl::StrCat(TestModelName(c.kind), " world ", c.world, " chunk ",
                      c.chunk_size.value_or(0), " ", ChunkLayoutName(c.layout),
                      " ", DTypeName(c.dtype), " ",
                      OptimizerKindName(c.opt.kind), " micro ",
                      c.micro_batches);
}

int TotalRows(const RunConfig& c) {
  return c.rows_per_micro * c.micro_batches * c.world;
}

struct RunResult {
  std::vector<float> losses;           // Mean over ranks, per step.
  std::vector<StepResult> results;     // Rank 0's, per step.
  Values masters;                      // Final, gathered.
  OptimizerState state;                // Final, gathered on rank 0.
  std::vector<OptimizerState> shards;  // Final SaveShard of every rank.
  std::map<int, DiskTierStats> disk;   // Each rank's, with kNvme.
  // Rank 0's payload bytes at the end, by device and category.
  std::map<std::pair<Device, MemoryCategory>, int64_t> memory, peak;
  int64_t Peak(Device device, MemoryCategory category) const {
    auto it = peak.find({device, category});
    return it == peak.end() ? 0 : it->second;
  }
  int64_t Memory(Device device, MemoryCategory category) const {
    auto it = memory.find({device, category});
    return it == memory.end() ? 0 : it->second;
  }
};

std::vector<absl::Status> RunZero(const RunConfig& c, RunResult* out) {
  Mutex mu;
  std::vector<std::vector<float>> losses(c.world);
  out->shards.assign(c.world, OptimizerState());
  std::vector<absl::Status> statuses =
      SpawnRanks(c.world, [&](comm::ProcessGroup& g) -> absl::Status {
        std::unique_ptr<TestModel> model =
            MakeTestModel(c.kind, kModelSeed + 100 * g.rank());
        ChunkManagerOptions options;
        options.chunk_size = c.chunk_size;
        options.layout = c.layout;
        options.device = c.device;
        options.comm_timeout = absl::Seconds(10);
        MemoryTracker tracker;
        std::unique_ptr<ChunkDiskTier> disk;
        if (c.opt.offload == OffloadPolicy::kNvme) {
          CZ_ASSIGN_OR_RETURN(disk, ChunkDiskTier::Create(c.nvme_dir));
          options.disk = disk.get();
          options.disk_residency = c.params_to_disk;
        }
        PinnedHostAllocator pinned;
        CachingAllocator staging_memory(&pinned);
        std::optional<comm::StagingProcessGroup> staged;
        if (c.stage_on.has_value()) {
          staged.emplace(&g, *c.stage_on, &staging_memory);
        }
        ChunkManager chunks(staged.has_value() ? &*staged : &g, options,
                            &tracker);
        ZeroDdpOptions ddp_options;
        ddp_options.compute_dtype = c.dtype;
        ddp_options.max_prefetch = c.max_prefetch;
        if (c.opt.offload == OffloadPolicy::kOptimizer) {
          ddp_options.master_device = Device::Cpu();
        }
        if (c.known_order) {
          for (Parameter* p : model->Parameters()) {
            ddp_options.first_use_order.push_back(p->name());
          }
        }
        ZeroOptimizerOptions opt_options = c.opt;
        if (disk != nullptr) {
          opt_options.disk = disk.get();
          ddp_options.master_disk = disk.get();
        }
        CZ_ASSIGN_OR_RETURN(std::unique_ptr<ZeroDdp> ddp,
                            ZeroDdp::Create(model.get(), &chunks, ddp_options));
        CZ_ASSIGN_OR_RETURN(std::unique_ptr<ZeroOptimizer> opt,
                            ZeroOptimizer::Create(ddp.get(), opt_options));
        if (c.at_start) CZ_RETURN_IF_ERROR(c.at_start(*ddp, *opt));
        for (int step = c.first_step; step < c.steps; ++step) {
          const Batch global =
              MakeBatch(*model, TotalRows(c), kDataSeed + step);
          float loss = 0;
          for (int m = 0; m < c.micro_batches; ++m) {
            const int first =
                (g.rank() * c.micro_batches + m) * c.rows_per_micro;
            const Batch mine =
                SliceBatch(global, first, first + c.rows_per_micro);
            ScaledHooks hooks(ddp.get(), static_cast<float>(opt->loss_scale()),
                              g.rank() == c.poison_rank &&
                                  c.poison_steps.count(step) > 0 &&
                                  m + 1 == c.micro_batches);
            CZ_ASSIGN_OR_RETURN(float l, model->Forward(hooks, mine, 0));
            loss += l / c.micro_batches;
            CZ_RETURN_IF_ERROR(model->Backward(hooks));
            CZ_RETURN_IF_ERROR(ddp->FinishBackward());
            if (m + 1 < c.micro_batches) {
              CZ_RETURN_IF_ERROR(opt->AccumulateGrads());
            }
          }
          if (c.params_to_disk) {
            for (int i = 0; i < chunks.num_chunks(ddp->param_group()); ++i) {
              CZ_RETURN_IF_ERROR(
                  chunks.chunk(ddp->param_group(), i)->EvictPayload());
            }
          }
          losses[g.rank()].push_back(loss);
          if (c.before_step) {
            CZ_RETURN_IF_ERROR(c.before_step(step, *ddp, *opt, chunks));
          }
          CZ_ASSIGN_OR_RETURN(StepResult result, opt->Step());
          if (g.rank() == 0) out->results.push_back(result);
          if (c.after_step) {
            CZ_RETURN_IF_ERROR(c.after_step(step, *ddp, *opt, chunks));
          }
        }
        CZ_ASSIGN_OR_RETURN(auto dict, ddp->GatherStateDict(false));
        CZ_ASSIGN_OR_RETURN(OptimizerState state, opt->GatherState(false));
        CZ_ASSIGN_OR_RETURN(OptimizerState shard, opt->SaveShard());
        MutexLock lock(&mu);
        out->shards[g.rank()] = std::move(shard);
        if (disk != nullptr) out->disk[g.rank()] = disk->stats();
        if (g.rank() == 0) {
          for (const auto& [name, t] : dict) out->masters[name] = *t.ToFloats();
          out->state = std::move(state);
          for (Device d : {Device::Cpu(), Device::Simulated(0)}) {
            for (int k = 0; k < kNumMemoryCategories; ++k) {
              const auto category = static_cast<MemoryCategory>(k);
              out->memory[{d, category}] = tracker.Current(d, category);
              out->peak[{d, category}] = tracker.Peak(d, category);
            }
          }
        }
        return absl::OkStatus();
      });
  out->losses.assign(c.steps - c.first_step, 0.0f);
  for (int r = 0; r < c.world; ++r) {
    for (size_t s = 0; s < losses[r].size() && s < out->losses.size(); ++s) {
      out->losses[s] += losses[r][s] / c.world;
    }
  }
  return statuses;
}

// ---- The reference ----

struct Reference {
  std::vector<float> losses;
  std::vector<double> norms;
  Values masters, exp_avg, exp_avg_sq, momentum;
};

float Round(float x, DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return HalfBitsToFloat(FloatToHalfBits(x));
    case DType::kBF16:
      return BFloat16BitsToFloat(FloatToBFloat16Bits(x));
    default:
      return x;
  }
}

// Straightforward f32 optimizer over the whole global batch in one pass,
// weights rounded to the compute dtype for forward and backward. Steps in
// `skip` leave everything unchanged (an overflow).
Reference RunReference(const RunConfig& c, std::vector<int> skip = {}) {
  std::unique_ptr<TestModel> model = MakeTestModel(c.kind, kModelSeed);
  Reference ref;
  for (Parameter* p : model->Parameters()) {
    ref.masters[p->name()] = *p->data().ToFloats();
  }
  const ZeroOptimizerOptions& o = c.opt;
  const float wd = static_cast<float>(
      o.weight_decay.value_or(o.kind == OptimizerKind::kAdamW ? 0.01 : 0.0));
  int updates = 0;
  for (int step = 0; step < c.steps; ++step) {
    for (Parameter* p : model->Parameters()) {
      std::vector<float> w = ref.masters[p->name()];
      for (float& x : w) x = Round(x, c.dtype);
      p->set_data(*Tensor::FromFloats(w, p->shape()));
    }
    LocalHooks hooks;
    const Batch global = MakeBatch(*model, TotalRows(c), kDataSeed + step);
    ref.losses.push_back(*model->Forward(hooks, global, 0));
    EXPECT_TRUE(model->Backward(hooks).ok());
    EXPECT_TRUE(hooks.EndStep().ok());
    Values grads;
    double sum = 0;
    for (Parameter* p : model->Parameters()) {
      if (!p->grad().defined()) continue;
      grads[p->name()] = *p->grad().ToFloats();
      for (float g : grads[p->name()]) sum += double{g} * g;
      p->set_grad(Tensor());
    }
    ref.norms.push_back(std::sqrt(sum));
    if (std::find(skip.begin(), skip.end(), step) != skip.end()) continue;
    ++updates;
    float clip = 1.0f;
    if (o.max_grad_norm > 0 && ref.norms.back() > o.max_grad_norm) {
      clip = static_cast<float>(o.max_grad_norm / (ref.norms.back() + 1e-6));
    }
    const float lr = static_cast<float>(o.lr.At(step));
    for (auto& [name, g] : grads) {
      std::vector<float>& p = ref.masters[name];
      std::vector<float>& m = ref.exp_avg[name];
      std::vector<float>& v = ref.exp_avg_sq[name];
      std::vector<float>& buf = ref.momentum[name];
      m.resize(p.size(), 0.0f);
      v.resize(p.size(), 0.0f);
      buf.resize(p.size(), 0.0f);
      for (size_t i = 0; i < p.size(); ++i) {
        float grad = g[i] * clip;
        if (o.kind == OptimizerKind::kSgd) {
          grad += wd * p[i];
          if (o.momentum != 0) {
            buf[i] = updates == 1
                         ? grad
                         : static_cast<float>(o.momentum) * buf[i] +
                               static_cast<float>(1 - o.dampening) * grad;
            grad = o.nesterov ? grad + static_cast<float>(o.momentum) * buf[i]
                              : buf[i];
          }
          p[i] -= lr * grad;
          continue;
        }
        if (o.kind == OptimizerKind::kAdamW) {
          p[i] *= 1 - lr * wd;
        } else {
          grad += wd * p[i];
        }
        const float b1 = static_cast<float>(o.beta1);
        const float b2 = static_cast<float>(o.beta2);
        m[i] = b1 * m[i] + (1 - b1) * grad;
        v[i] = b2 * v[i] + (1 - b2) * grad * grad;
        // PyTorch computes the bias corrections in double (Python floats):
        // in f32, 1 - 0.999f is 4.7e-5 away from 0.001.
        const double bc1 = 1 - std::pow(o.beta1, updates);
        const double bc2 = 1 - std::pow(o.beta2, updates);
        const float denom =
            std::sqrt(v[i]) / static_cast<float>(std::sqrt(bc2)) +
            static_cast<float>(o.eps);
        p[i] -= static_cast<float>(o.lr.At(step) / bc1) * (m[i] / denom);
      }
    }
  }
  return ref;
}

// The gathered state's pieces of one state name, by parameter.
Values StateOf(const OptimizerState& state, const std::string& name) {
  Values out;
  for (const StatePiece& p : state.pieces) {
    if (p.state == name) out[p.param] = *p.values.ToFloats();
  }
  return out;
}

void CheckAgainstReference(const RunConfig& c) {
  SCOPED_TRACE(Describe(c));
  const Reference want = RunReference(c);
  RunResult got;
  ASSERT_TRUE(AllRanksOk(RunZero(c, &got)));
  const double tol = c.dtype == DType::kF32 ? 1e-6 : 1e-3;
  ExpectClose(got.losses, want.losses, tol, "losses");
  std::vector<float> norms;
  for (const StepResult& r : got.results) {
    EXPECT_FALSE(r.skipped);
    norms.push_back(static_cast<float>(r.grad_norm));
  }
  std::vector<float> want_norms(want.norms.begin(), want.norms.end());
  ExpectClose(norms, want_norms, tol, "grad norms");
  for (const auto& [name, p] : want.masters) {
    if (c.kind == TestModelKind::kUnused && name == "extra.weight") continue;
    ExpectClose(got.masters[name], p, tol, "master " + name);
  }
  const Values m = StateOf(got.state, kExpAvgState);
  const Values v = StateOf(got.state, kExpAvgSqState);
  const Values buf = StateOf(got.state, kMomentumState);
  // exp_avg and the momentum buffer sum grads of changing sign, so in f16
  // one element's relative error can exceed the grads' (the tensor's
  // cannot).
  const std::optional<double> element_tol =
      c.dtype == DType::kF32 ? std::nullopt : std::optional<double>(1e-2);
  for (const auto& [name, want_m] : want.exp_avg) {
    if (c.opt.kind == OptimizerKind::kSgd) {
      if (c.opt.momentum != 0) {
        ExpectClose(buf.at(name), want.momentum.at(name), tol,
                    "momentum " + name, element_tol);
      }
      continue;
    }
    ExpectClose(m.at(name), want_m, tol, "exp_avg " + name, element_tol);
    ExpectClose(v.at(name), want.exp_avg_sq.at(name), 2 * tol,
                "exp_avg_sq " + name, element_tol);
  }
  EXPECT_EQ(got.state.updates, c.steps);
  EXPECT_EQ(got.state.iterations, c.steps);
}

RunConfig Base(TestModelKind kind, int world, std::optional<int64_t> size,
               ChunkLayout layout, DType dtype) {
  RunConfig c;
  c.kind = kind;
  c.world = world;
  c.chunk_size = size;
  c.layout = layout;
  c.dtype = dtype;
  c.opt.lr = *LrSchedule::WarmupCosine(1e-2, 1e-3, 3, 10);
  // A scale the test models' grads never overflow with (65536 can).
  c.opt.loss_scaler.initial_scale = 1024;
  return c;
}

class ZeroOptimizerMatrix : public ::testing::TestWithParam<TestModelKind> {};

TEST_P(ZeroOptimizerMatrix, AdamWMatchesTheReference) {
  for (DType dtype : {DType::kF32, DType::kF16}) {
    for (int world : {1, 2, 4}) {
      for (std::optional<int64_t> size :
           {std::optional<int64_t>(), std::optional<int64_t>(32)}) {
        for (ChunkLayout layout :
             {ChunkLayout::kReplicated, ChunkLayout::kOwner,
              ChunkLayout::kSharded}) {
          CheckAgainstReference(Base(GetParam(), world, size, layout, dtype));
        }
      }
    }
  }
}

// Registered at Create (a known order) and prefetching up to 3 chunks,
// with many small chunks: the same results.
TEST(ZeroOptimizer, KnownOrderAndDeepPrefetchMatchTheReference) {
  for (TestModelKind kind :
       {TestModelKind::kNested, TestModelKind::kTied, TestModelKind::kTwice}) {
    for (int prefetch : {0, 1, 3}) {
      for (ChunkLayout layout : {ChunkLayout::kOwner, ChunkLayout::kSharded}) {
        RunConfig c = Base(kind, 4, 24, layout, DType::kF32);
        c.known_order = true;
        c.max_prefetch = prefetch;
        SCOPED_TRACE(absl::StrCat("prefetch ", prefetch));
        CheckAgainstReference(c);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, ZeroOptimizerMatrix,
    ::testing::Values(TestModelKind::kMlp, TestModelKind::kNested,
                      TestModelKind::kTwice, TestModelKind::kTied,
                      TestModelKind::kUnused),
    [](const ::testing::TestParamInfo<TestModelKind>& info) {
      return std::string(TestModelName(info.param));
    });

// Every algorithm and option, with clipping that bites, in each layout.
TEST(ZeroOptimizer, AlgorithmsAndClippingMatchTheReference) {
  std::vector<ZeroOptimizerOptions> variants(5);
  variants[0].kind = OptimizerKind::kAdam;
  variants[0].weight_decay = 0.1;
  variants[0].beta1 = 0.8;
  variants[0].beta2 = 0.95;
  variants[0].eps = 1e-6;
  variants[1].kind = OptimizerKind::kAdamW;
  variants[1].max_grad_norm = 0.05;  // Below every step's norm: clips.
  variants[2].kind = OptimizerKind::kSgd;
  variants[3].kind = OptimizerKind::kSgd;
  variants[3].momentum = 0.9;
  variants[3].nesterov = true;
  variants[3].weight_decay = 0.01;
  variants[4].kind = OptimizerKind::kSgd;
  variants[4].momentum = 0.5;
  variants[4].dampening = 0.3;
  variants[4].max_grad_norm = 0.05;
  for (const ZeroOptimizerOptions& o : variants) {
    for (DType dtype : {DType::kF32, DType::kF16}) {
      for (int world : {1, 4}) {
        for (ChunkLayout layout :
             {ChunkLayout::kReplicated, ChunkLayout::kOwner,
              ChunkLayout::kSharded}) {
          for (TestModelKind kind :
               {TestModelKind::kMlp, TestModelKind::kTied}) {
            RunConfig c = Base(kind, world, 32, layout, dtype);
            const LrSchedule lr = c.opt.lr;
            const LossScalerOptions scaler = c.opt.loss_scaler;
            c.opt = o;
            c.opt.lr = lr;
            c.opt.loss_scaler = scaler;
            CheckAgainstReference(c);
          }
        }
      }
    }
  }
}

TEST(ZeroOptimizer, BF16MatchesTheReferenceWithoutAScaler) {
  for (ChunkLayout layout : {ChunkLayout::kOwner, ChunkLayout::kSharded}) {
    RunConfig c = Base(TestModelKind::kNested, 2, 32, layout, DType::kBF16);
    SCOPED_TRACE(Describe(c));
    const Reference want = RunReference(c);
    RunResult got;
    ASSERT_TRUE(AllRanksOk(RunZero(c, &got)));
    for (const StepResult& r : got.results) EXPECT_EQ(r.loss_scale, 1.0);
    // bf16 keeps 8 bits: grads rounded twice are off by up to ~1e-2.
    for (const auto& [name, p] : want.masters) {
      ExpectClose(got.masters[name], p, 1e-2, "master " + name);
    }
  }
}

// An Inf on one rank only: every rank skips, the scale halves, the weights
// stay exactly as they were, and the run goes on like the reference with
// that step left out.
TEST(ZeroOptimizer, OverflowOnOneRankSkipsTheStepEverywhere) {
  for (ChunkLayout layout :
       {ChunkLayout::kReplicated, ChunkLayout::kOwner, ChunkLayout::kSharded}) {
    RunConfig c = Base(TestModelKind::kTied, 2, 32, layout, DType::kF16);
    c.poison_rank = 1;
    c.poison_steps = {3};
    SCOPED_TRACE(Describe(c));
    Mutex mu;
    std::map<int, Values> before, after;
    std::vector<bool> skipped(2, false);
    std::vector<int64_t> updates(2, -1);
    c.before_step = [&](int step, ZeroDdp& ddp, ZeroOptimizer&,
                        ChunkManager&) -> absl::Status {
      if (step != 3) return absl::OkStatus();
      CZ_ASSIGN_OR_RETURN(auto dict, ddp.GatherStateDict(true));
      MutexLock lock(&mu);
      for (auto& [n, t] : dict) before[0][n] = *t.ToFloats();
      return absl::OkStatus();
    };
    c.after_step = [&](int step, ZeroDdp& ddp, ZeroOptimizer& opt,
                       ChunkManager& chunks) -> absl::Status {
      if (step != 3) return absl::OkStatus();
      const int rank = chunks.process_group().rank();
      CZ_ASSIGN_OR_RETURN(auto dict, ddp.GatherStateDict(true));
      // The compute-dtype payload is f16(master) again, bit for bit.
      for (int i = 0; i < chunks.num_chunks(ddp.param_group()); ++i) {
        Chunk* p = chunks.chunk(ddp.param_group(), i);
        Chunk* m = chunks.chunk(ddp.master_group(), i);
        if (p->layout() == ChunkLayout::kOwner && !p->is_holder()) continue;
        const std::vector<float> half = *p->ShardStorageView().ToFloats();
        const std::vector<float> master = *m->ShardStorageView().ToFloats();
        for (size_t k = 0; k < half.size(); ++k) {
          EXPECT_EQ(half[k], Round(master[k], DType::kF16)) << p->name() << k;
        }
      }
      MutexLock lock(&mu);
      for (auto& [n, t] : dict) after[rank][n] = *t.ToFloats();
      updates[rank] = opt.updates();
      return absl::OkStatus();
    };
    RunResult got;
    ASSERT_TRUE(AllRanksOk(RunZero(c, &got)));
    EXPECT_TRUE(got.results[3].skipped);
    EXPECT_FALSE(std::isfinite(got.results[3].grad_norm));
    EXPECT_EQ(got.results[3].loss_scale, 1024);
    EXPECT_EQ(got.results[4].loss_scale, 512);
    EXPECT_EQ(updates, std::vector<int64_t>({3, 3}));
    for (int r = 0; r < 2; ++r) EXPECT_EQ(after[r], before[0]) << "rank " << r;
    const Reference want = RunReference(c, /*skip=*/{3});
    for (const auto& [name, p] : want.masters) {
      ExpectClose(got.masters[name], p, 1e-3, "master " + name);
    }
    EXPECT_EQ(got.state.updates, 9);
    EXPECT_EQ(got.state.iterations, 10);
  }
}

// Without a loss scaler (f32, bf16) non-finite grads cannot be a scale
// that is too high: Step fails on every rank, naming the step, instead of
// skipping for ever.
TEST(ZeroOptimizer, NonFiniteGradsWithoutAScalerFailTheStep) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    RunConfig c =
        Base(TestModelKind::kTied, 2, 32, ChunkLayout::kSharded, dtype);
    c.poison_rank = 1;
    c.poison_steps = {3};
    SCOPED_TRACE(Describe(c));
    RunResult got;
    const std::vector<absl::Status> statuses = RunZero(c, &got);
    ASSERT_EQ(statuses.size(), 2u);
    for (const absl::Status& status : statuses) {
      EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_THAT(
          std::string(status.message()),
          HasSubstr(absl::StrCat("step 4: the grads are not finite "
                                 "(norm inf) and ",
                                 DTypeName(dtype),
                                 " compute has no loss scale to lower")));
    }
    EXPECT_EQ(got.results.size(), 3u);  // Steps 0, 1 and 2 went through.
  }
}

// The old behaviour on request: the step is skipped and the run goes on
// like the reference without it.
TEST(ZeroOptimizer, NonFiniteGradsWithoutAScalerMaySkip) {
  RunConfig c =
      Base(TestModelKind::kTied, 2, 32, ChunkLayout::kSharded, DType::kF32);
  c.opt.skip_nonfinite_without_scaler = true;
  c.poison_rank = 0;
  c.poison_steps = {3};
  RunResult got;
  ASSERT_TRUE(AllRanksOk(RunZero(c, &got)));
  EXPECT_TRUE(got.results[3].skipped);
  EXPECT_EQ(got.state.updates, 9);
  const Reference want = RunReference(c, /*skip=*/{3});
  for (const auto& [name, p] : want.masters) {
    ExpectClose(got.masters[name], p, 1e-6, "master " + name);
  }
}

// With the f16 scaler, overflows back the scale off to its minimum; past
// that, max_overflows_at_min_scale overflows in a row end the run. Scale 4
// backs off to 2 (step 0) and 1 (step 1); steps 2 and 3 overflow at the
// minimum and are skipped; step 4, the third in a row, fails.
TEST(ZeroOptimizer, OverflowsAtTheMinimumScaleGiveUp) {
  RunConfig c =
      Base(TestModelKind::kMlp, 2, 32, ChunkLayout::kSharded, DType::kF16);
  c.opt.loss_scaler.initial_scale = 4;
  c.opt.loss_scaler.min_scale = 1;
  c.opt.max_overflows_at_min_scale = 3;
  c.poison_rank = 1;
  c.poison_steps = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  RunResult got;
  const std::vector<absl::Status> statuses = RunZero(c, &got);
  for (const absl::Status& status : statuses) {
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(status.message()),
                HasSubstr("step 5: the grads overflowed in 3 steps in a row "
                          "with the loss scale at its minimum of 1"));
  }
  ASSERT_EQ(got.results.size(), 4u);
  EXPECT_EQ(got.results[0].loss_scale, 4);
  EXPECT_EQ(got.results[1].loss_scale, 2);
  EXPECT_EQ(got.results[2].loss_scale, 1);
  EXPECT_EQ(got.results[3].loss_scale, 1);
  for (const StepResult& r : got.results) EXPECT_TRUE(r.skipped);
}

// A step that goes through resets the count: overflows at the minimum that
// are not consecutive never give up.
TEST(ZeroOptimizer, OverflowsAtTheMinimumScaleMustBeConsecutive) {
  RunConfig c =
      Base(TestModelKind::kMlp, 2, 32, ChunkLayout::kSharded, DType::kF16);
  c.opt.loss_scaler.initial_scale = 1;
  c.opt.loss_scaler.min_scale = 1;
  c.opt.max_overflows_at_min_scale = 2;
  c.poison_rank = 0;
  c.poison_steps = {0, 2, 4, 6, 8};
  RunResult got;
  ASSERT_TRUE(AllRanksOk(RunZero(c, &got)));
  EXPECT_EQ(got.state.updates, 5);
}

// 4 micro-batches of 3 rows equal one batch of 12 rows per rank.
TEST(ZeroOptimizer, AccumulatedMicroBatchesEqualOneLargeBatch) {
  for (DType dtype : {DType::kF32, DType::kF16}) {
    for (ChunkLayout layout : {ChunkLayout::kReplicated, ChunkLayout::kOwner,
                               ChunkLayout::kSharded}) {
      for (TestModelKind kind : {TestModelKind::kTied, TestModelKind::kTwice}) {
        RunConfig micro = Base(kind, 2, 32, layout, dtype);
        micro.micro_batches = 4;
        micro.opt.max_grad_norm = 0.2;
        RunConfig large = micro;
        large.micro_batches = 1;
        large.rows_per_micro = 12;
        SCOPED_TRACE(Describe(micro));
        RunResult a, b;
        ASSERT_TRUE(AllRanksOk(RunZero(micro, &a)));
        ASSERT_TRUE(AllRanksOk(RunZero(large, &b)));
        const double tol = dtype == DType::kF32 ? 1e-6 : 1e-3;
        ExpectClose(a.losses, b.losses, tol, "losses");
        for (const auto& [name, p] : b.masters) {
          ExpectClose(a.masters.at(name), p, tol, "master " + name);
        }
        for (size_t s = 0; s < a.results.size(); ++s) {
          EXPECT_EQ(a.results[s].micro_batches, 4);
          EXPECT_NEAR(a.results[s].grad_norm, b.results[s].grad_norm,
                      tol * b.results[s].grad_norm);
        }
        // And both equal the reference (12 rows x 2 ranks in one pass),
        // though less tightly in f32: the mean of four means rounds
        // differently from one mean, and Adam's division by sqrt(v) makes
        // that visible in elements whose grads are tiny.
        const Reference want = RunReference(large);
        for (const auto& [name, p] : want.masters) {
          ExpectClose(a.masters.at(name), p, std::max(tol, 1e-5),
                      "reference " + name);
        }
        // The accumulation buffer is exactly this rank's f32 share.
        EXPECT_GT(a.Memory(Device::Cpu(), MemoryCategory::kGradAccum), 0);
        EXPECT_EQ(a.Memory(Device::Cpu(), MemoryCategory::kGradAccum),
                  a.Memory(Device::Cpu(), MemoryCategory::kMaster));
        EXPECT_EQ(b.Memory(Device::Cpu(), MemoryCategory::kGradAccum), 0);
      }
    }
  }
}

// Every param's data and grad view resolves into its chunk's payload.
absl::Status CheckViewsFollowChunks(ZeroDdp& ddp, ChunkManager& chunks,
                                    const std::vector<Parameter*>& params,
                                    bool grads) {
  for (Parameter* p : params) {
    absl::StatusOr<TensorLocation> where =
        chunks.Locate(ddp.param_group(), p->name());
    if (!where.ok()) continue;  // Unused: not in a chunk.
    Chunk* c = where->chunk;
    // Where the view is, not what it holds (after backward, the grad):
    // mutable_data() does not count as a read of the weights.
    const Tensor& view = p->mutable_data();
    if (view.device() != c->device()) {
      return absl::InternalError(
          absl::StrCat(p->name(), " data on ", view.device().ToString(),
                       ", chunk on ", c->device().ToString()));
    }
    if (!grads) continue;
    const auto [first, last] = c->ShardRange(where->index);
    if (first == last) continue;
    const char* base =
        static_cast<const char*>(c->ShardStorageView().raw_data());
    const char* want =
        base + (first - c->shard_begin()) * ElementSize(c->dtype());
    if (p->grad().raw_data() != want || p->grad().device() != c->device()) {
      return absl::InternalError(
          absl::StrCat(p->name(), "'s grad does not point into ", c->name()));
    }
  }
  return absl::OkStatus();
}

// The update on a GPU: before each step the param chunks (grads in them),
// the masters and the states move to cuda:0, so that every update runs the
// CUDA kernels on the payloads themselves; after it everything comes back
// for the CPU model, except after the last step. The kernels compute the
// CPU's bits, so the run equals the CPU run bit for bit.
TEST(ZeroOptimizer, UpdateOnGpuEqualsTheCpuBitForBit) {
  if (CudaDeviceCount() == 0) {
    GTEST_SKIP() << "no GPU visible (built with CUDA: " << BuiltWithCuda()
                 << ")";
  }
  const Device gpu = Device::Cuda(0);
  for (ChunkLayout layout :
       {ChunkLayout::kReplicated, ChunkLayout::kOwner, ChunkLayout::kSharded}) {
    for (OptimizerKind kind : {OptimizerKind::kAdamW, OptimizerKind::kSgd}) {
      RunConfig plain = Base(TestModelKind::kTied, 2, 32, layout, DType::kBF16);
      plain.opt.kind = kind;
      plain.opt.momentum = kind == OptimizerKind::kSgd ? 0.9 : 0.0;
      plain.micro_batches = 2;
      SCOPED_TRACE(Describe(plain));
      RunResult want;
      ASSERT_TRUE(AllRanksOk(RunZero(plain, &want)));

      RunConfig on_gpu = plain;
      on_gpu.stage_on = gpu;
      on_gpu.before_step = [gpu](int, ZeroDdp& ddp, ZeroOptimizer& opt,
                                 ChunkManager& chunks) -> absl::Status {
        for (int i = 0; i < chunks.num_chunks(ddp.param_group()); ++i) {
          CZ_RETURN_IF_ERROR(
              chunks.MoveChunk(chunks.chunk(ddp.param_group(), i), gpu));
        }
        return opt.MoveStates(gpu);
      };
      // After the last step everything stays on the GPU: the masters are
      // cast into the params there, and the state dict and the optimizer
      // state are read from there.
      const int last = plain.steps - 1;
      on_gpu.after_step = [last](int step, ZeroDdp& ddp, ZeroOptimizer& opt,
                                 ChunkManager& chunks) -> absl::Status {
        if (step == last) return ddp.RestoreParamsFromMasters();
        for (int i = 0; i < chunks.num_chunks(ddp.param_group()); ++i) {
          CZ_RETURN_IF_ERROR(chunks.MoveChunk(
              chunks.chunk(ddp.param_group(), i), Device::Cpu()));
        }
        return opt.MoveStates(Device::Cpu());
      };
      RunResult got;
      ASSERT_TRUE(AllRanksOk(RunZero(on_gpu, &got)));
      EXPECT_EQ(got.losses, want.losses);
      EXPECT_EQ(got.masters, want.masters);
      for (const char* state : {kExpAvgState, kExpAvgSqState, kMomentumState}) {
        EXPECT_EQ(StateOf(got.state, state), StateOf(want.state, state))
            << state;
      }
    }
  }
}

// Masters and states on the CPU while the f16 chunks live on the simulated
// device, and chunks moved back and forth between steps: the same bits as
// everything on the CPU.
TEST(ZeroOptimizer, OffloadAndMovesEqualNoOffloadBitForBit) {
  for (ChunkLayout layout :
       {ChunkLayout::kReplicated, ChunkLayout::kOwner, ChunkLayout::kSharded}) {
    RunConfig plain = Base(TestModelKind::kTied, 2, 32, layout, DType::kF16);
    plain.micro_batches = 2;  // The accumulation buffer moves too.
    SCOPED_TRACE(Describe(plain));
    RunResult want;
    ASSERT_TRUE(AllRanksOk(RunZero(plain, &want)));

    RunConfig offload = plain;
    offload.device = Device::Simulated(0);
    offload.opt.offload = OffloadPolicy::kOptimizer;
    offload.after_step = [](int step, ZeroDdp& ddp, ZeroOptimizer&,
                            ChunkManager& chunks) -> absl::Status {
      for (int i = 0; i < chunks.num_chunks(ddp.master_group()); ++i) {
        if (chunks.chunk(ddp.master_group(), i)->device() != Device::Cpu())
          return absl::InternalError("a master chunk is not on the CPU");
        if (chunks.chunk(ddp.param_group(), i)->device() !=
            Device::Simulated(0))
          return absl::InternalError("a param chunk left the device");
      }
      return absl::OkStatus();
    };
    RunResult got;
    ASSERT_TRUE(AllRanksOk(RunZero(offload, &got)));
    EXPECT_EQ(got.losses, want.losses);
    EXPECT_EQ(got.masters, want.masters);
    EXPECT_GT(got.Memory(Device::Simulated(0), MemoryCategory::kParam), 0);
    EXPECT_EQ(got.Memory(Device::Simulated(0), MemoryCategory::kMaster), 0);
    // Created in host memory: the device never held a master or a state.
    EXPECT_EQ(got.Peak(Device::Simulated(0), MemoryCategory::kMaster), 0);
    EXPECT_EQ(got.Peak(Device::Simulated(0), MemoryCategory::kOptimState), 0);
    EXPECT_EQ(got.Peak(Device::Simulated(0), MemoryCategory::kGradAccum), 0);
    EXPECT_GT(got.Peak(Device::Cpu(), MemoryCategory::kGradAccum), 0);

    // Param chunks hop between devices after backward (grads in them) and
    // states after the step; every view must follow.
    RunConfig moving = plain;
    moving.before_step = [](int step, ZeroDdp& ddp, ZeroOptimizer& opt,
                            ChunkManager& chunks) -> absl::Status {
      const Device to = step % 2 == 0 ? Device::Simulated(0) : Device::Cpu();
      for (int i = 0; i < chunks.num_chunks(ddp.param_group()); ++i) {
        CZ_RETURN_IF_ERROR(
            chunks.MoveChunk(chunks.chunk(ddp.param_group(), i), to));
      }
      return absl::OkStatus();
    };
    moving.after_step = [](int step, ZeroDdp& ddp, ZeroOptimizer& opt,
                           ChunkManager& chunks) -> absl::Status {
      return opt.MoveStates(step % 3 == 0 ? Device::Simulated(0)
                                          : Device::Cpu());
    };
    RunResult moved;
    ASSERT_TRUE(AllRanksOk(RunZero(moving, &moved)));
    EXPECT_EQ(moved.losses, want.losses);
    EXPECT_EQ(moved.masters, want.masters);
  }
}

std::string NvmeDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/zero_optimizer_nvme");
  std::filesystem::create_directories(dir);
  return dir;
}

// The masters and states on disk change no bit: in every layout, in f16
// (with an overflow, whose restore reads the masters back) and bf16, with
// accumulated micro-batches (whose restore reads them too), the losses,
// masters and saved shards equal those of the optimizer in host memory;
// and host memory holds none of them after the first step.
TEST(ZeroOptimizer, NvmeEqualsOffloadBitForBit) {
  for (ChunkLayout layout :
       {ChunkLayout::kReplicated, ChunkLayout::kOwner, ChunkLayout::kSharded}) {
    for (DType dtype : {DType::kF16, DType::kBF16}) {
      RunConfig host = Base(TestModelKind::kTied, 2, 32, layout, dtype);
      host.micro_batches = 2;
      host.opt.offload = OffloadPolicy::kOptimizer;
      if (dtype == DType::kF16) {
        host.poison_rank = 1;
        host.poison_steps = {4};
      }
      SCOPED_TRACE(Describe(host));
      RunResult want;
      ASSERT_TRUE(AllRanksOk(RunZero(host, &want)));
      RunConfig nvme = host;
      nvme.opt.offload = OffloadPolicy::kNvme;
      nvme.nvme_dir = NvmeDir();
      // The masters went to disk as they were registered: none in memory
      // before step 1.
      nvme.at_start = [](ZeroDdp& ddp, ZeroOptimizer&) -> absl::Status {
        ChunkManager& chunks = ddp.chunks();
        const int n = chunks.num_chunks(ddp.master_group());
        EXPECT_GE(n, 1);
        for (int i = 0; i < n; ++i) {
          Chunk* master = chunks.chunk(ddp.master_group(), i);
          EXPECT_TRUE(master->rests_on_disk()) << master->name();
        }
        return absl::OkStatus();
      };
      RunResult got;
      ASSERT_TRUE(AllRanksOk(RunZero(nvme, &got)));
      EXPECT_EQ(got.losses, want.losses);
      // The same with every parameter payload on disk before each step
      // (holding the reduced grads): the update, and on the overflow step
      // the restore from the masters, bring them back.
      RunConfig params_too = nvme;
      params_too.params_to_disk = true;
      RunResult on_disk;
      ASSERT_TRUE(AllRanksOk(RunZero(params_too, &on_disk)));
      EXPECT_EQ(on_disk.losses, want.losses);
      EXPECT_EQ(on_disk.masters, want.masters);
      EXPECT_EQ(got.masters, want.masters);
      ASSERT_EQ(got.shards.size(), want.shards.size());
      for (size_t r = 0; r < got.shards.size(); ++r) {
        ASSERT_EQ(got.shards[r].pieces.size(), want.shards[r].pieces.size());
        for (size_t p = 0; p < got.shards[r].pieces.size(); ++p) {
          EXPECT_EQ(*got.shards[r].pieces[p].values.ToFloats(),
                    *want.shards[r].pieces[p].values.ToFloats());
        }
      }
      if (dtype == DType::kF16) {
        EXPECT_TRUE(got.results[4].skipped);
      }
      // Host memory ends with no master or state; the accumulator stays.
      EXPECT_EQ(got.Memory(Device::Cpu(), MemoryCategory::kMaster), 0);
      EXPECT_EQ(got.Memory(Device::Cpu(), MemoryCategory::kOptimState), 0);
      EXPECT_GT(want.Memory(Device::Cpu(), MemoryCategory::kOptimState), 0);
      EXPECT_GT(got.Memory(Device::Cpu(), MemoryCategory::kGradAccum), 0);
      // Every step read and wrote the masters and both states.
      EXPECT_GT(got.disk.at(0).bytes_read, 0);
      EXPECT_GT(got.disk.at(0).bytes_written, 0);
      EXPECT_TRUE(std::filesystem::is_empty(nvme.nvme_dir));
    }
  }
  // Resting on disk, the masters and states do not move.
  RunConfig refused =
      Base(TestModelKind::kTied, 1, 32, ChunkLayout::kSharded, DType::kBF16);
  refused.steps = 1;
  refused.opt.offload = OffloadPolicy::kNvme;
  refused.nvme_dir = NvmeDir();
  refused.after_step = [](int, ZeroDdp&, ZeroOptimizer& opt,
                          ChunkManager&) -> absl::Status {
    const absl::Status moved = opt.MoveStates(Device::Simulated(0));
    EXPECT_EQ(moved.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(moved.message(), HasSubstr("rest on disk"));
    return absl::OkStatus();
  };
  RunResult ignored;
  EXPECT_TRUE(AllRanksOk(RunZero(refused, &ignored)));
}

// One rank's model, chunks (32 elements, sharded), ZeroDdp and optimizer
// with default options.
struct Rank {
  std::unique_ptr<TestModel> model;
  std::unique_ptr<ChunkManager> chunks;
  std::unique_ptr<ZeroDdp> ddp;
  std::unique_ptr<ZeroOptimizer> opt;

  // Forward, backward and FinishBackward of `batch`.
  absl::Status Backward(const Batch& batch) {
    CZ_RETURN_IF_ERROR(model->Forward(*ddp, batch, 0).status());
    CZ_RETURN_IF_ERROR(model->Backward(*ddp));
    return ddp->FinishBackward();
  }
};

absl::StatusOr<Rank> SetUpRank(comm::ProcessGroup& g, TestModelKind kind) {
  Rank rank;
  rank.model = MakeTestModel(kind, 1);
  ChunkManagerOptions options;
  options.chunk_size = 32;
  rank.chunks = std::make_unique<ChunkManager>(&g, options);
  CZ_ASSIGN_OR_RETURN(rank.ddp,
                      ZeroDdp::Create(rank.model.get(), rank.chunks.get(), {}));
  CZ_ASSIGN_OR_RETURN(rank.opt, ZeroOptimizer::Create(rank.ddp.get(), {}));
  return rank;
}

TEST(ZeroOptimizer, ViewsFollowChunkMoves) {
  ASSERT_TRUE(
      AllRanksOk(SpawnRanks(2, [](comm::ProcessGroup& g) -> absl::Status {
        CZ_ASSIGN_OR_RETURN(Rank rank, SetUpRank(g, TestModelKind::kNested));
        ZeroDdp* ddp = rank.ddp.get();
        ZeroOptimizer* opt = rank.opt.get();
        ChunkManager& chunks = *rank.chunks;
        TestModel* model = rank.model.get();
        const Batch batch = MakeBatch(*model, 2, 3);
        for (int step = 0; step < 3; ++step) {
          CZ_RETURN_IF_ERROR(rank.Backward(batch));
          const Device to =
              step % 2 == 0 ? Device::Simulated(0) : Device::Cpu();
          for (int i = 0; i < chunks.num_chunks(ddp->param_group()); ++i) {
            CZ_RETURN_IF_ERROR(
                chunks.MoveChunk(chunks.chunk(ddp->param_group(), i), to));
          }
          CZ_RETURN_IF_ERROR(
              CheckViewsFollowChunks(*ddp, chunks, model->Parameters(), true));
          CZ_RETURN_IF_ERROR(opt->Step().status());
          CZ_RETURN_IF_ERROR(opt->MoveStates(to));
          CZ_RETURN_IF_ERROR(
              CheckViewsFollowChunks(*ddp, chunks, model->Parameters(), false));
          for (Parameter* p : model->Parameters()) {
            if (p->grad().defined()) {
              return absl::InternalError(p->name() + " kept a grad after Step");
            }
          }
        }
        return absl::OkStatus();
      })));
}

// Save after 5 steps, resume in a fresh run: the same layout continues bit
// for bit; another world size or layout continues within f32 rounding.
TEST(ZeroOptimizer, SavedShardsResumeInAnyLayout) {
  RunConfig full =
      Base(TestModelKind::kTied, 2, 32, ChunkLayout::kSharded, DType::kF16);
  full.opt.kind = OptimizerKind::kAdam;
  full.opt.weight_decay = 0.01;
  RunResult uninterrupted;
  ASSERT_TRUE(AllRanksOk(RunZero(full, &uninterrupted)));
  RunConfig first = full;
  first.steps = 5;
  RunResult half;
  ASSERT_TRUE(AllRanksOk(RunZero(first, &half)));
  OptimizerState saved = half.shards[0];
  for (size_t r = 1; r < half.shards.size(); ++r) {
    for (StatePiece& p : half.shards[r].pieces) saved.pieces.push_back(p);
  }
  EXPECT_EQ(saved.updates, 5);

  RunConfig resume = full;
  resume.first_step = 5;
  resume.at_start = [&](ZeroDdp&, ZeroOptimizer& opt) {
    return opt.LoadState(saved);
  };
  RunResult resumed;
  ASSERT_TRUE(AllRanksOk(RunZero(resume, &resumed)));
  EXPECT_EQ(resumed.masters, uninterrupted.masters);
  EXPECT_EQ(resumed.losses, std::vector<float>(uninterrupted.losses.begin() + 5,
                                               uninterrupted.losses.end()));
  EXPECT_EQ(resumed.state.updates, 10);
}

// Another world size and layout continue a saved run to the same result
// within f32 rounding, from the ranks' shards or from the gathered state.
// World 2 x 2 rows and world 4 x 1 row (or 1 x 4) train on the same global
// batches.
TEST(ZeroOptimizer, SavedStateResumesAtAnotherWorldSizeAndLayout) {
  RunConfig full =
      Base(TestModelKind::kNested, 2, 32, ChunkLayout::kSharded, DType::kF32);
  full.rows_per_micro = 2;
  RunResult uninterrupted;
  ASSERT_TRUE(AllRanksOk(RunZero(full, &uninterrupted)));
  RunConfig first = full;
  first.steps = 5;
  RunResult half;
  ASSERT_TRUE(AllRanksOk(RunZero(first, &half)));
  OptimizerState shards = half.shards[0];
  for (StatePiece& p : half.shards[1].pieces) shards.pieces.push_back(p);

  struct Target {
    int world;
    ChunkLayout layout;
    std::optional<int64_t> chunk_size;
    const OptimizerState* from;
  };
  for (const Target& t :
       {Target{4, ChunkLayout::kOwner, std::nullopt, &shards},
        Target{1, ChunkLayout::kReplicated, 32, &half.state},
        Target{4, ChunkLayout::kSharded, 4096, &half.state}}) {
    RunConfig resume = full;
    resume.world = t.world;
    resume.layout = t.layout;
    resume.chunk_size = t.chunk_size;
    resume.rows_per_micro = 4 / t.world;
    resume.first_step = 5;
    resume.at_start = [&](ZeroDdp&, ZeroOptimizer& opt) {
      return opt.LoadState(*t.from);
    };
    SCOPED_TRACE(Describe(resume));
    RunResult got;
    ASSERT_TRUE(AllRanksOk(RunZero(resume, &got)));
    ExpectClose(got.losses,
                std::vector<float>(uninterrupted.losses.begin() + 5,
                                   uninterrupted.losses.end()),
                1e-6, "losses");
    for (const auto& [name, p] : uninterrupted.masters) {
      ExpectClose(got.masters.at(name), p, 1e-6, "master " + name);
    }
    EXPECT_EQ(got.state.updates, 10);
  }
}

TEST(ZeroOptimizer, GatheredAndShardedStatesAgree) {
  for (ChunkLayout layout :
       {ChunkLayout::kReplicated, ChunkLayout::kOwner, ChunkLayout::kSharded}) {
    RunConfig c = Base(TestModelKind::kMlp, 4, 32, layout, DType::kF32);
    c.steps = 2;
    SCOPED_TRACE(Describe(c));
    RunResult got;
    ASSERT_TRUE(AllRanksOk(RunZero(c, &got)));
    // The ranks' pieces tile every tensor exactly once.
    std::map<std::pair<std::string, std::string>, std::vector<float>> tiled;
    for (const OptimizerState& shard : got.shards) {
      for (const StatePiece& p : shard.pieces) {
        int64_t numel = 1;
        for (int64_t d : p.shape) numel *= d;
        std::vector<float>& t = tiled[{p.param, p.state}];
        t.resize(numel, NAN);
        const std::vector<float> v = *p.values.ToFloats();
        for (size_t k = 0; k < v.size(); ++k) {
          EXPECT_TRUE(std::isnan(t[p.begin + k])) << p.param << " twice";
          t[p.begin + k] = v[k];
        }
      }
    }
    ASSERT_EQ(tiled.size(), got.state.pieces.size());
    for (const StatePiece& p : got.state.pieces) {
      EXPECT_EQ(p.begin, 0);
      EXPECT_EQ((tiled[{p.param, p.state}]), *p.values.ToFloats()) << p.param;
    }
  }
}

TEST(ZeroOptimizer, ErrorsNameWhatIsWrong) {
  ASSERT_TRUE(
      AllRanksOk(SpawnRanks(2, [](comm::ProcessGroup& g) -> absl::Status {
        CZ_ASSIGN_OR_RETURN(Rank rank, SetUpRank(g, TestModelKind::kMlp));
        ZeroOptimizer* opt = rank.opt.get();
        absl::StatusOr<StepResult> early = opt->Step();
        EXPECT_EQ(early.status().code(), absl::StatusCode::kFailedPrecondition);
        EXPECT_THAT(std::string(early.status().message()),
                    HasSubstr("Step without a backward"));
        EXPECT_EQ(opt->AccumulateGrads().code(),
                  absl::StatusCode::kFailedPrecondition);
        CZ_RETURN_IF_ERROR(rank.Backward(MakeBatch(*rank.model, 2, 3)));
        CZ_RETURN_IF_ERROR(opt->Step().status());
        EXPECT_EQ(opt->Step().status().code(),
                  absl::StatusCode::kFailedPrecondition);  // Consumed.

        CZ_ASSIGN_OR_RETURN(OptimizerState state, opt->GatherState(true));
        OptimizerState missing = state;
        missing.pieces.erase(
            std::remove_if(missing.pieces.begin(), missing.pieces.end(),
                           [](const StatePiece& p) {
                             return p.param == "fc2.weight" &&
                                    p.state == kExpAvgSqState;
                           }),
            missing.pieces.end());
        absl::Status s = opt->LoadState(missing);
        EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
        EXPECT_THAT(std::string(s.message()),
                    HasSubstr("no 'exp_avg_sq' for elements"));
        EXPECT_THAT(std::string(s.message()), HasSubstr("'fc2.weight'"));

        OptimizerState wrong = state;
        wrong.pieces[0].shape = {1, 2, 3};
        s = opt->LoadState(wrong);
        EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
        EXPECT_THAT(std::string(s.message()), HasSubstr("has shape [1, 2, 3]"));

        OptimizerState unknown = state;
        unknown.pieces[0].param = "nope.weight";
        s = opt->LoadState(unknown);
        EXPECT_THAT(std::string(s.message()), HasSubstr("'nope.weight'"));
        unknown = state;
        unknown.pieces[0].state = "momentum_buffer";
        EXPECT_EQ(opt->LoadState(unknown).code(),
                  absl::StatusCode::kInvalidArgument);
        OptimizerState outside = state;
        outside.pieces[0].begin = 1;
        EXPECT_EQ(opt->LoadState(outside).code(),
                  absl::StatusCode::kInvalidArgument);
        // HoldsAny: with 2 ranks and chunks of 32, rank 0 holds the first 16
        // elements of fc1.weight's chunk (fc1.weight has 32).
        EXPECT_EQ(opt->HoldsAny("fc1.weight", 0, 1), g.rank() == 0);
        EXPECT_EQ(opt->HoldsAny("fc1.weight", 16, 16), g.rank() == 1);
        EXPECT_TRUE(opt->HoldsAny("fc1.weight", 15, 2));
        EXPECT_FALSE(opt->HoldsAny("nope", 0, 1));
        // Nothing above changed anything: the full state still loads.
        CZ_RETURN_IF_ERROR(opt->LoadState(state));
        return absl::OkStatus();
      })));
}

double Inf() { return std::numeric_limits<double>::infinity(); }

TEST(ZeroOptimizer, CreateRefusesBadOptions) {
  ASSERT_TRUE(
      AllRanksOk(SpawnRanks(1, [](comm::ProcessGroup& g) -> absl::Status {
        std::unique_ptr<TestModel> model =
            MakeTestModel(TestModelKind::kMlp, 1);
        ChunkManager chunks(&g, ChunkManagerOptions());
        CZ_ASSIGN_OR_RETURN(std::unique_ptr<ZeroDdp> ddp,
                            ZeroDdp::Create(model.get(), &chunks, {}));
        auto code = [&](std::function<void(ZeroOptimizerOptions&)> edit) {
          ZeroOptimizerOptions o;
          edit(o);
          return ZeroOptimizer::Create(ddp.get(), o).status().code();
        };
        constexpr auto kBad = absl::StatusCode::kInvalidArgument;
        EXPECT_EQ(ZeroOptimizer::Create(nullptr, {}).status().code(), kBad);
        EXPECT_EQ(code([](auto& o) { o.beta1 = 1.0; }), kBad);
        EXPECT_EQ(code([](auto& o) { o.beta2 = -0.1; }), kBad);
        EXPECT_EQ(code([](auto& o) { o.eps = -1; }), kBad);
        EXPECT_EQ(code([](auto& o) { o.weight_decay = -1; }), kBad);
        EXPECT_EQ(code([](auto& o) { o.max_grad_norm = -1; }), kBad);
        EXPECT_EQ(code([](auto& o) { o.lr = LrSchedule::Constant(-1); }), kBad);
        EXPECT_EQ(code([](auto& o) {
                    o.kind = OptimizerKind::kSgd;
                    o.nesterov = true;
                  }),
                  kBad);
        EXPECT_EQ(code([](auto& o) { o.loss_scaler.backoff_factor = 2; }),
                  kBad);
        // Non-finite options would make every weight NaN at the first step.
        EXPECT_EQ(code([](auto& o) { o.lr = LrSchedule::Constant(Inf()); }),
                  kBad);
        EXPECT_EQ(code([](auto& o) { o.weight_decay = std::nan(""); }), kBad);
        EXPECT_EQ(code([](auto& o) { o.weight_decay = Inf(); }), kBad);
        EXPECT_EQ(code([](auto& o) { o.max_grad_norm = Inf(); }), kBad);
        EXPECT_EQ(code([](auto& o) { o.eps = Inf(); }), kBad);
        EXPECT_EQ(code([](auto& o) { o.max_overflows_at_min_scale = -1; }),
                  kBad);
        EXPECT_EQ(code([](auto&) {}), absl::StatusCode::kOk);
        return absl::OkStatus();
      })));
  EXPECT_EQ(*ParseOptimizerKind("adamw"), OptimizerKind::kAdamW);
  EXPECT_EQ(*ParseOptimizerKind("sgd"), OptimizerKind::kSgd);
  EXPECT_EQ(ParseOptimizerKind("lamb").status().message(),
            "unknown optimizer 'lamb' (want sgd, adam or adamw)");
}

}  // namespace
}  // namespace chunkzero
