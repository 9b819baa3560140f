#include "chunk/chunk.h"

#include <cmath>
#include <memory>
#include <optional>
#include <vector>

#include "base/mutex.h"
#include "base/status_macros.h"
#include "comm/testing/mock_process_group.h"
#include "comm/testing/spawn_ranks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor/copy_stream.h"
#include "tensor/half.h"
#include "tensor/memory/caching_allocator.h"

namespace chunkzero {
namespace {

using ::chunkzero::comm_testing::AllRanksOk;
using ::chunkzero::comm_testing::MockProcessGroup;
using ::chunkzero::comm_testing::MockWork;
using ::chunkzero::comm_testing::SpawnRanks;
using ::testing::_;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::InSequence;
using ::testing::NiceMock;
using ::testing::Return;
using ::testing::StrictMock;

constexpr Device kSim = Device::Simulated(0);
constexpr ChunkLayout kLayouts[] = {ChunkLayout::kReplicated,
                                    ChunkLayout::kOwner, ChunkLayout::kSharded};

// Per-rank memory plumbing: counting allocators under a caching layer, and
// a tracker, so tests can check exact bytes and allocator calls.
struct RankMemory {
  HostAllocator cpu{Device::Cpu()};
  HostAllocator sim{Device::Simulated(0)};
  CountingAllocator cpu_count{&cpu};
  CountingAllocator sim_count{&sim};
  CachingAllocator cpu_cache{&cpu_count};
  CachingAllocator sim_cache{&sim_count};
  AllocatorRegistry registry;
  MemoryTracker tracker;

  RankMemory() {
    registry.Register(&cpu_cache);
    registry.Register(&sim_cache);
  }
  StorageOptions options() {
    return StorageOptions{MemoryCategory::kParam, &tracker, &registry};
  }
  int64_t param_bytes(Device d = Device::Cpu()) {
    return tracker.Current(d, MemoryCategory::kParam);
  }
};

ChunkOptions Options(ChunkLayout layout, int64_t capacity,
                     DType dtype = DType::kF32, int owner = 0) {
  ChunkOptions o;
  o.group = "fp16_param";
  o.index = 3;
  o.dtype = dtype;
  o.capacity = capacity;
  o.layout = layout;
  o.owner = owner;
  o.comm_timeout = absl::Seconds(20);
  return o;
}

// Three tensors a[3], b[5], c[2] with values 1..10 (identical on all ranks).
std::vector<Tensor> AppendAbc(Chunk& chunk) {
  std::vector<Tensor> views;
  std::vector<float> all = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  views.push_back(
      *chunk.Append("a", *Tensor::FromFloats({1, 2, 3}, {3}, chunk.dtype())));
  views.push_back(*chunk.Append(
      "b", *Tensor::FromFloats({4, 5, 6, 7, 8}, {5}, chunk.dtype())));
  views.push_back(
      *chunk.Append("c", *Tensor::FromFloats({9, 10}, {2, 1}, chunk.dtype())));
  return views;
}

std::vector<TensorState> States(const Chunk& chunk) {
  std::vector<TensorState> s;
  for (int i = 0; i < chunk.num_tensors(); ++i)
    s.push_back(chunk.tensor(i).state);
  return s;
}

TEST(Chunk, AppendMakesTensorsViewsOfTheChunk) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(1, [](comm::ProcessGroup& g) -> absl::Status {
        RankMemory mem;
        ChunkOptions o = Options(ChunkLayout::kReplicated, 12);
        o.storage = mem.options();
        std::unique_ptr<Chunk> chunk = *Chunk::Create(o, &g);
        EXPECT_EQ(chunk->name(), "fp16_param#3");
        std::vector<Tensor> v = AppendAbc(*chunk);
        EXPECT_EQ(chunk->used_elements(), 10);
        EXPECT_DOUBLE_EQ(chunk->utilisation(), 10.0 / 12);
        EXPECT_EQ(v[1].storage(), chunk->FullView().storage());
        EXPECT_EQ(v[1].byte_offset(), 12u);
        EXPECT_THAT(v[2].shape(), ElementsAre(2, 1));
        EXPECT_THAT(*chunk->FullView().ToFloats(),
                    ElementsAre(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 0));
        EXPECT_EQ(chunk->tensor(2).offset, 8);
        EXPECT_EQ(chunk->FindTensor("b"), 1);
        EXPECT_EQ(chunk->FindTensor("zz"), -1);
        EXPECT_EQ(mem.param_bytes(), 48);
        return absl::OkStatus();
      })));
}

TEST(Chunk, AppendErrors) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(1, [](comm::ProcessGroup& g) -> absl::Status {
        std::unique_ptr<Chunk> chunk = *Chunk::Create(
            Options(ChunkLayout::kReplicated, 8, DType::kF16), &g);
        absl::Status wrong_dtype =
            chunk->Append("w", *Tensor::Zeros({2}, DType::kF32)).status();
        EXPECT_EQ(wrong_dtype.code(), absl::StatusCode::kInvalidArgument);
        EXPECT_EQ(wrong_dtype.message(),
                  "tensor 'w' is f32 but chunk fp16_param#3 holds f16");

        absl::Status too_big =
            chunk->Append("wte", *Tensor::Zeros({3, 3}, DType::kF16)).status();
        EXPECT_EQ(too_big.code(), absl::StatusCode::kInvalidArgument);
        EXPECT_FALSE(IsChunkFull(too_big));
        EXPECT_THAT(
            std::string(too_big.message()),
            HasSubstr("tensor 'wte' [3, 3] has 9 elements, more than the "
                      "chunk size 8 of chunk fp16_param#3"));

        EXPECT_TRUE(chunk->Append("x", *Tensor::Zeros({6}, DType::kF16)).ok());
        absl::Status full =
            chunk->Append("y", *Tensor::Zeros({3}, DType::kF16)).status();
        EXPECT_TRUE(IsChunkFull(full));
        EXPECT_EQ(
            full.message(),
            "chunk fp16_param#3 is full: tensor 'y' needs 3 elements, 2 left");
        EXPECT_EQ(chunk->num_tensors(), 1);  // Nothing half-appended.

        EXPECT_EQ(chunk->Access().code(),
                  absl::StatusCode::kFailedPrecondition);
        EXPECT_TRUE(chunk->Close().ok());
        EXPECT_EQ(chunk->Append("z", *Tensor::Zeros({1}, DType::kF16))
                      .status()
                      .message(),
                  "cannot append tensor 'z' to closed chunk fp16_param#3");
        EXPECT_FALSE(IsChunkFull(absl::ResourceExhaustedError("other")));
        return absl::OkStatus();
      })));
}

TEST(Chunk, CreateRejectsBadOptions) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(2, [](comm::ProcessGroup& g) -> absl::Status {
        EXPECT_EQ(Chunk::Create(Options(ChunkLayout::kSharded, 0), &g)
                      .status()
                      .code(),
                  absl::StatusCode::kInvalidArgument);
        EXPECT_EQ(
            Chunk::Create(Options(ChunkLayout::kOwner, 4, DType::kF32, 2), &g)
                .status()
                .message(),
            "chunk fp16_param#3: owner rank 2 is outside a group of 2");
        return absl::OkStatus();
      })));
}

// Which rank holds what, after close, access and release, for every layout
// and world size: the table of the original, checked in exact bytes.
TEST(Chunk, PayloadAcrossCloseAccessRelease) {
  for (ChunkLayout layout : kLayouts) {
    for (int world : {1, 2, 3, 4}) {
      SCOPED_TRACE(testing::Message() << layout << " world " << world);
      EXPECT_TRUE(AllRanksOk(
          SpawnRanks(world, [&](comm::ProcessGroup& g) -> absl::Status {
            RankMemory mem;
            const int owner = world - 1;
            ChunkOptions o = Options(layout, 10, DType::kF32, owner);
            o.storage = mem.options();
            std::unique_ptr<Chunk> chunk = *Chunk::Create(o, &g);
            std::vector<Tensor> v = AppendAbc(*chunk);
            const bool sharded = layout == ChunkLayout::kSharded;
            // Sharded chunks are padded to a multiple of the world size.
            const int64_t shard = (10 + world - 1) / world;
            const int64_t capacity = sharded ? shard * world : 10;
            EXPECT_EQ(chunk->capacity(), capacity);
            const int64_t full_bytes = 4 * capacity;
            const bool holder =
                layout == ChunkLayout::kReplicated ||
                (layout == ChunkLayout::kOwner && g.rank() == owner);
            EXPECT_EQ(chunk->is_holder(), holder);
            const int64_t at_rest = holder    ? full_bytes
                                    : sharded ? 4 * shard
                                              : 0;
            // Building holds only what this rank keeps at rest.
            EXPECT_EQ(mem.param_bytes(), at_rest);
            EXPECT_EQ(v[0].is_materialized(), holder);

            if (!chunk->Close().ok()) return absl::InternalError("close");
            EXPECT_EQ(mem.param_bytes(), at_rest);
            EXPECT_EQ(chunk->payload_bytes(), at_rest);
            const TensorState rest_state =
                holder ? TensorState::kHold : TensorState::kFree;
            EXPECT_THAT(States(*chunk),
                        ElementsAre(rest_state, rest_state, rest_state));
            EXPECT_EQ(v[0].is_materialized(), holder);

            absl::Status accessed = chunk->Access();
            if (!accessed.ok()) return accessed;
            EXPECT_TRUE(chunk->is_accessed());
            EXPECT_EQ(mem.param_bytes(),
                      full_bytes + (sharded ? 4 * shard : 0));
            EXPECT_THAT(States(*chunk),
                        ElementsAre(TensorState::kHold, TensorState::kHold,
                                    TensorState::kHold));
            EXPECT_THAT(*v[1].ToFloats(), ElementsAre(4, 5, 6, 7, 8));
            EXPECT_THAT(*v[2].ToFloats(), ElementsAre(9, 10));
            // A second access is skipped: no collective is issued (a mismatch
            // would fail the next collective on every rank).
            if (!chunk->Access().ok()) return absl::InternalError("re-access");

            absl::Status released = chunk->Release();
            if (!released.ok()) return released;
            EXPECT_FALSE(chunk->is_accessed());
            EXPECT_EQ(mem.param_bytes(), at_rest);
            EXPECT_THAT(States(*chunk),
                        ElementsAre(rest_state, rest_state, rest_state));
            return absl::OkStatus();
          })));
    }
  }
}

// reduce equals a serial reference, in rank order, bit for bit in f32 and
// within one f16 ulp of the f32-accumulated reference in f16.
TEST(Chunk, ReduceMatchesSerialReference) {
  for (DType dtype : {DType::kF32, DType::kF16}) {
    for (ChunkLayout layout : kLayouts) {
      for (int world : {1, 2, 3, 4}) {
        SCOPED_TRACE(testing::Message()
                     << dtype << " " << layout << " world " << world);
        const int owner = world / 2;
        auto grad = [](int rank, int i) {
          return 0.1f * (rank + 1) + 0.0137f * i;
        };
        EXPECT_TRUE(AllRanksOk(
            SpawnRanks(world, [&](comm::ProcessGroup& g) -> absl::Status {
              RankMemory mem;
              ChunkOptions o = Options(layout, 10, dtype, owner);
              o.storage = mem.options();
              std::unique_ptr<Chunk> chunk = *Chunk::Create(o, &g);
              AppendAbc(*chunk);
              if (!chunk->Close().ok() || !chunk->Access().ok()) {
                return absl::InternalError("setup");
              }
              for (int t = 0; t < chunk->num_tensors(); ++t) {
                const ChunkTensor& info = chunk->tensor(t);
                std::vector<float> values(info.numel);
                for (int k = 0; k < info.numel; ++k) {
                  values[k] = grad(g.rank(), info.offset + k);
                }
                EXPECT_TRUE(
                    chunk->SetTensorState(t, TensorState::kCompute).ok());
                EXPECT_TRUE(
                    chunk
                        ->CopyTensorToChunkSlice(
                            t, *Tensor::FromFloats(values, info.shape, dtype))
                        .ok());
                EXPECT_TRUE(
                    chunk->SetTensorState(t, TensorState::kReadyForReduce)
                        .ok());
              }
              absl::Status reduced = chunk->Reduce();
              if (!reduced.ok()) return reduced;
              for (int t = 0; t < chunk->num_tensors(); ++t) {
                const ChunkTensor& info = chunk->tensor(t);
                Tensor mine = chunk->ShardView(t);
                std::vector<float> got = *mine.ToFloats();
                // Where this rank's view starts inside the tensor.
                const int64_t first =
                    layout == ChunkLayout::kSharded
                        ? std::max<int64_t>(info.offset, chunk->shard_begin())
                        : info.offset;
                for (size_t k = 0; k < got.size(); ++k) {
                  const int64_t i = first + k;
                  float expected = 0;
                  for (int r = 0; r < world; ++r) {
                    const float x =
                        dtype == DType::kF32
                            ? grad(r, i)
                            : HalfBitsToFloat(FloatToHalfBits(grad(r, i)));
                    expected += x;
                  }
                  if (dtype == DType::kF32) {
                    EXPECT_EQ(got[k], expected) << "element " << i;
                  } else {
                    const float ulp =
                        std::ldexp(1.0f, std::ilogb(expected) - 10);
                    EXPECT_LE(std::fabs(got[k] - expected), ulp)
                        << "element " << i;
                  }
                }
                const bool holder =
                    layout == ChunkLayout::kReplicated ||
                    (layout == ChunkLayout::kOwner && g.rank() == owner);
                if (layout == ChunkLayout::kOwner && !holder) {
                  EXPECT_EQ(mine.numel(), 0);
                }
                EXPECT_EQ(info.state,
                          holder ? TensorState::kHold : TensorState::kFree);
              }
              return absl::OkStatus();
            })));
      }
    }
  }
}

// A closed f32 chunk of 10 holding a, b, c (AppendAbc) that computes on
// sim:0 and rests in host memory.
absl::StatusOr<std::unique_ptr<Chunk>> OffloadedAbc(
    ChunkLayout layout, comm::ProcessGroup& g, RankMemory& mem,
    std::vector<Tensor>* views) {
  ChunkOptions o = Options(layout, 10);
  o.device = Device::Simulated(0);
  o.rest_device = Device::Cpu();
  o.storage = mem.options();
  CZ_ASSIGN_OR_RETURN(std::unique_ptr<Chunk> chunk, Chunk::Create(o, &g));
  *views = AppendAbc(*chunk);
  CZ_RETURN_IF_ERROR(chunk->Close());
  return chunk;
}

// Parameters offloaded to the host (rest_device cpu, device sim:0): between
// uses the payload (shard, or a holder's buffer) is host memory; each
// Access brings the whole chunk to the device, Release and Reduce leave
// nothing there, and values and reduced grads are those of a chunk that
// never moved.
TEST(Chunk, ChunksRestingOnTheHostComeToTheDeviceForEachUse) {
  const Device cpu = Device::Cpu(), sim = Device::Simulated(0);
  for (ChunkLayout layout : kLayouts) {
    SCOPED_TRACE(testing::Message() << layout);
    EXPECT_TRUE(
        AllRanksOk(SpawnRanks(2, [&](comm::ProcessGroup& g) -> absl::Status {
          RankMemory mem;
          std::vector<Tensor> views;
          CZ_ASSIGN_OR_RETURN(std::unique_ptr<Chunk> chunk,
                              OffloadedAbc(layout, g, mem, &views));
          EXPECT_EQ(chunk->device(), sim);
          EXPECT_EQ(chunk->rest_device(), cpu);
          const bool holder = chunk->is_holder();
          // At rest: a sharded rank's 5 floats, a holder's 10, on the host.
          const int64_t at_rest = layout == ChunkLayout::kSharded ? 20
                                  : holder                        ? 40
                                                                  : 0;
          EXPECT_EQ(mem.param_bytes(cpu), at_rest);
          EXPECT_EQ(mem.param_bytes(sim), 0);
          for (int use = 0; use < 2; ++use) {
            CZ_RETURN_IF_ERROR(chunk->Access());
            EXPECT_EQ(mem.param_bytes(sim), 40);
            EXPECT_EQ(mem.param_bytes(cpu),
                      layout == ChunkLayout::kSharded ? 20 : 0);
            EXPECT_EQ(views[1].device(), sim);
            EXPECT_THAT(*views[1].ToFloats(), ElementsAre(4, 5, 6, 7, 8));
            CZ_RETURN_IF_ERROR(chunk->Release());
            EXPECT_EQ(mem.param_bytes(sim), 0);
            EXPECT_EQ(mem.param_bytes(cpu), at_rest);
          }
          if (holder) {
            EXPECT_EQ(views[0].device(), cpu);
            EXPECT_THAT(*views[0].ToFloats(), ElementsAre(1, 2, 3));
          }
          // Two uses: a sharded rank sent its 20-byte shard up each time and
          // nothing back (unmodified); a holder moved its 40 bytes both ways.
          const int64_t up = layout == ChunkLayout::kSharded ? 2 * 20
                             : holder                        ? 2 * 40
                                                             : 0;
          EXPECT_EQ(chunk->rest_to_device_bytes(), up);
          EXPECT_EQ(chunk->device_to_rest_bytes(), holder ? up : 0);
          // Grads: rank r writes (r + 1) x the values; the sums rest on the
          // host, 3 x the values.
          CZ_RETURN_IF_ERROR(chunk->Access());
          for (int t = 0; t < chunk->num_tensors(); ++t) {
            std::vector<float> values = *views[t].ToFloats();
            for (float& v : values) v *= g.rank() + 1;
            CZ_RETURN_IF_ERROR(chunk->SetTensorState(t, TensorState::kCompute));
            CZ_RETURN_IF_ERROR(chunk->CopyTensorToChunkSlice(
                t, *Tensor::FromFloats(values, views[t].shape(), DType::kF32)));
            CZ_RETURN_IF_ERROR(
                chunk->SetTensorState(t, TensorState::kReadyForReduce));
          }
          CZ_RETURN_IF_ERROR(chunk->Reduce());
          // The third use: up as before, and the reduced shard or buffer
          // back down.
          const int64_t once = layout == ChunkLayout::kSharded ? 20
                               : holder                        ? 40
                                                               : 0;
          EXPECT_EQ(chunk->rest_to_device_bytes(), up + once);
          EXPECT_EQ(chunk->device_to_rest_bytes(), (holder ? up : 0) + once);
          EXPECT_EQ(mem.param_bytes(sim), 0);
          EXPECT_EQ(mem.param_bytes(cpu), at_rest);
          std::vector<float> reduced;
          for (int t = 0; t < chunk->num_tensors(); ++t) {
            Tensor mine = chunk->ShardView(t);
            if (mine.numel() > 0) {
              EXPECT_EQ(mine.device(), cpu);
            }
            const std::vector<float> values = *mine.ToFloats();
            reduced.insert(reduced.end(), values.begin(), values.end());
          }
          std::vector<float> want;
          const int64_t first = chunk->shard_begin();
          const int64_t last =
              layout == ChunkLayout::kSharded ? chunk->shard_end() : 10;
          if (layout != ChunkLayout::kOwner || holder) {
            for (int64_t i = first; i < std::min<int64_t>(last, 10); ++i) {
              want.push_back(3.0f * (i + 1));
            }
          }
          EXPECT_THAT(reduced, ElementsAreArray(want));
          return absl::OkStatus();
        })));
  }
}

// With a copy stream, a holder's access returns before its buffer has come
// to the device: the Work completes once the stream has copied it (the
// owner's broadcast reading the resting copy meanwhile), and the values,
// the byte counts and the memory are those of the synchronous path.
TEST(Chunk, AHoldersCopyRunsOnTheCopyStream) {
  for (ChunkLayout layout : {ChunkLayout::kReplicated, ChunkLayout::kOwner}) {
    SCOPED_TRACE(testing::Message() << layout);
    EXPECT_TRUE(
        AllRanksOk(SpawnRanks(2, [&](comm::ProcessGroup& g) -> absl::Status {
          RankMemory mem;
          CopyStream stream;
          ChunkOptions o = Options(layout, 10, DType::kF32, /*owner=*/1);
          o.device = Device::Simulated(0);
          o.rest_device = Device::Cpu();
          o.storage = mem.options();
          o.copy_stream = &stream;
          std::unique_ptr<Chunk> chunk = *Chunk::Create(o, &g);
          std::vector<Tensor> views = AppendAbc(*chunk);
          CZ_RETURN_IF_ERROR(chunk->Close());
          const bool holder = chunk->is_holder();
          Notification go[2];  // Outlive the stream's tasks.
          for (int use = 0; use < 2; ++use) {
            Notification& busy_until = go[use];
            stream.Enqueue([&busy_until] { busy_until.WaitForNotification(); });
            CZ_ASSIGN_OR_RETURN(std::unique_ptr<comm::Work> work,
                                chunk->StartAccess());
            // A holder's copy waits behind the stream; a non-owner only
            // receives the broadcast, which the owner sends from host
            // memory at once.
            if (holder) {
              EXPECT_FALSE(work->IsCompleted());
              EXPECT_EQ(mem.param_bytes(Device::Cpu()), 40);  // Still there.
            }
            busy_until.Notify();
            CZ_RETURN_IF_ERROR(work->Wait());
            EXPECT_EQ(mem.param_bytes(Device::Cpu()), 0);
            EXPECT_EQ(mem.param_bytes(Device::Simulated(0)), 40);
            EXPECT_THAT(*views[1].ToFloats(), ElementsAre(4, 5, 6, 7, 8));
            CZ_RETURN_IF_ERROR(chunk->Release());
            EXPECT_EQ(mem.param_bytes(Device::Cpu()), holder ? 40 : 0);
            EXPECT_EQ(mem.param_bytes(Device::Simulated(0)), 0);
          }
          EXPECT_EQ(chunk->rest_to_device_bytes(), holder ? 2 * 40 : 0);
          EXPECT_EQ(chunk->device_to_rest_bytes(), holder ? 2 * 40 : 0);
          stream.Drain();
          EXPECT_EQ(stream.tasks_run(), holder ? 4 : 2);
          return absl::OkStatus();
        })));
  }
}

// Where a chunk rests can change between uses (MoveRestTo: a copy, counted)
// or at the end of a use (RestWhereItComputes: from the full buffer, no
// copy); values and views follow either way.
TEST(Chunk, RestingPlaceMovesWithItsPayload) {
  const Device cpu = Device::Cpu(), sim = Device::Simulated(0);
  for (ChunkLayout layout : kLayouts) {
    SCOPED_TRACE(testing::Message() << layout);
    EXPECT_TRUE(
        AllRanksOk(SpawnRanks(2, [&](comm::ProcessGroup& g) -> absl::Status {
          RankMemory mem;
          std::vector<Tensor> views;
          CZ_ASSIGN_OR_RETURN(std::unique_ptr<Chunk> chunk,
                              OffloadedAbc(layout, g, mem, &views));
          const bool sharded = layout == ChunkLayout::kSharded;
          const int64_t at_rest = sharded ? 20 : chunk->is_holder() ? 40 : 0;
          EXPECT_EQ(chunk->RestWhereItComputes().code(),
                    absl::StatusCode::kFailedPrecondition);
          CZ_RETURN_IF_ERROR(chunk->MoveRestTo(sim));
          EXPECT_EQ(chunk->rest_device(), sim);
          EXPECT_EQ(mem.param_bytes(sim), at_rest);
          EXPECT_EQ(mem.param_bytes(cpu), 0);
          EXPECT_EQ(chunk->rest_to_device_bytes(), at_rest);
          CZ_RETURN_IF_ERROR(chunk->Access());
          EXPECT_EQ(chunk->MoveRestTo(cpu).message(),
                    "cannot move chunk fp16_param#3 to rest on cpu while it "
                    "is accessed");
          EXPECT_THAT(*views[1].ToFloats(), ElementsAre(4, 5, 6, 7, 8));
          CZ_RETURN_IF_ERROR(chunk->Release());
          CZ_RETURN_IF_ERROR(chunk->MoveRestTo(cpu));
          EXPECT_EQ(mem.param_bytes(sim), 0);
          EXPECT_EQ(chunk->device_to_rest_bytes(), at_rest);
          // Coming to rest on the device at the end of a use copies nothing
          // between host and device.
          CZ_RETURN_IF_ERROR(chunk->Access());
          const int64_t up = chunk->rest_to_device_bytes();
          CZ_RETURN_IF_ERROR(chunk->RestWhereItComputes());
          CZ_RETURN_IF_ERROR(chunk->Release());
          EXPECT_EQ(chunk->rest_device(), sim);
          EXPECT_EQ(chunk->rest_to_device_bytes(), up);
          EXPECT_EQ(chunk->device_to_rest_bytes(), at_rest);
          EXPECT_EQ(mem.param_bytes(sim), at_rest);
          EXPECT_EQ(mem.param_bytes(cpu), 0);
          CZ_RETURN_IF_ERROR(chunk->Access());
          EXPECT_THAT(*views[2].ToFloats(), ElementsAre(9, 10));
          return chunk->Release();
        })));
  }
}

TEST(Chunk, StatePreconditionsNameTheTensor) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(2, [](comm::ProcessGroup& g) -> absl::Status {
        std::unique_ptr<Chunk> chunk =
            *Chunk::Create(Options(ChunkLayout::kSharded, 10), &g);
        AppendAbc(*chunk);
        if (!chunk->Close().ok() || !chunk->Access().ok()) {
          return absl::InternalError("setup");
        }
        EXPECT_TRUE(chunk->SetTensorState(1, TensorState::kCompute).ok());
        EXPECT_FALSE(chunk->CanRelease());
        EXPECT_FALSE(chunk->CanMove());
        EXPECT_EQ(chunk->Release().message(),
                  "cannot release chunk fp16_param#3: tensor 'b' is COMPUTE "
                  "(needs every tensor HOLD)");
        EXPECT_EQ(
            chunk->MoveTo(Device::Simulated(0)).message(),
            "cannot move chunk fp16_param#3: tensor 'b' is COMPUTE (needs "
            "no tensor COMPUTE or READY_FOR_REDUCE)");
        EXPECT_EQ(chunk->Reduce().message(),
                  "cannot reduce chunk fp16_param#3: tensor 'a' is HOLD (needs "
                  "every tensor READY_FOR_REDUCE)");
        EXPECT_EQ(
            chunk->SetTensorState(0, TensorState::kReadyForReduce).message(),
            "illegal tensor state move HOLD -> READY_FOR_REDUCE for tensor "
            "'a' in chunk fp16_param#3");
        EXPECT_EQ(chunk->SetTensorState(7, TensorState::kHold).code(),
                  absl::StatusCode::kInvalidArgument);
        // Nothing was changed by the failed calls.
        EXPECT_THAT(States(*chunk),
                    ElementsAre(TensorState::kHold, TensorState::kCompute,
                                TensorState::kHold));
        EXPECT_TRUE(chunk->is_materialised());
        // The no-op: a grad that arrived before post-backward.
        EXPECT_TRUE(
            chunk->SetTensorState(1, TensorState::kReadyForReduce).ok());
        EXPECT_TRUE(chunk->SetTensorState(1, TensorState::kHoldAfterBwd).ok());
        EXPECT_EQ(chunk->tensor(1).state, TensorState::kReadyForReduce);
        EXPECT_TRUE(chunk->SetTensorState(1, TensorState::kHold).ok());
        return chunk->Release();
      })));
}

TEST(Chunk, MoveToSimulatedDeviceAndBackKeepsViewsAndValues) {
  for (ChunkLayout layout : kLayouts) {
    SCOPED_TRACE(ChunkLayoutName(layout));
    EXPECT_TRUE(
        AllRanksOk(SpawnRanks(2, [&](comm::ProcessGroup& g) -> absl::Status {
          RankMemory mem;
          ChunkOptions o = Options(layout, 10, DType::kBF16);
          o.storage = mem.options();
          std::unique_ptr<Chunk> chunk = *Chunk::Create(o, &g);
          std::vector<Tensor> v = AppendAbc(*chunk);
          if (!chunk->Close().ok() || !chunk->Access().ok()) {
            return absl::InternalError("setup");
          }
          const int64_t bytes = mem.param_bytes();
          absl::Status moved = chunk->MoveTo(Device::Simulated(0));
          if (!moved.ok()) return moved;
          EXPECT_EQ(chunk->device(), Device::Simulated(0));
          EXPECT_EQ(v[1].device(), Device::Simulated(0));
          EXPECT_EQ(v[1].raw_data(),
                    static_cast<char*>(chunk->FullView().raw_data()) + 6);
          EXPECT_THAT(*v[1].ToFloats(), ElementsAre(4, 5, 6, 7, 8));
          EXPECT_EQ(mem.param_bytes(Device::Simulated(0)), bytes);
          EXPECT_EQ(mem.param_bytes(Device::Cpu()), 0);
          // Release and access again on the new device: the gather lands there.
          if (!chunk->Release().ok() || !chunk->Access().ok()) {
            return absl::InternalError("release/access on sim:0");
          }
          EXPECT_THAT(*v[2].ToFloats(), ElementsAre(9, 10));
          if (!chunk->MoveTo(Device::Cpu()).ok())
            return absl::InternalError("back");
          EXPECT_EQ(v[0].device(), Device::Cpu());
          EXPECT_THAT(*v[0].ToFloats(), ElementsAre(1, 2, 3));
          EXPECT_EQ(mem.param_bytes(Device::Simulated(0)), 0);
          EXPECT_EQ(chunk->MoveTo(Device::Cuda(64)).code(),
                    absl::StatusCode::kNotFound);
          EXPECT_EQ(chunk->device(), Device::Cpu());
          EXPECT_THAT(*v[0].ToFloats(), ElementsAre(1, 2, 3));
          return absl::OkStatus();
        })));
  }
}

// Writes made while a sharded chunk is accessed survive release for the
// part this rank holds (and only that part: the rest belongs to others),
// once the chunk is marked modified; unmarked writes are dropped, which is
// what lets an unmodified release skip the copy.
TEST(Chunk, ShardedReleaseKeepsOwnWritesWhenMarked) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(2, [](comm::ProcessGroup& g) -> absl::Status {
        std::unique_ptr<Chunk> chunk =
            *Chunk::Create(Options(ChunkLayout::kSharded, 10), &g);
        std::vector<Tensor> v = AppendAbc(*chunk);
        if (!chunk->Close().ok() || !chunk->Access().ok()) {
          return absl::InternalError("setup");
        }
        // b spans both shards (elements 3..7; rank 0 holds 0..4).
        for (int k = 0; k < 5; ++k)
          v[1].data<float>()[k] = 100 * (g.rank() + 1) + k;
        EXPECT_FALSE(chunk->is_modified());
        if (!chunk->Release().ok() || !chunk->Access().ok()) {
          return absl::InternalError("cycle");
        }
        EXPECT_THAT(*v[1].ToFloats(), ElementsAre(4, 5, 6, 7, 8));
        for (int k = 0; k < 5; ++k)
          v[1].data<float>()[k] = 100 * (g.rank() + 1) + k;
        chunk->MarkModified();
        if (!chunk->Release().ok() || !chunk->Access().ok()) {
          return absl::InternalError("cycle");
        }
        EXPECT_FALSE(chunk->is_modified());
        EXPECT_THAT(*v[1].ToFloats(), ElementsAre(100, 101, 202, 203, 204));
        return chunk->Release();
      })));
}

TEST(Chunk, ShardRangeIsTheTensorsPartOfThisRanksShard) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(2, [](comm::ProcessGroup& g) -> absl::Status {
        // Capacity 10 over 2 ranks: rank 0 holds 0..4, rank 1 holds 5..9.
        // a = 0..2, b = 3..7, c = 8..9.
        std::unique_ptr<Chunk> sharded =
            *Chunk::Create(Options(ChunkLayout::kSharded, 10), &g);
        AppendAbc(*sharded);
        using Range = std::pair<int64_t, int64_t>;
        if (g.rank() == 0) {
          EXPECT_EQ(sharded->ShardRange(0), Range(0, 3));
          EXPECT_EQ(sharded->ShardRange(1), Range(3, 5));
          EXPECT_EQ(sharded->ShardRange(2).first,
                    sharded->ShardRange(2).second);
        } else {
          EXPECT_EQ(sharded->ShardRange(0).first,
                    sharded->ShardRange(0).second);
          EXPECT_EQ(sharded->ShardRange(1), Range(5, 8));
          EXPECT_EQ(sharded->ShardRange(2), Range(8, 10));
        }
        std::unique_ptr<Chunk> owner =
            *Chunk::Create(Options(ChunkLayout::kOwner, 10), &g);
        AppendAbc(*owner);
        EXPECT_EQ(owner->ShardRange(1), Range(3, 8));  // The whole tensor.
        return absl::OkStatus();
      })));
}

TEST(Chunk, ShardingIsThisRanksPlaceInTheLayout) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(3, [](comm::ProcessGroup& g) -> absl::Status {
        for (ChunkLayout layout : kLayouts) {
          // 10 elements: sharded, padded to 12 in shards of 4.
          std::unique_ptr<Chunk> chunk =
              *Chunk::Create(Options(layout, 10, DType::kF32, /*owner=*/2), &g);
          const ChunkSharding p = chunk->sharding();
          EXPECT_EQ(p.layout, layout);
          EXPECT_EQ(p.capacity, 10);
          EXPECT_EQ(p.world, 3);
          EXPECT_EQ(p.rank, g.rank());
          EXPECT_EQ(p.owner, 2);
          // The chunk's own answers are the layout rules'.
          EXPECT_EQ(chunk->is_holder(), IsHolder(p));
          EXPECT_EQ(std::make_pair(chunk->shard_begin(), chunk->shard_end()),
                    RankPart(p));
          // A new chunk holds what the rank keeps at rest.
          EXPECT_EQ(chunk->payload_bytes(), RestElements(p) * 4);
        }
        return absl::OkStatus();
      })));
}

TEST(Chunk, CopyIntoReleasedShardedChunkWritesTheShard) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(2, [](comm::ProcessGroup& g) -> absl::Status {
        std::unique_ptr<Chunk> chunk =
            *Chunk::Create(Options(ChunkLayout::kSharded, 10), &g);
        std::vector<Tensor> v = AppendAbc(*chunk);
        if (!chunk->Close().ok()) return absl::InternalError("close");
        EXPECT_TRUE(chunk
                        ->CopyTensorToChunkSlice(
                            1, *Tensor::FromFloats({40, 50, 60, 70, 80}, {5}))
                        .ok());
        EXPECT_EQ(
            chunk->CopyTensorToChunkSlice(1, *Tensor::FromFloats({1}, {1}))
                .code(),
            absl::StatusCode::kInvalidArgument);
        if (!chunk->Access().ok()) return absl::InternalError("access");
        EXPECT_THAT(*v[1].ToFloats(), ElementsAre(40, 50, 60, 70, 80));
        EXPECT_THAT(*v[0].ToFloats(), ElementsAre(1, 2, 3));
        return chunk->Release();
      })));
}

// Shard of 5 per rank: rank 0 holds a[0..3) b[0..2), rank 1 b[2..5) c.
// A released sharded chunk takes this rank's part of b, scaled in f32 and
// rounded once to bf16 (1/3 is not a bf16 value, so the rounding shows);
// a materialised one takes all of b and keeps it past Release.
TEST(Chunk, WriteTensorScaledRoundsOnceIntoTheSlice) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(2, [](comm::ProcessGroup& g) -> absl::Status {
        std::unique_ptr<Chunk> chunk = *Chunk::Create(
            Options(ChunkLayout::kSharded, 10, DType::kBF16), &g);
        std::vector<Tensor> v = AppendAbc(*chunk);
        if (!chunk->Close().ok()) return absl::InternalError("close");
        const Tensor b = *Tensor::FromFloats({3, 6, 9, 12, 1}, {5});
        EXPECT_TRUE(chunk->WriteTensorScaled(1, b, 1.0f / 3).ok());
        if (!chunk->Access().ok()) return absl::InternalError("access");
        std::vector<float> want(5);
        const float in[5] = {3, 6, 9, 12, 1};
        for (int k = 0; k < 5; ++k) {
          want[k] =
              BFloat16BitsToFloat(FloatToBFloat16Bits(in[k] * (1.0f / 3)));
        }
        EXPECT_EQ(want[4], 0.333984375f);  // bf16(1/3), not 1/3.
        EXPECT_THAT(*v[1].ToFloats(), ElementsAreArray(want));
        EXPECT_THAT(*v[0].ToFloats(), ElementsAre(1, 2, 3));
        EXPECT_THAT(*v[2].ToFloats(), ElementsAre(9, 10));
        // Materialised: the whole tensor, kept by Release.
        EXPECT_TRUE(chunk
                        ->WriteTensorScaled(
                            0, *Tensor::FromFloats({2, 4, 8}, {3}), -0.5f)
                        .ok());
        EXPECT_THAT(*v[0].ToFloats(), ElementsAre(-1, -2, -4));
        if (!chunk->Release().ok()) return absl::InternalError("release");
        if (!chunk->Access().ok()) return absl::InternalError("access");
        EXPECT_THAT(*v[0].ToFloats(), ElementsAre(-1, -2, -4));
        return chunk->Release();
      })));
}

TEST(Chunk, WriteTensorScaledRefusesWhatItCannotWrite) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(1, [](comm::ProcessGroup& g) -> absl::Status {
        std::unique_ptr<Chunk> chunk = *Chunk::Create(
            Options(ChunkLayout::kReplicated, 10, DType::kF16), &g);
        AppendAbc(*chunk);
        if (!chunk->Close().ok()) return absl::InternalError("close");
        // The values must be f32, whatever the chunk holds.
        const absl::Status f16 = chunk->WriteTensorScaled(
            0, *Tensor::FromFloats({1, 2, 3}, {3}, DType::kF16), 1.0f);
        EXPECT_EQ(f16.code(), absl::StatusCode::kInvalidArgument);
        EXPECT_THAT(std::string(f16.message()), HasSubstr("tensor 'a'"));
        EXPECT_EQ(
            chunk->WriteTensorScaled(0, *Tensor::FromFloats({1, 2}, {2}), 1.0f)
                .code(),
            absl::StatusCode::kInvalidArgument);
        const absl::Status index =
            chunk->WriteTensorScaled(3, *Tensor::FromFloats({1}, {1}), 1.0f);
        EXPECT_EQ(index.code(), absl::StatusCode::kInvalidArgument);
        EXPECT_THAT(std::string(index.message()), HasSubstr("no tensor #3"));
        return absl::OkStatus();
      })));
}

TEST(Chunk, MaterialiseZerosIssuesNoCollective) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(2, [](comm::ProcessGroup& g) -> absl::Status {
        std::unique_ptr<Chunk> chunk =
            *Chunk::Create(Options(ChunkLayout::kSharded, 10), &g);
        std::vector<Tensor> v = AppendAbc(*chunk);
        CZ_RETURN_IF_ERROR(chunk->Close());
        // Only rank 1 materialises: with a collective this would time out.
        if (g.rank() == 1) {
          CZ_RETURN_IF_ERROR(chunk->MaterialiseZeros());
          EXPECT_THAT(*v[1].ToFloats(), ElementsAre(0, 0, 0, 0, 0));
          EXPECT_FALSE(chunk->is_accessed());
          CZ_RETURN_IF_ERROR(chunk->MaterialiseZeros());  // No-op.
        }
        return absl::OkStatus();
      })));
}

TEST(Chunk, HasInfOrNanLooksAtThisRanksPayload) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(2, [](comm::ProcessGroup& g) -> absl::Status {
        std::unique_ptr<Chunk> chunk =
            *Chunk::Create(Options(ChunkLayout::kSharded, 10, DType::kF16), &g);
        std::vector<Tensor> v = AppendAbc(*chunk);
        EXPECT_FALSE(*chunk->HasInfOrNan());
        // +inf in c, element 9: in rank 1's shard only.
        Tensor c = *Tensor::FromFloats({9, 10}, {2, 1}, DType::kF16);
        c.data<uint16_t>()[1] = 0x7c00;
        if (!chunk->CopyTensorToChunkSlice(2, c).ok()) {
          return absl::InternalError("copy");
        }
        EXPECT_EQ(*chunk->HasInfOrNan(), g.rank() == 1);
        if (!chunk->Close().ok()) return absl::InternalError("close");
        EXPECT_EQ(*chunk->HasInfOrNan(), g.rank() == 1);
        // Materialised, every rank sees the whole chunk.
        if (!chunk->Access().ok()) return absl::InternalError("access");
        EXPECT_TRUE(*chunk->HasInfOrNan());
        return absl::OkStatus();
      })));
}

// A Work that expects exactly one wait: on the compute stream, or on the
// host.
std::unique_ptr<comm::Work> ExpectWait(bool on_stream,
                                       absl::Status status = {}) {
  auto work = std::make_unique<StrictMock<MockWork>>();
  if (on_stream) {
    EXPECT_CALL(*work, DoWaitOnStream(kComputeStream)).WillOnce(Return(status));
  } else {
    EXPECT_CALL(*work, DoWait(absl::InfiniteFuture())).WillOnce(Return(status));
  }
  return work;
}

// A chunk that computes and rests on one device other than the CPU leaves
// the waiting for its all-gather and reduce-scatter to that device's
// compute stream; the host waits where it reads the result itself.
TEST(Chunk, ComputeWaitsForCollectivesOnTheStreamWhereThePayloadStays) {
  struct Case {
    Device device;
    std::optional<Device> rest;
    bool on_stream;
  };
  for (const Case& c :
       {Case{kSim, std::nullopt, true}, Case{kSim, Device::Cpu(), false},
        Case{Device::Cpu(), std::nullopt, false}}) {
    SCOPED_TRACE(c.device.ToString() + (c.rest ? " resting on cpu" : ""));
    NiceMock<MockProcessGroup> group(/*rank=*/0, /*size=*/2);
    ChunkOptions o = Options(ChunkLayout::kSharded, 8);
    o.device = c.device;
    o.rest_device = c.rest;
    std::unique_ptr<Chunk> chunk = *Chunk::Create(o, &group);
    ASSERT_TRUE(chunk->Append("w", *Tensor::FromFloats({1, 2}, {2})).ok());
    ASSERT_TRUE(chunk->Close().ok());
    EXPECT_EQ(chunk->ComputeWaitsOnStream(), c.on_stream);
    {
      InSequence in_order;
      EXPECT_CALL(group, DoAllGather(_, _, _)).WillOnce([&](auto&&...) {
        return ExpectWait(c.on_stream);
      });
      EXPECT_CALL(group, DoReduceScatter(_, _, _)).WillOnce([&](auto&&...) {
        return ExpectWait(c.on_stream);
      });
    }
    ASSERT_TRUE(chunk->Access().ok());
    ASSERT_TRUE(chunk->SetTensorState(0, TensorState::kCompute).ok());
    ASSERT_TRUE(chunk->SetTensorState(0, TensorState::kReadyForReduce).ok());
    ASSERT_TRUE(chunk->Reduce().ok());
    EXPECT_FALSE(chunk->is_materialised());
    EXPECT_EQ(States(*chunk), std::vector<TensorState>{TensorState::kFree});
  }
}

// A collective whose failure is already known when the stream is asked to
// wait fails the access, naming the chunk, and leaves the chunk accessed
// (as a failed host wait does) so that the caller can release it.
TEST(Chunk, AStreamWaitReportsAFailureItAlreadyKnows) {
  NiceMock<MockProcessGroup> group(/*rank=*/1, /*size=*/2);
  ChunkOptions o = Options(ChunkLayout::kSharded, 8);
  o.device = kSim;
  std::unique_ptr<Chunk> chunk = *Chunk::Create(o, &group);
  ASSERT_TRUE(chunk->Close().ok());
  EXPECT_CALL(group, DoAllGather(_, _, _)).WillOnce([](auto&&...) {
    return ExpectWait(/*on_stream=*/true,
                      absl::AbortedError("NCCL communicator aborted"));
  });
  const absl::Status status = chunk->Access();
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(status.message(), HasSubstr("accessing chunk fp16_param#3"));
  EXPECT_TRUE(chunk->is_accessed());
}

// Materialising a chunk again must not reach the system allocator: the
// payload blocks come back from the cache.
TEST(Chunk, SteadyStateAccessReleaseReusesMemory) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(3, [](comm::ProcessGroup& g) -> absl::Status {
        RankMemory mem;
        ChunkOptions o = Options(ChunkLayout::kSharded, 1 << 12, DType::kF16);
        o.storage = mem.options();
        std::unique_ptr<Chunk> chunk = *Chunk::Create(o, &g);
        chunk->Append("w", *Tensor::Zeros({1000}, DType::kF16)).IgnoreError();
        if (!chunk->Close().ok()) return absl::InternalError("close");
        if (!chunk->Access().ok() || !chunk->Release().ok()) {
          return absl::InternalError("warm-up");
        }
        const int64_t system_calls = mem.cpu_count.allocations();
        for (int step = 0; step < 20; ++step) {
          if (!chunk->Access().ok() || !chunk->Release().ok()) {
            return absl::InternalError("step");
          }
        }
        EXPECT_EQ(mem.cpu_count.allocations(), system_calls);
        // Every access after the warm-up reuses the block (building never
        // allocated a full buffer, so the warm-up itself was a miss).
        EXPECT_EQ(mem.cpu_cache.stats().hits, 20);
        return absl::OkStatus();
      })));
}

}  // namespace
}  // namespace chunkzero
