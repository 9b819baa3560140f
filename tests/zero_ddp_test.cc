// ZeroDdp against a single-process reference with plain f32 tensors.
#include "ddp/zero_ddp.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "base/mutex.h"
#include "base/status_macros.h"
#include "chunk/chunk_manager.h"
#include "comm/recording_process_group.h"
#include "comm/testing/spawn_ranks.h"
#include "ddp/local_hooks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor/memory/memory_tracker.h"
#include "tests/expect_close.h"
#include "tests/test_models.h"

namespace chunkzero {
namespace {

using ::chunkzero::comm_testing::AllRanksOk;
using ::chunkzero::comm_testing::SpawnRanks;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr int kRowsPerRank = 3;
constexpr int kSteps = 2;
constexpr uint32_t kModelSeed = 7;
constexpr uint32_t kDataSeed = 11;

struct RunResult {
  std::vector<float> losses;                        // Per step.
  std::map<std::string, std::vector<float>> grads;  // After the last step.
};

// The whole global batch in one pass (per-rank passes averaged for kBranch,
// whose computation depends on the rank).
RunResult Reference(TestModelKind kind, int world, DType dtype) {
  std::unique_ptr<TestModel> model = MakeTestModel(kind, kModelSeed);
  // ZeroDdp computes with the weights rounded to the compute dtype; so does
  // the reference (in f32 arithmetic).
  for (Parameter* p : model->Parameters()) {
    std::vector<float> v = *p->data().ToFloats();
    Tensor rounded = *Tensor::FromFloats(v, p->shape(), dtype);
    p->set_data(*Tensor::FromFloats(*rounded.ToFloats(), p->shape()));
  }
  const Batch global = MakeBatch(*model, kRowsPerRank * world, kDataSeed);
  RunResult run;
  LocalHooks hooks;
  const int passes = kind == TestModelKind::kBranch ? world : 1;
  std::map<std::string, std::vector<float>> sum;
  float loss = 0;
  for (int r = 0; r < passes; ++r) {
    const Batch batch = passes == 1 ? global
                                    : SliceBatch(global, r * kRowsPerRank,
                                                 (r + 1) * kRowsPerRank);
    loss += *model->Forward(hooks, batch, r) / passes;
    EXPECT_TRUE(model->Backward(hooks).ok());
    EXPECT_TRUE(hooks.EndStep().ok());
    for (Parameter* p : model->Parameters()) {
      if (!p->grad().defined()) continue;
      std::vector<float> g = *p->grad().ToFloats();
      std::vector<float>& s = sum[p->name()];
      s.resize(g.size(), 0.0f);
      for (size_t i = 0; i < g.size(); ++i) s[i] += g[i] / passes;
      p->set_grad(Tensor());
    }
  }
  run.losses.assign(kSteps, loss);
  run.grads = sum;
  return run;
}

struct Config {
  TestModelKind kind;
  int world;
  std::optional<int64_t> chunk_size;
  ChunkLayout layout;
  DType dtype;
  bool find_unused = false;
  // kBranch: every rank takes the branch in step 1 (as rank 1 would).
  bool branch_everywhere_first = false;
  // Pass the declaration order as ZeroDdpOptions::first_use_order.
  bool known_order = false;
};

std::string Describe(const Config& c) {
  return absl::StrCat(TestModelName(c.kind), " world ", c.world, " chunk ",
                      c.chunk_size.value_or(0), " ", ChunkLayoutName(c.layout),
                      " ", DTypeName(c.dtype));
}

// Runs kSteps steps on every rank; statuses per rank, losses averaged over
// ranks, full grads assembled from the parts each rank holds.
std::vector<absl::Status> RunZero(const Config& c, RunResult* run,
                                  std::vector<std::string>* unused = nullptr) {
  Mutex mu;
  std::vector<std::vector<float>> losses(c.world);
  run->grads.clear();
  std::vector<absl::Status> statuses =
      SpawnRanks(c.world, [&](comm::ProcessGroup& g) -> absl::Status {
        // Ranks start from different values; ZeroDdp broadcasts rank 0's.
        std::unique_ptr<TestModel> model =
            MakeTestModel(c.kind, kModelSeed + 100 * g.rank());
        const Batch global =
            MakeBatch(*model, kRowsPerRank * c.world, kDataSeed);
        const Batch mine = SliceBatch(global, g.rank() * kRowsPerRank,
                                      (g.rank() + 1) * kRowsPerRank);
        ChunkManagerOptions options;
        options.chunk_size = c.chunk_size;
        options.layout = c.layout;
        options.comm_timeout = absl::Seconds(5);
        ChunkManager chunks(&g, options);
        ZeroDdpOptions ddp_options;
        ddp_options.compute_dtype = c.dtype;
        ddp_options.find_unused_parameters = c.find_unused;
        if (c.known_order) {
          for (Parameter* p : model->Parameters()) {
            ddp_options.first_use_order.push_back(p->name());
          }
        }
        CZ_ASSIGN_OR_RETURN(std::unique_ptr<ZeroDdp> ddp,
                            ZeroDdp::Create(model.get(), &chunks, ddp_options));
        for (int step = 0; step < kSteps; ++step) {
          const int as_rank =
              c.branch_everywhere_first && step == 0 ? 1 : g.rank();
          CZ_ASSIGN_OR_RETURN(float loss, model->Forward(*ddp, mine, as_rank));
          losses[g.rank()].push_back(loss);
          CZ_RETURN_IF_ERROR(model->Backward(*ddp));
          CZ_RETURN_IF_ERROR(ddp->FinishBackward());
          // No optimizer here: put the weights back for the next step.
          if (step + 1 < kSteps) {
            CZ_RETURN_IF_ERROR(ddp->RestoreParamsFromMasters());
          }
        }
        if (unused != nullptr && g.rank() == 0)
          *unused = ddp->unused_parameters();
        MutexLock lock(&mu);
        for (Parameter* p : model->Parameters()) {
          if (!p->grad().defined()) continue;
          CZ_ASSIGN_OR_RETURN(TensorLocation where,
                              chunks.Locate(ddp->param_group(), p->name()));
          const int64_t first = where.chunk->ShardRange(where.index).first -
                                where.chunk->tensor(where.index).offset;
          std::vector<float> part = *p->grad().ToFloats();
          std::vector<float>& full = run->grads[p->name()];
          full.resize(p->numel(), NAN);
          for (size_t k = 0; k < part.size(); ++k) {
            float& slot = full[first + k];
            EXPECT_TRUE(std::isnan(slot) || slot == part[k])
                << p->name() << " element " << first + k
                << " differs between ranks";
            slot = part[k];
          }
        }
        return absl::OkStatus();
      });
  run->losses.assign(kSteps, 0.0f);
  for (int r = 0; r < c.world; ++r) {
    for (size_t s = 0; s < losses[r].size() && s < kSteps; ++s) {
      run->losses[s] += losses[r][s] / c.world;
    }
  }
  return statuses;
}

void CheckAgainstReference(const Config& c) {
  SCOPED_TRACE(Describe(c));
  const RunResult want = Reference(c.kind, c.world, c.dtype);
  RunResult got;
  std::vector<std::string> unused;
  ASSERT_TRUE(AllRanksOk(RunZero(c, &got, &unused)));
  const double tol = c.dtype == DType::kF32 ? 1e-6 : 1e-3;
  ExpectClose(got.losses, want.losses, tol, "losses");
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (const auto& [name, g] : want.grads) {
    ExpectClose(got.grads[name], g, tol, "grad of " + name);
  }
  if (c.kind == TestModelKind::kUnused) {
    EXPECT_THAT(unused, ElementsAre("extra.weight"));
  } else {
    EXPECT_TRUE(unused.empty());
  }
}

class ZeroDdpMatrix : public ::testing::TestWithParam<TestModelKind> {};

TEST_P(ZeroDdpMatrix, MatchesSingleProcessReference) {
  for (DType dtype : {DType::kF32, DType::kF16}) {
    for (int world : {1, 2, 4}) {
      // None, one that forces many chunks, one that holds everything.
      for (std::optional<int64_t> size :
           {std::optional<int64_t>(), std::optional<int64_t>(32),
            std::optional<int64_t>(4096)}) {
        for (ChunkLayout layout :
             {ChunkLayout::kReplicated, ChunkLayout::kOwner,
              ChunkLayout::kSharded}) {
          CheckAgainstReference({GetParam(), world, size, layout, dtype});
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, ZeroDdpMatrix,
    ::testing::Values(TestModelKind::kMlp, TestModelKind::kNested,
                      TestModelKind::kTwice, TestModelKind::kTied,
                      TestModelKind::kUnused),
    [](const ::testing::TestParamInfo<TestModelKind>& info) {
      return std::string(TestModelName(info.param));
    });

// A branch taken on odd ranks only: by default every rank fails the step,
// naming the parameters; with find_unused_parameters their missing grads
// are zeros and the result matches the reference. In every layout: the
// branch's chunks are pinned, so nobody waits on a gather.
TEST(ZeroDdp, BranchOnSomeRanksFailsEverywhereOrReducesZeros) {
  for (auto [world, layout, size] :
       std::vector<std::tuple<int, ChunkLayout, std::optional<int64_t>>>{
           {2, ChunkLayout::kReplicated, 32},
           {4, ChunkLayout::kReplicated, std::nullopt},
           {2, ChunkLayout::kSharded, 32},
           {4, ChunkLayout::kSharded, std::nullopt},
           {2, ChunkLayout::kOwner, 32},
           {4, ChunkLayout::kOwner, 4096}}) {
    Config c{TestModelKind::kBranch, world, size, layout, DType::kF32};
    SCOPED_TRACE(Describe(c));
    RunResult got;
    std::vector<absl::Status> statuses = RunZero(c, &got);
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(statuses[r].code(), absl::StatusCode::kFailedPrecondition)
          << "rank " << r;
      EXPECT_THAT(std::string(statuses[r].message()),
                  HasSubstr("parameters with grads on some ranks but not "
                            "others in step 1: 'branch.weight', "
                            "'branch.bias'"));
    }
    c.find_unused = true;
    CheckAgainstReference(c);
  }
}

// A branch every rank took in step 1 and only some take later is not
// pinned. It must still never hang or exchange the wrong data: either the
// reductions line up and the grads check names the parameters, or the
// chunk gathers disagree and the tagged collectives fail on every rank.
// Step 1 without a given order when ranks take different branches (kBranch:
// rank 1 also runs "branch"): both ranks issue the same collectives, tags
// included, in the same order; rank 0 gathers the branch's chunks for rank 1
// in the round where rank 1 needs them. One chunk per tensor (fc1.weight,
// fc1.bias, fc2.weight, fc2.bias, branch.weight, branch.bias).
TEST(ZeroDdp, RanksTakingDifferentBranchesGatherTheSameChunksInStepOne) {
  Mutex mu;
  std::vector<std::vector<std::string>> calls(2);
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(2, [&](comm::ProcessGroup& g) -> absl::Status {
        comm::RecordingProcessGroup recorder(g);
        std::unique_ptr<TestModel> model =
            MakeTestModel(TestModelKind::kBranch, 1);
        ChunkManager chunks(&recorder, ChunkManagerOptions());
        ZeroDdpOptions ddp_options;
        ddp_options.find_unused_parameters = true;
        ddp_options.max_prefetch = 0;
        CZ_ASSIGN_OR_RETURN(std::unique_ptr<ZeroDdp> ddp,
                            ZeroDdp::Create(model.get(), &chunks, ddp_options));
        recorder.Reset();
        const Batch batch = MakeBatch(*model, 2, 5);
        CZ_RETURN_IF_ERROR(model->Forward(*ddp, batch, g.rank()).status());
        // Forward is over on this rank; the other may still need rounds.
        std::vector<std::string> mine;
        for (const comm::CollectiveCall& call : recorder.Snapshot().calls) {
          mine.push_back(call.ToString());
        }
        CZ_RETURN_IF_ERROR(model->Backward(*ddp));
        CZ_RETURN_IF_ERROR(ddp->FinishBackward());
        EXPECT_EQ(ddp->last_step_counters().agreement_rounds, 4);
        EXPECT_THAT(ddp->unused_parameters(), IsEmpty());
        MutexLock lock(&mu);
        calls[g.rank()] = std::move(mine);
        return absl::OkStatus();
      })));
  const std::string round =
      "AllGather(i32, count=7, tag=step-1 chunk agreement)";
  auto gather = [](int count, int chunk) {
    return absl::StrCat("AllGather(f16, count=", count, ", tag=f16_param.decl#",
                        chunk, ")");
  };
  // Rank 1 runs three ops (three rounds) before its backward.
  EXPECT_THAT(calls[1], ElementsAre(round, gather(16, 0), gather(4, 1), round,
                                    gather(12, 2), gather(2, 3), round,
                                    gather(5, 4), gather(2, 5)));
  // Rank 0's forward ends after two; it joins the third in its backward.
  EXPECT_THAT(calls[0], ElementsAre(round, gather(16, 0), gather(4, 1), round,
                                    gather(12, 2), gather(2, 3)));
}

TEST(ZeroDdp, BranchThatChangesAfterStepOneFailsEverywhere) {
  for (ChunkLayout layout : {ChunkLayout::kSharded, ChunkLayout::kOwner}) {
    for (std::optional<int64_t> size :
         {std::optional<int64_t>(32), std::optional<int64_t>()}) {
      Config c{TestModelKind::kBranch, 2, size, layout, DType::kF32};
      c.branch_everywhere_first = true;
      SCOPED_TRACE(Describe(c));
      RunResult got;
      const absl::Time start = absl::Now();
      std::vector<absl::Status> statuses = RunZero(c, &got);
      EXPECT_LT(absl::Now() - start, absl::Seconds(30));
      for (int r = 0; r < 2; ++r) {
        EXPECT_FALSE(statuses[r].ok()) << "rank " << r;
        const std::string message(statuses[r].message());
        EXPECT_TRUE(message.find("parameters with grads on some ranks but "
                                 "not others in step 2") != std::string::npos ||
                    message.find("mismatch") != std::string::npos)
            << "rank " << r << ": " << message;
      }
    }
  }
}

TEST(ZeroDdp, CreateRejectsBadModels) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(1, [](comm::ProcessGroup& g) -> absl::Status {
        struct Dup : Module {
          Parameter a{"w", *Tensor::Zeros({1}, DType::kF32)};
          Parameter b{"w", *Tensor::Zeros({1}, DType::kF32)};
          std::vector<Parameter*> Parameters() override { return {&a, &b}; }
        } dup;
        struct Empty : Module {
          std::vector<Parameter*> Parameters() override { return {}; }
        } empty;
        ChunkManager chunks(&g, ChunkManagerOptions());
        EXPECT_EQ(ZeroDdp::Create(&dup, &chunks, {}).status().message(),
                  "ZeroDdp: two parameters are named 'w'");
        EXPECT_EQ(ZeroDdp::Create(&empty, &chunks, {}).status().code(),
                  absl::StatusCode::kInvalidArgument);
        return absl::OkStatus();
      })));
}

TEST(ZeroDdp, DeferredParametersAreMadeOneAtATimeFromRankZerosValues) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(2, [](comm::ProcessGroup& g) -> absl::Status {
        // Each rank's init makes other values; rank 0's are everyone's. By
        // the time the second is made, the first is already a chunk view
        // (f16), so the f32 values of both never exist at once.
        const float mine = static_cast<float>(g.rank() + 1);
        struct Deferred : Module {
          explicit Deferred(float v)
              : a{"a", Shape{3},
                  [v]() {
                    return Tensor::FromFloats(std::vector<float>(3, v), {3},
                                              DType::kF32);
                  }},
                b{"b", Shape{2}, [this, v]() -> absl::StatusOr<Tensor> {
                    if (a.is_deferred() || a.data().dtype() != DType::kF16) {
                      return absl::FailedPreconditionError(
                          "a still held in f32");
                    }
                    return Tensor::FromFloats(std::vector<float>(2, 10 * v),
                                              {2}, DType::kF32);
                  }} {}
          Parameter a, b;
          std::vector<Parameter*> Parameters() override { return {&a, &b}; }
        } model(mine);
        ChunkManagerOptions options;
        options.layout = ChunkLayout::kReplicated;
        ChunkManager chunks(&g, options);
        ZeroDdpOptions ddp_options;
        ddp_options.first_use_order = {"a", "b"};
        CZ_ASSIGN_OR_RETURN(std::unique_ptr<ZeroDdp> ddp,
                            ZeroDdp::Create(&model, &chunks, ddp_options));
        EXPECT_FALSE(model.a.is_deferred());
        EXPECT_EQ(*model.a.data().ToFloats(), std::vector<float>(3, 1.0f));
        EXPECT_EQ(*model.b.data().ToFloats(), std::vector<float>(2, 10.0f));
        return absl::OkStatus();
      })));
  // A failing init fails Create, naming the parameter.
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(1, [](comm::ProcessGroup& g) -> absl::Status {
        struct Failing : Module {
          Parameter w{"w", Shape{1}, []() -> absl::StatusOr<Tensor> {
                        return absl::InternalError("disk gone");
                      }};
          std::vector<Parameter*> Parameters() override { return {&w}; }
        } model;
        ChunkManager chunks(&g, ChunkManagerOptions());
        const absl::Status s = ZeroDdp::Create(&model, &chunks, {}).status();
        EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
        EXPECT_THAT(s.message(), HasSubstr("making parameter 'w': disk gone"));
        return absl::OkStatus();
      })));
}

TEST(ZeroDdp, RegistersInFirstUseOrderAndGradsAreChunkViews) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(2, [](comm::ProcessGroup& g) -> absl::Status {
        // kUnused declares fc1, extra.weight, fc2 and never uses extra.weight.
        std::unique_ptr<TestModel> model =
            MakeTestModel(TestModelKind::kUnused, 1);
        ChunkManagerOptions options;
        options.chunk_size = 64;
        MemoryTracker tracker;
        ChunkManager chunks(&g, options, &tracker);
        CZ_ASSIGN_OR_RETURN(std::unique_ptr<ZeroDdp> ddp,
                            ZeroDdp::Create(model.get(), &chunks, {}));
        // Until step 1 the parameters sit in declaration-order chunks, sharded:
        // 72 elements in chunks of 64 -> 2 chunks, 64 f32 master elements each,
        // 32 per rank.
        EXPECT_THAT(ddp->registration_order(),
                    ElementsAre("fc1.weight", "fc1.bias", "extra.weight",
                                "fc2.weight", "fc2.bias"));
        EXPECT_EQ(chunks.num_chunks("f16_param.decl"), 2);
        EXPECT_EQ(tracker.Current(Device::Cpu(), MemoryCategory::kMaster),
                  2 * 32 * 4);
        for (Parameter* p : model->Parameters()) {
          CZ_ASSIGN_OR_RETURN(TensorLocation where,
                              chunks.Locate("f16_param.decl", p->name()));
          EXPECT_EQ(p->data().storage(), where.chunk->FullView().storage());
        }
        const Batch batch = MakeBatch(*model, 2, 3);
        CZ_RETURN_IF_ERROR(model->Forward(*ddp, batch, g.rank()).status());
        EXPECT_FALSE(ddp->registered());
        CZ_RETURN_IF_ERROR(model->Backward(*ddp));
        CZ_RETURN_IF_ERROR(ddp->FinishBackward());
        EXPECT_THAT(
            ddp->registration_order(),
            ElementsAre("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"));
        for (Parameter* p : model->Parameters()) {
          if (p->name() == "extra.weight") {
            EXPECT_FALSE(p->grad().defined());
            continue;
          }
          TensorLocation where = *chunks.Locate("f16_param", p->name());
          // data() is a view of the f16 chunk; grad() of the shard it reduced
          // into: the same storage as the chunk's shard (grad reuse).
          EXPECT_EQ(p->data().storage(), where.chunk->FullView().storage());
          EXPECT_EQ(p->data().dtype(), DType::kF16);
          EXPECT_EQ(p->grad().storage(),
                    where.chunk->ShardStorageView().storage());
        }
        // The fp32 masters are paired.
        EXPECT_EQ(chunks.num_chunks("f32_master"),
                  chunks.num_chunks("f16_param"));
        return absl::OkStatus();
      })));
}

// With the order given, Create packs the final groups at once and step 1
// gathers only the chunks in flight, never the whole model; the results are
// those of the reference.
// Groups are named for what they hold, whatever the compute dtype.
TEST(ZeroDdp, GroupsAreNamedForTheirDType) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    EXPECT_TRUE(
        AllRanksOk(SpawnRanks(2, [&](comm::ProcessGroup& g) -> absl::Status {
          std::unique_ptr<TestModel> model =
              MakeTestModel(TestModelKind::kMlp, 1);
          ChunkManager chunks(&g, ChunkManagerOptions{});
          ZeroDdpOptions ddp_options;
          ddp_options.compute_dtype = dtype;
          CZ_ASSIGN_OR_RETURN(
              std::unique_ptr<ZeroDdp> declared,
              ZeroDdp::Create(model.get(), &chunks, ddp_options));
          EXPECT_EQ(declared->param_group(),
                    absl::StrCat(DTypeName(dtype), "_param.decl"));
          EXPECT_EQ(declared->master_group(), "f32_master.decl");
          declared.reset();

          std::unique_ptr<TestModel> known_model =
              MakeTestModel(TestModelKind::kMlp, 1);
          ChunkManager known_chunks(&g, ChunkManagerOptions{});
          for (Parameter* p : known_model->Parameters()) {
            ddp_options.first_use_order.push_back(p->name());
          }
          CZ_ASSIGN_OR_RETURN(
              std::unique_ptr<ZeroDdp> known,
              ZeroDdp::Create(known_model.get(), &known_chunks, ddp_options));
          EXPECT_EQ(known->param_group(),
                    absl::StrCat(DTypeName(dtype), "_param"));
          EXPECT_EQ(known->master_group(), "f32_master");
          EXPECT_EQ(known_chunks.chunk(known->param_group(), 0)->dtype(),
                    dtype);
          return absl::OkStatus();
        })));
  }
}

TEST(ZeroDdp, KnownOrderRegistersAtCreate) {
  for (TestModelKind kind :
       {TestModelKind::kMlp, TestModelKind::kNested, TestModelKind::kTied}) {
    for (ChunkLayout layout : {ChunkLayout::kOwner, ChunkLayout::kSharded}) {
      for (DType dtype : {DType::kF32, DType::kF16}) {
        Config c{kind, 2, 32, layout, dtype};
        c.known_order = true;
        CheckAgainstReference(c);
      }
    }
  }
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(2, [](comm::ProcessGroup& g) -> absl::Status {
        std::unique_ptr<TestModel> model =
            MakeTestModel(TestModelKind::kNested, 1);
        ChunkManagerOptions options;
        options.chunk_size = 24;  // One fc per chunk: 20 elements each.
        MemoryTracker tracker;
        ChunkManager chunks(&g, options, &tracker);
        ZeroDdpOptions ddp_options;
        ddp_options.max_prefetch = 0;
        for (Parameter* p : model->Parameters()) {
          ddp_options.first_use_order.push_back(p->name());
        }
        CZ_ASSIGN_OR_RETURN(std::unique_ptr<ZeroDdp> ddp,
                            ZeroDdp::Create(model.get(), &chunks, ddp_options));
        EXPECT_TRUE(ddp->registered());
        EXPECT_EQ(ddp->registration_order(), ddp_options.first_use_order);
        const int num = chunks.num_chunks("f16_param");
        EXPECT_EQ(num, 3);
        const int64_t at_rest =
            tracker.Current(Device::Cpu(), MemoryCategory::kParam);
        EXPECT_EQ(at_rest, num * 12 * 2);  // Shards of 24 / 2 f16 elements.
        CZ_RETURN_IF_ERROR(
            model->Forward(*ddp, MakeBatch(*model, 2, 3), 0).status());
        CZ_RETURN_IF_ERROR(model->Backward(*ddp));
        CZ_RETURN_IF_ERROR(ddp->FinishBackward());
        // One chunk materialised at a time (no prefetch; each op's chunk
        // is released before the next op gathers its own), never all three
        // as step 1 without a known order does.
        EXPECT_EQ(tracker.Peak(Device::Cpu(), MemoryCategory::kParam),
                  at_rest + 24 * 2);
        return absl::OkStatus();
      })));
}

TEST(ZeroDdp, KnownOrderMustNameEveryParameterOnce) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(1, [](comm::ProcessGroup& g) -> absl::Status {
        ChunkManager chunks(&g, ChunkManagerOptions());
        auto create = [&](std::vector<std::string> order) {
          std::unique_ptr<TestModel> model =
              MakeTestModel(TestModelKind::kMlp, 1);
          ZeroDdpOptions options;
          options.first_use_order = std::move(order);
          return ZeroDdp::Create(model.get(), &chunks, options).status();
        };
        EXPECT_EQ(create({"fc1.weight", "fc1.bias", "fc2.weight"}).message(),
                  "ZeroDdp: first_use_order leaves out parameter 'fc2.bias'");
        EXPECT_EQ(create({"fc1.weight", "fc1.weight"}).message(),
                  "ZeroDdp: first_use_order names 'fc1.weight' twice");
        EXPECT_EQ(create({"nope"}).message(),
                  "ZeroDdp: first_use_order names 'nope' which is not a "
                  "parameter of the model");
        return absl::OkStatus();
      })));
}

// Steady-state traffic per step against DESIGN.md §7 for one chunk of
// Psi = 128 f16 elements on 2 ranks: sharded = gather (forward) + gather
// (backward) + reduce-scatter = 3 * 2 Psi (N-1)/N bus bytes; replicated =
// one all-reduce = 2 * 2 Psi (N-1)/N. Plus the all-reduce of 4 i32 counts
// that agrees on which parameters had grads.
TEST(ZeroDdp, CommVolumePerStepMatchesDesign) {
  for (ChunkLayout layout : {ChunkLayout::kSharded, ChunkLayout::kReplicated}) {
    SCOPED_TRACE(ChunkLayoutName(layout));
    EXPECT_TRUE(
        AllRanksOk(SpawnRanks(2, [&](comm::ProcessGroup& g) -> absl::Status {
          comm::RecordingProcessGroup recorder(g);
          std::unique_ptr<TestModel> model =
              MakeTestModel(TestModelKind::kMlp, 1);
          ChunkManagerOptions options;
          options.chunk_size = 128;
          options.layout = layout;
          ChunkManager chunks(&recorder, options);
          CZ_ASSIGN_OR_RETURN(std::unique_ptr<ZeroDdp> ddp,
                              ZeroDdp::Create(model.get(), &chunks, {}));
          const Batch batch = MakeBatch(*model, 2, 5);
          for (int step = 0; step < 2; ++step) {
            recorder.Reset();
            CZ_RETURN_IF_ERROR(model->Forward(*ddp, batch, g.rank()).status());
            CZ_RETURN_IF_ERROR(model->Backward(*ddp));
            CZ_RETURN_IF_ERROR(ddp->FinishBackward());
            CZ_RETURN_IF_ERROR(ddp->RestoreParamsFromMasters());
          }
          comm::RecordingSnapshot s = recorder.Snapshot();
          const double psi_bytes = 128 * 2;
          const comm::CollectiveStats gather =
              s[comm::CollectiveKind::kAllGather];
          const comm::CollectiveStats scatter =
              s[comm::CollectiveKind::kReduceScatter];
          const comm::CollectiveStats all_reduce =
              s[comm::CollectiveKind::kAllReduce];
          if (layout == ChunkLayout::kSharded) {
            EXPECT_EQ(gather.calls, 2);
            EXPECT_EQ(scatter.calls, 1);
            EXPECT_EQ(gather.bus_bytes + scatter.bus_bytes, 3 * psi_bytes / 2);
            EXPECT_EQ(all_reduce.calls, 1);
            // The grads check: one i32 per parameter, and one more saying
            // whether a rank broke the contract.
            EXPECT_EQ(all_reduce.payload_bytes, 4u * 5);
          } else {
            EXPECT_EQ(gather.calls, 0);
            EXPECT_EQ(scatter.calls, 0);
            EXPECT_EQ(all_reduce.calls, 2);
            // All-reduce bus factor 2(N-1)/N = 1 at N = 2.
            EXPECT_EQ(all_reduce.bus_bytes, 2 * psi_bytes / 2 + 4 * 5);
          }
          return absl::OkStatus();
        })));
  }
}

// The consolidated state dict is rank 0's initial f32 values (masters), one
// chunk at a time, before and after registration; loading writes masters
// and compute chunks; a bad dict writes nothing.
TEST(ZeroDdp, StateDictGathersAndLoads) {
  for (ChunkLayout layout :
       {ChunkLayout::kReplicated, ChunkLayout::kOwner, ChunkLayout::kSharded}) {
    for (const auto& [world_size, on] :
         {std::pair{1, Device::Cpu()}, std::pair{2, Device::Cpu()},
          std::pair{4, Device::Cpu()}, std::pair{2, Device::Simulated(0)}}) {
      // Copies: C++17 lambdas cannot capture structured bindings.
      const int world = world_size;
      const Device device = on;
      SCOPED_TRACE(testing::Message() << layout << " world " << world << " on "
                                      << device.ToString());
      std::unique_ptr<TestModel> rank0 =
          MakeTestModel(TestModelKind::kUnused, kModelSeed);
      std::map<std::string, std::vector<float>> initial;
      for (Parameter* p : rank0->Parameters()) {
        initial[p->name()] = *p->data().ToFloats();
      }
      EXPECT_TRUE(AllRanksOk(
          SpawnRanks(world, [&](comm::ProcessGroup& g) -> absl::Status {
            std::unique_ptr<TestModel> model = MakeTestModel(
                TestModelKind::kUnused, kModelSeed + 100 * g.rank());
            ChunkManagerOptions options;
            options.chunk_size = 32;
            options.layout = layout;
            options.device = device;
            options.comm_timeout = absl::Seconds(5);
            ChunkManager chunks(&g, options);
            CZ_ASSIGN_OR_RETURN(std::unique_ptr<ZeroDdp> ddp,
                                ZeroDdp::Create(model.get(), &chunks, {}));
            auto expect_dict = [&](const std::map<std::string, Tensor>& dict,
                                   float offset) {
              EXPECT_EQ(dict.size(), initial.size());
              for (const auto& [name, values] : initial) {
                std::vector<float> want = values;
                for (float& v : want) v += offset;
                // The unused parameter is kept in the compute dtype (f16).
                if (name == "extra.weight") {
                  for (float& v : want)
                    v = *Tensor::FromFloats({v}, {1}, DType::kF16)
                             ->ToFloats()
                             .value()
                             .begin();
                }
                EXPECT_EQ(*dict.at(name).ToFloats(), want) << name;
                // Gathered into host memory, wherever the chunks are.
                EXPECT_EQ(dict.at(name).device(), Device::Cpu()) << name;
              }
            };
            CZ_ASSIGN_OR_RETURN(auto before, ddp->GatherStateDict(true));
            for (const auto& [name, values] : initial) {
              EXPECT_EQ(*before.at(name).ToFloats(), values) << name;
            }
            const Batch batch = MakeBatch(*model, 2, 3);
            CZ_RETURN_IF_ERROR(model->Forward(*ddp, batch, g.rank()).status());
            CZ_RETURN_IF_ERROR(model->Backward(*ddp));
            CZ_RETURN_IF_ERROR(ddp->FinishBackward());
            CZ_ASSIGN_OR_RETURN(auto after, ddp->GatherStateDict(false));
            if (g.rank() == 0) {
              expect_dict(after, 0);
            } else {
              EXPECT_TRUE(after.empty());
            }
            // Load values + 1 everywhere.
            std::map<std::string, Tensor> next;
            for (const auto& [name, values] : initial) {
              std::vector<float> v = values;
              for (float& x : v) x += 1;
              // Given on the chunks' device: loading reads it from there.
              next[name] =
                  *Tensor::FromFloats(v, {static_cast<int64_t>(v.size())})
                       ->To(device);
            }
            // Shapes are checked against the parameters: give 2-D ones theirs.
            for (Parameter* p : model->Parameters()) {
              next[p->name()] = *next[p->name()].Reshape(p->shape());
            }
            std::map<std::string, Tensor> missing = next;
            missing.erase("fc2.bias");
            EXPECT_EQ(ddp->LoadStateDict(missing).message(),
                      "state dict has no parameter 'fc2.bias'");
            std::map<std::string, Tensor> misshapen = next;
            misshapen["fc1.weight"] = *Tensor::Zeros({32}, DType::kF32);
            EXPECT_EQ(ddp->LoadStateDict(misshapen).code(),
                      absl::StatusCode::kInvalidArgument);
            CZ_ASSIGN_OR_RETURN(auto unchanged, ddp->GatherStateDict(true));
            expect_dict(unchanged, 0);
            CZ_RETURN_IF_ERROR(ddp->LoadStateDict(next));
            CZ_ASSIGN_OR_RETURN(auto loaded, ddp->GatherStateDict(true));
            expect_dict(loaded, 1);
            // The compute chunks hold the same values, rounded to f16.
            for (Parameter* p : model->Parameters()) {
              if (p->name() == "extra.weight") continue;
              CZ_RETURN_IF_ERROR(chunks.AccessTensor("f16_param", p->name()));
              std::vector<float> want =
                  *Tensor::FromFloats(*next[p->name()].ToFloats(), p->shape(),
                                      DType::kF16)
                       ->ToFloats();
              EXPECT_EQ(*p->data().ToFloats(), want) << p->name();
            }
            return absl::OkStatus();
          })));
    }
  }
}

// Prefetching changes when chunks are gathered, never what is computed or
// how much is sent: grads are bit-identical for max_prefetch 0, 1 and 3,
// every step gathers each of the 3 chunks once in forward and once in
// backward, and prefetches are counted. On a device other than the CPU
// (sim:0 standing in for a GPU) every gather and reduce-scatter is waited
// for on the compute stream, prefetched or not; on the CPU, on the host.
TEST(ZeroDdp, PrefetchKeepsResultsAndTraffic) {
  std::map<int, std::map<std::string, std::vector<float>>> grads;
  for (int prefetch : {0, 1, 3}) {
    for (Device device : {Device::Cpu(), Device::Simulated(0)}) {
      SCOPED_TRACE(testing::Message() << "max_prefetch " << prefetch << " on "
                                      << device.ToString());
      Mutex mu;
      EXPECT_TRUE(
          AllRanksOk(SpawnRanks(2, [&](comm::ProcessGroup& g) -> absl::Status {
            comm::RecordingProcessGroup recorder(g);
            std::unique_ptr<TestModel> model =
                MakeTestModel(TestModelKind::kMlp, 1);
            ChunkManagerOptions options;
            options.chunk_size = 32;  // [fc1.w] [fc1.b fc2.w] [fc2.b]
            options.device = device;
            ChunkManager chunks(&recorder, options);
            ZeroDdpOptions ddp_options;
            ddp_options.max_prefetch = prefetch;
            CZ_ASSIGN_OR_RETURN(
                std::unique_ptr<ZeroDdp> ddp,
                ZeroDdp::Create(model.get(), &chunks, ddp_options));
            const Batch batch = MakeBatch(*model, 2, 5 + g.rank());
            for (int step = 0; step < 3; ++step) {
              recorder.Reset();
              CZ_RETURN_IF_ERROR(
                  model->Forward(*ddp, batch, g.rank()).status());
              CZ_RETURN_IF_ERROR(model->Backward(*ddp));
              CZ_RETURN_IF_ERROR(ddp->FinishBackward());
              if (step < 2) CZ_RETURN_IF_ERROR(ddp->RestoreParamsFromMasters());
            }
            EXPECT_EQ(chunks.num_chunks("f16_param"), 3);
            const StepCounters& c = ddp->last_step_counters();
            EXPECT_EQ(c.chunk_accesses, 6);
            EXPECT_EQ(c.prefetches > 0, prefetch > 0);
            EXPECT_LE(c.prefetch_hits, c.prefetches);
            EXPECT_EQ(
                recorder.Snapshot()[comm::CollectiveKind::kAllGather].calls, 6);
            EXPECT_EQ(
                recorder.Snapshot()[comm::CollectiveKind::kReduceScatter].calls,
                3);
            // The step's other collective (the all-reduce agreeing on unused
            // parameters) is read by the host, so waited for there.
            const comm::RecordingSnapshot s = recorder.Snapshot();
            EXPECT_EQ(s[comm::CollectiveKind::kAllReduce].calls, 1);
            EXPECT_EQ(s.Total().calls, 10);
            const bool on_stream = device != Device::Cpu();
            EXPECT_EQ(s.stream_waits, on_stream ? 9 : 0);
            EXPECT_EQ(s.host_waits, on_stream ? 1 : 10);
            MutexLock lock(&mu);
            for (Parameter* p : model->Parameters()) {
              std::vector<float>& slot = grads[prefetch][absl::StrCat(
                  p->name(), "@", g.rank(), "@", device.ToString())];
              slot = *p->grad().ToFloats();
            }
            return absl::OkStatus();
          })));
    }
  }
  EXPECT_EQ(grads[1], grads[0]);
  EXPECT_EQ(grads[3], grads[0]);
}

// Exact payload bytes after a steady step, and the peak bounded by the
// chunks in flight: MLP in 3 f16 chunks of 32 elements on 2 sharded ranks.
// At rest a rank holds 3 shards of 16 f16 (96 B) and 3 of 16 f32 masters
// (192 B); during a step, with max_prefetch 0, at most the chunk in use and
// the next op's (2 x 64 B) are materialised on top.
TEST(ZeroDdp, PayloadBytesAreExactAndBoundedByChunksInFlight) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(2, [](comm::ProcessGroup& g) -> absl::Status {
        MemoryTracker tracker;
        std::unique_ptr<TestModel> model =
            MakeTestModel(TestModelKind::kMlp, 1);
        ChunkManagerOptions options;
        options.chunk_size = 32;
        ChunkManager chunks(&g, options, &tracker);
        ZeroDdpOptions ddp_options;
        ddp_options.max_prefetch = 0;
        CZ_ASSIGN_OR_RETURN(std::unique_ptr<ZeroDdp> ddp,
                            ZeroDdp::Create(model.get(), &chunks, ddp_options));
        const Batch batch = MakeBatch(*model, 2, 5);
        const Device cpu = Device::Cpu();
        for (int step = 0; step < 2; ++step) {
          if (step == 1) tracker.ResetPeaks();
          CZ_RETURN_IF_ERROR(model->Forward(*ddp, batch, g.rank()).status());
          CZ_RETURN_IF_ERROR(model->Backward(*ddp));
          CZ_RETURN_IF_ERROR(ddp->FinishBackward());
          CZ_RETURN_IF_ERROR(ddp->RestoreParamsFromMasters());
          EXPECT_EQ(tracker.Current(cpu, MemoryCategory::kParam), 96);
          EXPECT_EQ(tracker.Current(cpu, MemoryCategory::kMaster), 192);
        }
        EXPECT_EQ(tracker.Peak(cpu, MemoryCategory::kMaster), 192);
        EXPECT_LE(tracker.Peak(cpu, MemoryCategory::kParam), 96 + 2 * 64);
        EXPECT_GE(tracker.Peak(cpu, MemoryCategory::kParam), 96 + 64);
        return absl::OkStatus();
      })));
}

// A test model that declares its parameters in reverse: the order step 1
// records differs from the declaration order, so registration repacks.
class DeclaredInReverse : public TestModel {
 public:
  explicit DeclaredInReverse(std::unique_ptr<TestModel> inner)
      : inner_(std::move(inner)) {}
  std::vector<Parameter*> Parameters() override {
    std::vector<Parameter*> p = inner_->Parameters();
    std::reverse(p.begin(), p.end());
    return p;
  }
  int input_width() const override { return inner_->input_width(); }
  int output_width() const override { return inner_->output_width(); }
  absl::StatusOr<float> Forward(ParamHooks& hooks, const Batch& batch,
                                int rank) override {
    return inner_->Forward(hooks, batch, rank);
  }
  absl::Status Backward(ParamHooks& hooks) override {
    return inner_->Backward(hooks);
  }

 private:
  std::unique_ptr<TestModel> inner_;
};

// How ZeroDdp learns the order: given, recorded in step 1 (the MLP declares
// its parameters in first-use order), or recorded from a model that
// declares them in reverse (step 1 repacks).
enum class OrderSource { kGiven, kRecorded, kRecordedReversed };

struct StreamRun {
  std::vector<float> losses;  // Rank 0's, per step.
  std::vector<int64_t> device_peak, param_peak, master_peak;
  std::vector<StepCounters> counters;
};

// 4 steps of the MLP, chunk size 32, 2 sharded ranks, max_prefetch 1, a new
// batch every step. `offload`: chunks compute on sim:0 and rest, with the
// masters, in host memory. Peaks are of the compute device, per step.
absl::StatusOr<StreamRun> RunStreaming(OrderSource source, bool offload) {
  Mutex mu;
  StreamRun run;
  std::vector<absl::Status> ranks =
      SpawnRanks(2, [&](comm::ProcessGroup& g) -> absl::Status {
        MemoryTracker tracker;
        std::unique_ptr<TestModel> model =
            MakeTestModel(TestModelKind::kNested, 1);
        ZeroDdpOptions ddp_options;
        ddp_options.compute_dtype = DType::kBF16;
        ddp_options.max_prefetch = 0;
        if (source == OrderSource::kGiven) {
          for (Parameter* p : model->Parameters()) {
            ddp_options.first_use_order.push_back(p->name());
          }
        }
        if (source == OrderSource::kRecordedReversed) {
          model = std::make_unique<DeclaredInReverse>(std::move(model));
        }
        ChunkManagerOptions options;
        options.chunk_size = 20;
        const Device device = offload ? Device::Simulated(0) : Device::Cpu();
        options.device = device;
        if (offload) {
          options.rest_device = Device::Cpu();
          ddp_options.master_device = Device::Cpu();
        }
        ChunkManager chunks(&g, options, &tracker);
        CZ_ASSIGN_OR_RETURN(std::unique_ptr<ZeroDdp> ddp,
                            ZeroDdp::Create(model.get(), &chunks, ddp_options));
        StreamRun mine;
        for (int step = 0; step < 4; ++step) {
          tracker.ResetPeaks();
          const Batch batch = MakeBatch(*model, 2, 10 + step);
          CZ_ASSIGN_OR_RETURN(float loss,
                              model->Forward(*ddp, batch, g.rank()));
          CZ_RETURN_IF_ERROR(model->Backward(*ddp));
          CZ_RETURN_IF_ERROR(ddp->FinishBackward());
          CZ_RETURN_IF_ERROR(ddp->RestoreParamsFromMasters());
          mine.losses.push_back(loss);
          mine.device_peak.push_back(tracker.PeakTotal(device));
          mine.param_peak.push_back(
              tracker.Peak(device, MemoryCategory::kParam));
          mine.master_peak.push_back(
              tracker.Peak(Device::Cpu(), MemoryCategory::kMaster));
          mine.counters.push_back(ddp->last_step_counters());
        }
        MutexLock lock(&mu);
        if (g.rank() == 0) run = std::move(mine);
        return absl::OkStatus();
      });
  for (const absl::Status& status : ranks) CZ_RETURN_IF_ERROR(status);
  return run;
}

// Without a given order, step 1 streams: chunks are gathered as ops need
// them and released when no op does, so its peak is that of later steps;
// placement never changes the arithmetic.
TEST(ZeroDdp, FirstStepStreamsWithoutAGivenOrder) {
  for (bool offload : {false, true}) {
    SCOPED_TRACE(offload ? "params offloaded to the host" : "all on the cpu");
    absl::StatusOr<StreamRun> given =
        RunStreaming(OrderSource::kGiven, offload);
    absl::StatusOr<StreamRun> recorded =
        RunStreaming(OrderSource::kRecorded, offload);
    absl::StatusOr<StreamRun> reversed =
        RunStreaming(OrderSource::kRecordedReversed, offload);
    ASSERT_TRUE(given.ok()) << given.status();
    ASSERT_TRUE(recorded.ok()) << recorded.status();
    ASSERT_TRUE(reversed.ok()) << reversed.status();
    EXPECT_EQ(recorded->losses, given->losses);
    EXPECT_EQ(reversed->losses, given->losses);
    // Nested in bf16 chunks of 20 (one per layer), 2 ranks: at rest 3 shards
    // of 10 bf16 (60 B) and of 10 f32 masters (120 B); an op holds its chunk
    // in full (40 B). Gathering the whole model in step 1 would hold 180 B
    // of parameters.
    const int64_t shards = 60, chunk = 40, masters = 120;
    for (const StreamRun* run : {&*given, &*recorded}) {
      EXPECT_EQ(run->param_peak[0], (offload ? 0 : shards) + chunk);
      EXPECT_EQ(run->device_peak[0],
                *std::max_element(run->device_peak.begin() + 1,
                                  run->device_peak.end()));
      EXPECT_EQ(run->param_peak[0], run->param_peak[1]);
      // Recorded in declaration order: the chunks are renamed, not repacked.
      EXPECT_EQ(run->master_peak[0], masters);
      EXPECT_EQ(run->counters[0].chunk_accesses,
                run->counters[1].chunk_accesses);
    }
    EXPECT_EQ(given->counters[0].agreement_rounds, 0);
    // One round per layer, then the one where every rank's forward ended.
    EXPECT_EQ(recorded->counters[0].agreement_rounds, 4);
    EXPECT_EQ(recorded->counters[1].agreement_rounds, 0);
    // Declared in reverse, the declaration chunks are [head, blocks.1.bias],
    // [blocks.1.weight, blocks.0.bias], [blocks.0.weight]: blocks.0 and
    // blocks.1 each need two of them (rounds: blocks.0, blocks.1, end).
    // The repack holds one declaration master chunk in full (80 B) and, while
    // a new master chunk fills, the shard of the old one (40 B).
    EXPECT_EQ(reversed->counters[0].agreement_rounds, 3);
    EXPECT_EQ(reversed->param_peak[0], (offload ? 0 : shards) + 2 * chunk);
    EXPECT_EQ(reversed->param_peak[1], (offload ? 0 : shards) + chunk);
    EXPECT_EQ(reversed->master_peak[0], masters + 80 + 40);
    EXPECT_EQ(reversed->master_peak[1], masters);
  }
}

TEST(ZeroDdp, HookMisuseFailsTheStep) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(1, [](comm::ProcessGroup& g) -> absl::Status {
        std::unique_ptr<TestModel> model =
            MakeTestModel(TestModelKind::kMlp, 1);
        ChunkManager chunks(&g, ChunkManagerOptions());
        CZ_ASSIGN_OR_RETURN(std::unique_ptr<ZeroDdp> ddp,
                            ZeroDdp::Create(model.get(), &chunks, {}));
        EXPECT_EQ(ddp->FinishBackward().code(),
                  absl::StatusCode::kFailedPrecondition);
        std::vector<Parameter*> p = model->Parameters();
        EXPECT_EQ(
            ddp->PostForward({p[0]}).message(),
            "hook order: PostForward of parameter 'fc1.weight' while it is "
            "not in use");
        return absl::OkStatus();
      })));
}

// A forward scope after a parameter's grad is in its slice (grad reuse:
// the slice holds the grad, no longer the weights) fails, naming it; a
// recomputed forward must come before the backward that hands its grads.
TEST(ZeroDdp, ForwardAfterTheGradIsWrittenFailsNamingTheParameter) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(2, [](comm::ProcessGroup& g) -> absl::Status {
        std::unique_ptr<TestModel> model =
            MakeTestModel(TestModelKind::kMlp, 1);
        MemoryTracker tracker;
        ChunkManager chunks(&g, ChunkManagerOptions(), &tracker);
        CZ_ASSIGN_OR_RETURN(
            std::unique_ptr<ZeroDdp> ddp,
            ZeroDdp::Create(model.get(), &chunks, ZeroDdpOptions()));
        CZ_RETURN_IF_ERROR(
            model->Forward(*ddp, MakeBatch(*model, 2, 3), 0).status());
        CZ_RETURN_IF_ERROR(model->Backward(*ddp));
        std::vector<Parameter*> fc1 = {model->Parameters()[0],
                                       model->Parameters()[1]};
        const absl::Status late = ddp->PreForward(fc1);
        EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition);
        EXPECT_THAT(std::string(late.message()),
                    HasSubstr("parameter 'fc1.weight' is used by a forward "
                              "scope after its grad was written"));
        return absl::OkStatus();
      })));
}

}  // namespace
}  // namespace chunkzero
