// What the chunk machinery costs on top of its collectives.
//
//   bazel run --config=opt //tools/bench:chunk_bench --
//   --benchmark_counters_tabular=true
//
// For each layout, world size N = 2 and chunk sizes of 1 to 64 MiB (f16), two
// operations are timed twice in the same binary: through Chunk, and as the
// bare collectives Chunk issues for them, on the same bytes:
//   access_release  Chunk: Access + Release.
//                   bare: AllGather(shard -> full) (sharded), Broadcast
//                   (owner); nothing for replicated (access is free).
//   backward        Chunk: Access, mark every tensor COMPUTE then
//                   READY_FOR_REDUCE, Reduce (which releases).
//                   bare: the access collective, then ReduceScatter
//                   (sharded), Reduce (owner) or AllReduce (replicated).
// Counter overhead = chunk time / bare time - 1 (target: <= 5% at 4 MiB and
// above). Both variants run in one benchmark so the machine state is shared;
// the reported time is the chunk variant's.
// Each run first checks one chunk access against the values appended.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "benchmark/benchmark.h"
#include "chunk/chunk_manager.h"
#include "comm/inprocess/in_process_group.h"
#include "tensor/half.h"

namespace chunkzero {
namespace {

constexpr int kTensorsPerChunk = 8;

enum class Op { kAccessRelease, kBackward };

// One rank's chunk and the buffers for the bare collectives.
struct RankState {
  std::unique_ptr<ChunkManager> manager;
  Chunk* chunk = nullptr;
  std::vector<uint16_t> full, shard;
};

absl::Status SetUp(comm::ProcessGroup& group, ChunkLayout layout,
                   int64_t elements, RankState& s) {
  ChunkManagerOptions options;
  options.layout = layout;
  options.chunk_size = elements;
  s.manager = std::make_unique<ChunkManager>(&group, options);
  CZ_RETURN_IF_ERROR(
      s.manager->CreateGroup("p", DType::kF16, MemoryCategory::kParam));
  const int64_t per_tensor = elements / kTensorsPerChunk;
  for (int t = 0; t < kTensorsPerChunk; ++t) {
    std::vector<float> v(per_tensor);
    for (int64_t k = 0; k < per_tensor; ++k) v[k] = (t * 7 + k) % 2048;
    CZ_ASSIGN_OR_RETURN(Tensor values,
                        Tensor::FromFloats(v, {per_tensor}, DType::kF16));
    CZ_RETURN_IF_ERROR(
        s.manager->AppendTensor("p", absl::StrCat("t", t), values).status());
  }
  CZ_RETURN_IF_ERROR(s.manager->CloseGroup("p"));
  s.chunk = s.manager->chunk("p", 0);
  s.full.assign(s.chunk->capacity(), 0);
  s.shard.assign(s.chunk->shard_size(), 0);
  // Check one access against the appended values.
  CZ_RETURN_IF_ERROR(s.manager->AccessChunk(s.chunk));
  const uint16_t* data = s.chunk->FullView().data<uint16_t>();
  for (int64_t i = 0; i < per_tensor * kTensorsPerChunk; i += 4099) {
    const int t = static_cast<int>(i / per_tensor);
    const float want = (t * 7 + i % per_tensor) % 2048;
    if (HalfBitsToFloat(data[i]) != want) {
      return absl::InternalError(absl::StrCat(
          "element ", i, " is ", HalfBitsToFloat(data[i]), ", want ", want));
    }
  }
  return s.manager->ReleaseChunk(s.chunk);
}

absl::Status ChunkStep(RankState& s, Op op) {
  CZ_RETURN_IF_ERROR(s.manager->AccessChunk(s.chunk));
  if (op == Op::kAccessRelease) return s.manager->ReleaseChunk(s.chunk);
  for (int i = 0; i < s.chunk->num_tensors(); ++i) {
    CZ_RETURN_IF_ERROR(s.chunk->SetTensorState(i, TensorState::kCompute));
    CZ_RETURN_IF_ERROR(
        s.chunk->SetTensorState(i, TensorState::kReadyForReduce));
  }
  return s.manager->ReduceChunk(s.chunk);
}

absl::Status BareStep(comm::ProcessGroup& g, RankState& s, ChunkLayout layout,
                      Op op) {
  const comm::MutableBuffer full{s.full.data(), s.full.size(), DType::kF16};
  const comm::MutableBuffer shard{s.shard.data(), s.shard.size(), DType::kF16};
  const int owner = s.chunk->owner();
  switch (layout) {
    case ChunkLayout::kReplicated:
      break;
    case ChunkLayout::kOwner: {
      comm::BroadcastOptions o;
      o.root = owner;
      CZ_RETURN_IF_ERROR(comm::Broadcast(g, full, o));
      break;
    }
    case ChunkLayout::kSharded:
      CZ_RETURN_IF_ERROR(comm::AllGather(g, shard, full));
      break;
  }
  if (op == Op::kAccessRelease) return absl::OkStatus();
  switch (layout) {
    case ChunkLayout::kReplicated:
      return comm::AllReduce(g, full);
    case ChunkLayout::kOwner: {
      comm::ReduceOptions o;
      o.root = owner;
      return comm::Reduce(g, full,
                          g.rank() == owner ? full : comm::MutableBuffer{}, o);
    }
    case ChunkLayout::kSharded:
      return comm::ReduceScatter(g, full, shard);
  }
  return absl::OkStatus();
}

// Runs `iterations` steps on ranks 1..N-1 (threads) and times rank 0's on
// this thread; returns seconds per step, or an error.
template <typename StepFn>
absl::StatusOr<double> TimeSteps(int world, int64_t iterations, StepFn step) {
  std::vector<absl::Status> status(world);
  std::vector<std::thread> others;
  for (int r = 1; r < world; ++r) {
    others.emplace_back([&, r] {
      for (int64_t i = 0; i < iterations && status[r].ok(); ++i) {
        status[r] = step(r);
      }
    });
  }
  const absl::Time start = absl::Now();
  for (int64_t i = 0; i < iterations && status[0].ok(); ++i) {
    status[0] = step(0);
  }
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);
  for (std::thread& t : others) t.join();
  for (const absl::Status& s : status) CZ_RETURN_IF_ERROR(s);
  return secs / iterations;
}

void BM_Chunk(benchmark::State& state, ChunkLayout layout, Op op) {
  const int world = 2;
  const int64_t bytes = state.range(0);
  const int64_t elements = bytes / 2;
  comm::InProcessWorld comm_world(world);
  std::vector<RankState> ranks(world);
  {
    std::vector<absl::Status> status(world);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        status[r] = SetUp(**comm_world.group(r), layout, elements, ranks[r]);
      });
    }
    for (std::thread& t : threads) t.join();
    for (const absl::Status& s : status) {
      if (!s.ok()) {
        state.SkipWithError(s.ToString().c_str());
        return;
      }
    }
  }
  // Enough steps for ~0.2 s of the bare collective, at least 3.
  const int64_t steps =
      std::clamp<int64_t>((int64_t{400} << 20) / bytes, 3, 2000);
  double chunk_secs = 0, bare_secs = 0;
  for (auto _ : state) {
    absl::StatusOr<double> bare = TimeSteps(world, steps, [&](int r) {
      return BareStep(**comm_world.group(r), ranks[r], layout, op);
    });
    absl::StatusOr<double> chunk =
        TimeSteps(world, steps, [&](int r) { return ChunkStep(ranks[r], op); });
    if (!bare.ok() || !chunk.ok()) {
      state.SkipWithError(
          (bare.ok() ? chunk.status() : bare.status()).ToString().c_str());
      return;
    }
    state.SetIterationTime(*chunk);
    chunk_secs += *chunk;
    bare_secs += *bare;
  }
  state.counters["chunk_us"] = 1e6 * chunk_secs / state.iterations();
  state.counters["bare_us"] = 1e6 * bare_secs / state.iterations();
  state.counters["overhead"] = bare_secs > 0 ? chunk_secs / bare_secs - 1 : 0;
}

void Sizes(benchmark::internal::Benchmark* b) {
  for (int64_t bytes = int64_t{1} << 20; bytes <= (int64_t{64} << 20);
       bytes *= 4) {
    b->Arg(bytes);
  }
  b->ArgName("bytes")->UseManualTime()->Iterations(3);
}

BENCHMARK_CAPTURE(BM_Chunk, sharded_access_release, ChunkLayout::kSharded,
                  Op::kAccessRelease)
    ->Apply(Sizes);
BENCHMARK_CAPTURE(BM_Chunk, owner_access_release, ChunkLayout::kOwner,
                  Op::kAccessRelease)
    ->Apply(Sizes);
BENCHMARK_CAPTURE(BM_Chunk, sharded_backward, ChunkLayout::kSharded,
                  Op::kBackward)
    ->Apply(Sizes);
BENCHMARK_CAPTURE(BM_Chunk, owner_backward, ChunkLayout::kOwner, Op::kBackward)
    ->Apply(Sizes);
BENCHMARK_CAPTURE(BM_Chunk, replicated_backward, ChunkLayout::kReplicated,
                  Op::kBackward)
    ->Apply(Sizes);

}  // namespace
}  // namespace chunkzero

BENCHMARK_MAIN();
