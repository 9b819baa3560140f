#include "chunk/chunk_manager.h"

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "chunk/chunk_packing.h"
#include "comm/recording_process_group.h"
#include "comm/testing/spawn_ranks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

using ::chunkzero::comm_testing::AllRanksOk;
using ::chunkzero::comm_testing::SpawnRanks;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr ChunkLayout kLayouts[] = {ChunkLayout::kReplicated,
                                    ChunkLayout::kOwner, ChunkLayout::kSharded};

// Five small tensors: a[4], b[6], c[3], d[5], e[2]. Values are identical on
// every rank: tensor t, element k holds 10 * t + k.
const std::vector<std::pair<std::string, int64_t>>& Tensors() {
  static const auto* tensors = new std::vector<std::pair<std::string, int64_t>>{
      {"a", 4}, {"b", 6}, {"c", 3}, {"d", 5}, {"e", 2}};
  return *tensors;
}

Tensor Values(int t, DType dtype = DType::kF32) {
  std::vector<float> v(Tensors()[t].second);
  for (size_t k = 0; k < v.size(); ++k) v[k] = 10.0f * t + k;
  return *Tensor::FromFloats(v, {static_cast<int64_t>(v.size())}, dtype);
}

absl::Status RegisterAll(ChunkManager& m, const std::string& group = "p") {
  CZ_RETURN_IF_ERROR(m.CreateGroup(group, DType::kF32, MemoryCategory::kParam));
  for (int t = 0; t < 5; ++t) {
    absl::StatusOr<Tensor> v =
        m.AppendTensor(group, Tensors()[t].first, Values(t));
    if (!v.ok()) return v.status();
  }
  return m.CloseGroup(group);
}

ChunkManagerOptions Opts(ChunkLayout layout, std::optional<int64_t> size) {
  ChunkManagerOptions o;
  o.layout = layout;
  o.chunk_size = size;
  o.comm_timeout = absl::Seconds(20);
  return o;
}

TEST(ChunkManagerOptions, ParsesTextProto) {
  absl::StatusOr<ChunkManagerOptions> o = ParseChunkManagerOptions(
      "chunk_size: 4096 layout: OWNER device: 'sim:1' comm_timeout_ms: 1500");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->chunk_size, 4096);
  EXPECT_EQ(o->layout, ChunkLayout::kOwner);
  EXPECT_EQ(o->device, Device::Simulated(1));
  EXPECT_EQ(o->comm_timeout, absl::Milliseconds(1500));

  absl::StatusOr<ChunkManagerOptions> d = ParseChunkManagerOptions("");
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->chunk_size.has_value());
  EXPECT_EQ(d->layout, ChunkLayout::kSharded);
  EXPECT_EQ(d->device, Device::Cpu());
  EXPECT_EQ(d->comm_timeout, comm::kDefaultCollectiveTimeout);

  EXPECT_FALSE(ParseChunkManagerOptions("chunk_size: 0")->chunk_size);
  EXPECT_EQ(ParseChunkManagerOptions("chunk_size: -1").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseChunkManagerOptions("device: 'gpu'").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      std::string(ParseChunkManagerOptions("colour: 3").status().message()),
      HasSubstr("cannot parse ChunkManagerConfig"));
}

// Which chunk each tensor lands in and which rank owns it.
TEST(ChunkManager, PacksInOrderAndAssignsOwners) {
  struct Case {
    std::optional<int64_t> chunk_size;
    int world;
    std::vector<int> chunk_of;  // per tensor
    std::vector<int> owner_of;  // per tensor (owner layout)
  };
  const Case cases[] = {
      // a b | c d e with chunks of 10; owners round-robin.
      {10, 1, {0, 0, 1, 1, 1}, {0, 0, 0, 0, 0}},
      {10, 2, {0, 0, 1, 1, 1}, {0, 0, 1, 1, 1}},
      {10, 3, {0, 0, 1, 1, 1}, {0, 0, 1, 1, 1}},
      // a | b c | d e with chunks of 9.
      {9, 3, {0, 1, 1, 2, 2}, {0, 1, 1, 2, 2}},
      {9, 2, {0, 1, 1, 2, 2}, {0, 1, 1, 0, 0}},
      // Chunking off: one chunk each, least-loaded owner (lowest on a tie):
      // loads 4,6 -> c to 0 (7) -> d to 1 (11) -> e to 0.
      {std::nullopt, 2, {0, 1, 2, 3, 4}, {0, 1, 0, 1, 0}},
      // loads 4,6,3 -> d to 2 (8) -> e to 0 (6).
      {std::nullopt, 3, {0, 1, 2, 3, 4}, {0, 1, 2, 2, 0}},
      {std::nullopt, 4, {0, 1, 2, 3, 4}, {0, 1, 2, 3, 2}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "chunk size " << c.chunk_size.value_or(0)
                                    << " world " << c.world);
    EXPECT_TRUE(AllRanksOk(
        SpawnRanks(c.world, [&](comm::ProcessGroup& g) -> absl::Status {
          ChunkManager m(&g, Opts(ChunkLayout::kOwner, c.chunk_size));
          CZ_RETURN_IF_ERROR(RegisterAll(m));
          std::vector<int> chunk_of, owner_of;
          for (const auto& [name, size] : Tensors()) {
            TensorLocation where = *m.Locate("p", name);
            int index = 0;
            while (m.chunk("p", index) != where.chunk) ++index;
            chunk_of.push_back(index);
            owner_of.push_back(where.chunk->owner());
          }
          EXPECT_EQ(chunk_of, c.chunk_of);
          EXPECT_EQ(owner_of, c.owner_of);
          return absl::OkStatus();
        })));
  }
}

// The table of the original: after close, access and release, which rank
// holds how many elements of each tensor, for every layout, chunk size and
// world size. Replicated: everyone all of it. Owner: the owner all of it,
// others none (all of it while accessed). Sharded: the part in the rank's
// shard at rest, all of it while accessed.
// The manager packs by chunk_packing.h's rule in every layout. The sharded
// layout pads a chunk of 9 to 10 at world 2, and a and b (4 + 6) would fit
// in the padding; packing never uses it, so b opens chunk 1 everywhere.
TEST(ChunkManager, PlacesTensorsExactlyAsPlanChunks) {
  std::vector<int64_t> sizes;
  for (const auto& [name, size] : Tensors()) sizes.push_back(size);
  for (ChunkLayout layout : kLayouts) {
    for (std::optional<int64_t> chunk_size :
         {std::optional<int64_t>(9), {10}, {std::nullopt}}) {
      for (int world : {1, 2, 3}) {
        SCOPED_TRACE(testing::Message()
                     << layout << " chunk size " << chunk_size.value_or(0)
                     << " world " << world);
        const absl::StatusOr<ChunkPlan> plan = PlanChunks(sizes, chunk_size);
        ASSERT_TRUE(plan.ok()) << plan.status();
        EXPECT_TRUE(AllRanksOk(
            SpawnRanks(world, [&](comm::ProcessGroup& g) -> absl::Status {
              ChunkManager m(&g, Opts(layout, chunk_size));
              CZ_RETURN_IF_ERROR(RegisterAll(m));
              EXPECT_EQ(m.num_chunks("p"),
                        static_cast<int>(plan->capacities.size()));
              for (size_t t = 0; t < sizes.size(); ++t) {
                const TensorLocation where = *m.Locate("p", Tensors()[t].first);
                EXPECT_EQ(where.chunk, m.chunk("p", plan->tensors[t].chunk))
                    << Tensors()[t].first;
                EXPECT_EQ(where.chunk->tensor(where.index).offset,
                          plan->tensors[t].offset)
                    << Tensors()[t].first;
              }
              return absl::OkStatus();
            })));
      }
    }
  }
}

TEST(ChunkManager, WhoHoldsWhatAfterCloseAccessRelease) {
  for (ChunkLayout layout : kLayouts) {
    for (std::optional<int64_t> size :
         {std::optional<int64_t>(10), std::optional<int64_t>()}) {
      for (int world : {1, 2, 3, 4}) {
        SCOPED_TRACE(testing::Message()
                     << layout << " chunk size " << size.value_or(0)
                     << " world " << world);
        EXPECT_TRUE(AllRanksOk(
            SpawnRanks(world, [&](comm::ProcessGroup& g) -> absl::Status {
              MemoryTracker tracker;
              ChunkManager m(&g, Opts(layout, size), &tracker);
              CZ_RETURN_IF_ERROR(RegisterAll(m));
              auto held = [&](bool accessed) {
                std::vector<int64_t> elements;
                for (const auto& [name, n] : Tensors()) {
                  TensorLocation w = *m.Locate("p", name);
                  const Chunk& c = *w.chunk;
                  if (accessed || layout == ChunkLayout::kReplicated ||
                      (layout == ChunkLayout::kOwner &&
                       g.rank() == c.owner())) {
                    elements.push_back(n);
                  } else if (layout == ChunkLayout::kOwner) {
                    elements.push_back(0);
                  } else {
                    const ChunkTensor& t = c.tensor(w.index);
                    elements.push_back(std::max<int64_t>(
                        0, std::min(t.offset + t.numel, c.shard_end()) -
                               std::max(t.offset, c.shard_begin())));
                  }
                }
                return elements;
              };
              auto actual = [&](bool accessed) {
                std::vector<int64_t> elements;
                for (const auto& [name, n] : Tensors()) {
                  TensorLocation w = *m.Locate("p", name);
                  elements.push_back(
                      w.chunk->TensorView(w.index).is_materialized()
                          ? n
                          : w.chunk->ShardView(w.index).numel());
                }
                return elements;
              };
              EXPECT_EQ(actual(false), held(false))
                  << "after close, rank " << g.rank();
              EXPECT_EQ(tracker.CurrentTotal(Device::Cpu()),
                        m.PayloadBytes(Device::Cpu()));
              for (Chunk* c : m.AllChunks())
                CZ_RETURN_IF_ERROR(m.AccessChunk(c));
              EXPECT_EQ(actual(true), held(true))
                  << "after access, rank " << g.rank();
              for (int t = 0; t < 5; ++t) {
                TensorLocation w = *m.Locate("p", Tensors()[t].first);
                EXPECT_EQ(*w.chunk->TensorView(w.index).ToFloats(),
                          *Values(t).ToFloats());
              }
              EXPECT_EQ(tracker.CurrentTotal(Device::Cpu()),
                        m.PayloadBytes(Device::Cpu()));
              for (Chunk* c : m.AllChunks())
                CZ_RETURN_IF_ERROR(m.ReleaseChunk(c));
              EXPECT_EQ(actual(false), held(false))
                  << "after release, rank " << g.rank();
              EXPECT_TRUE(m.accessed_chunks().empty());
              return absl::OkStatus();
            })));
      }
    }
  }
}

// Payload bytes are exact after append, access, release, reduce and move.
TEST(ChunkManager, AccountingIsExactAtEveryStep) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(2, [](comm::ProcessGroup& g) -> absl::Status {
        MemoryTracker tracker;
        ChunkManager m(&g, Opts(ChunkLayout::kSharded, 10), &tracker);
        const Device cpu = Device::Cpu();
        auto param = [&](Device d) {
          return tracker.Current(d, MemoryCategory::kParam);
        };
        CZ_RETURN_IF_ERROR(
            m.CreateGroup("p", DType::kF32, MemoryCategory::kParam));
        CZ_RETURN_IF_ERROR(m.AppendTensor("p", "a", Values(0)).status());
        // One open chunk of 10 f32: building it holds only the shard (5).
        EXPECT_EQ(param(cpu), 20);
        CZ_RETURN_IF_ERROR(m.AppendTensor("p", "b", Values(1)).status());
        CZ_RETURN_IF_ERROR(m.AppendTensor("p", "c", Values(2)).status());
        // c opened chunk 1: two shards of 5 f32, never a full chunk.
        EXPECT_EQ(param(cpu), 20 + 20);
        EXPECT_EQ(tracker.Peak(cpu, MemoryCategory::kParam), 20 + 20);
        CZ_RETURN_IF_ERROR(m.CloseGroup("p"));
        EXPECT_EQ(param(cpu), 20 + 20);
        Chunk* c0 = m.chunk("p", 0);
        CZ_RETURN_IF_ERROR(m.AccessChunk(c0));
        EXPECT_EQ(param(cpu), 20 + 40 + 20);
        CZ_RETURN_IF_ERROR(m.SetTensorState("p", "a", TensorState::kCompute));
        CZ_RETURN_IF_ERROR(
            m.SetTensorState("p", "a", TensorState::kReadyForReduce));
        CZ_RETURN_IF_ERROR(m.SetTensorState("p", "b", TensorState::kCompute));
        CZ_RETURN_IF_ERROR(
            m.SetTensorState("p", "b", TensorState::kReadyForReduce));
        CZ_RETURN_IF_ERROR(m.ReduceChunk(c0));
        EXPECT_EQ(param(cpu), 20 + 20);
        CZ_RETURN_IF_ERROR(m.MoveChunk(c0, Device::Simulated(0)));
        EXPECT_EQ(param(cpu), 20);
        EXPECT_EQ(param(Device::Simulated(0)), 20);
        CZ_RETURN_IF_ERROR(m.AccessChunk(c0));
        EXPECT_EQ(param(Device::Simulated(0)), 60);
        EXPECT_EQ(m.PayloadBytes(Device::Simulated(0)), 60);
        CZ_RETURN_IF_ERROR(m.ReleaseChunk(c0));
        EXPECT_EQ(param(Device::Simulated(0)), 20);
        EXPECT_EQ(tracker.Peak(cpu, MemoryCategory::kParam), 80);
        return absl::OkStatus();
      })));
}

// rest_device: the groups without a device of their own compute on the
// manager's device and rest on rest_device; a group given a device lives
// there whole. PayloadBytes counts each storage where it is.
TEST(ChunkManager, GroupsRestWhereTheManagerSays) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(2, [](comm::ProcessGroup& g) -> absl::Status {
        MemoryTracker tracker;
        ChunkManagerOptions o = Opts(ChunkLayout::kSharded, 10);
        const Device cpu = Device::Cpu(), sim = Device::Simulated(0);
        o.device = sim;
        o.rest_device = cpu;
        ChunkManager m(&g, o, &tracker);
        CZ_RETURN_IF_ERROR(
            m.CreateGroup("p", DType::kF32, MemoryCategory::kParam));
        CZ_RETURN_IF_ERROR(m.CreatePairedGroup("masters", "p", DType::kF32,
                                               MemoryCategory::kMaster, cpu));
        for (int t = 0; t < 3; ++t) {
          CZ_RETURN_IF_ERROR(
              m.AppendTensor("p", absl::StrCat("t", t), Values(t)).status());
        }
        CZ_RETURN_IF_ERROR(m.CloseGroup("p"));
        Chunk* c0 = m.chunk("p", 0);
        EXPECT_EQ(c0->device(), sim);
        EXPECT_EQ(c0->rest_device(), cpu);
        // Two closed chunks of 10 f32: a shard of 5 each, on the host.
        EXPECT_EQ(m.PayloadBytes(cpu), 40);
        EXPECT_EQ(m.PayloadBytes(sim), 0);
        CZ_RETURN_IF_ERROR(m.AccessChunk(c0));
        EXPECT_EQ(m.PayloadBytes(sim), 40);
        EXPECT_EQ(tracker.Current(sim, MemoryCategory::kParam), 40);
        CZ_RETURN_IF_ERROR(m.ReleaseChunk(c0));
        EXPECT_EQ(m.PayloadBytes(sim), 0);
        for (int t = 0; t < 3; ++t) {
          CZ_RETURN_IF_ERROR(
              m.AppendTensor("masters", absl::StrCat("t", t), Values(t))
                  .status());
        }
        CZ_RETURN_IF_ERROR(m.CloseGroup("masters"));
        Chunk* master = m.chunk("masters", 0);
        EXPECT_EQ(master->device(), cpu);
        EXPECT_EQ(master->rest_device(), cpu);
        return absl::OkStatus();
      })));
}

TEST(ChunkManager, PairedGroupMirrorsOffsetsAndOwners) {
  for (ChunkLayout layout : kLayouts) {
    SCOPED_TRACE(ChunkLayoutName(layout));
    EXPECT_TRUE(
        AllRanksOk(SpawnRanks(3, [&](comm::ProcessGroup& g) -> absl::Status {
          MemoryTracker tracker;
          ChunkManager m(&g, Opts(layout, 9), &tracker);
          CZ_RETURN_IF_ERROR(
              m.CreateGroup("fp16_param", DType::kF16, MemoryCategory::kParam));
          CZ_RETURN_IF_ERROR(m.CreatePairedGroup("fp32_param", "fp16_param",
                                                 DType::kF32,
                                                 MemoryCategory::kMaster));
          for (int t = 0; t < 5; ++t) {
            CZ_RETURN_IF_ERROR(m.AppendTensor("fp16_param", Tensors()[t].first,
                                              Values(t, DType::kF16))
                                   .status());
          }
          // Out of order: b before a.
          EXPECT_THAT(std::string(m.AppendTensor("fp32_param", "b", Values(1))
                                      .status()
                                      .message()),
                      HasSubstr("expects tensor 'a' next"));
          for (int t = 0; t < 5; ++t) {
            CZ_RETURN_IF_ERROR(
                m.AppendTensor("fp32_param", Tensors()[t].first, Values(t))
                    .status());
          }
          CZ_RETURN_IF_ERROR(m.CloseGroup("fp16_param"));
          CZ_RETURN_IF_ERROR(m.CloseGroup("fp32_param"));
          EXPECT_EQ(m.num_chunks("fp32_param"), m.num_chunks("fp16_param"));
          for (const auto& [name, n] : Tensors()) {
            TensorLocation h = *m.Locate("fp16_param", name);
            TensorLocation f = *m.Locate("fp32_param", name);
            EXPECT_EQ(h.chunk->tensor(h.index).offset,
                      f.chunk->tensor(f.index).offset);
            EXPECT_EQ(h.chunk->owner(), f.chunk->owner());
            EXPECT_EQ(h.chunk->capacity(), f.chunk->capacity());
            EXPECT_EQ(h.chunk->ShardView(h.index).numel(),
                      f.chunk->ShardView(f.index).numel());
          }
          // Masters: 4 bytes per element of this rank's payload.
          EXPECT_EQ(tracker.Current(Device::Cpu(), MemoryCategory::kMaster),
                    2 * tracker.Current(Device::Cpu(), MemoryCategory::kParam));
          return absl::OkStatus();
        })));
  }
}

// ZeRO-Offload: the masters' group lives in host memory while its source
// lives on the device; their payloads are accounted where they are.
TEST(ChunkManager, PairedGroupOnAnotherDevice) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(2, [&](comm::ProcessGroup& g) -> absl::Status {
        MemoryTracker tracker;
        ChunkManagerOptions options = Opts(ChunkLayout::kSharded, 8);
        options.device = Device::Simulated(0);
        ChunkManager m(&g, options, &tracker);
        CZ_RETURN_IF_ERROR(
            m.CreateGroup("fp16_param", DType::kF16, MemoryCategory::kParam));
        CZ_RETURN_IF_ERROR(
            m.CreatePairedGroup("fp32_param", "fp16_param", DType::kF32,
                                MemoryCategory::kMaster, Device::Cpu()));
        for (const char* group : {"fp16_param", "fp32_param"}) {
          const DType dtype =
              std::string(group) == "fp16_param" ? DType::kF16 : DType::kF32;
          CZ_RETURN_IF_ERROR(
              m.AppendTensor(group, "w", Values(0, dtype)).status());
          CZ_RETURN_IF_ERROR(m.CloseGroup(group));
        }
        EXPECT_EQ(m.chunk("fp16_param", 0)->device(), Device::Simulated(0));
        EXPECT_EQ(m.chunk("fp32_param", 0)->device(), Device::Cpu());
        // Chunks of 8 elements, 4 per rank.
        EXPECT_EQ(tracker.Current(Device::Simulated(0), MemoryCategory::kParam),
                  4 * 2);
        EXPECT_EQ(tracker.Peak(Device::Simulated(0), MemoryCategory::kMaster),
                  0);
        EXPECT_EQ(tracker.Current(Device::Cpu(), MemoryCategory::kMaster),
                  4 * 4);
        return absl::OkStatus();
      })));
}

// A group spilled as it completes holds one chunk in memory at most while
// it fills: each full chunk goes to disk before the next is allocated, the
// last at CloseGroup; chunks complete when asked go at once. Values
// survive; an unknown group or no disk is refused.
TEST(ChunkManager, SpillWhenCompleteKeepsOneChunkInMemory) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/spill_when_complete");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(1, [&](comm::ProcessGroup& g) -> absl::Status {
        MemoryTracker tracker;
        CZ_ASSIGN_OR_RETURN(std::unique_ptr<ChunkDiskTier> disk,
                            ChunkDiskTier::Create(dir));
        ChunkManager m(&g, Opts(ChunkLayout::kReplicated, 1024), &tracker);
        auto filled = [](int t) {
          std::vector<float> v(1024, 1.0f + t);
          return *Tensor::FromFloats(v, {1024});
        };
        CZ_RETURN_IF_ERROR(
            m.CreateGroup("m", DType::kF32, MemoryCategory::kMaster));
        CZ_RETURN_IF_ERROR(m.SpillWhenComplete("m", disk.get()));
        for (int t = 0; t < 3; ++t) {
          CZ_RETURN_IF_ERROR(
              m.AppendTensor("m", absl::StrCat("t", t), filled(t)).status());
          EXPECT_EQ(tracker.Current(Device::Cpu(), MemoryCategory::kMaster),
                    4096);
        }
        CZ_RETURN_IF_ERROR(m.CloseGroup("m"));
        EXPECT_EQ(tracker.Peak(Device::Cpu(), MemoryCategory::kMaster), 4096);
        EXPECT_EQ(tracker.Current(Device::Cpu(), MemoryCategory::kMaster), 0);
        EXPECT_EQ(disk->stats().bytes_written, 3 * 4096);
        for (int t = 0; t < 3; ++t) {
          EXPECT_TRUE(m.chunk("m", t)->rests_on_disk());
          std::vector<float> back(1024);
          CZ_RETURN_IF_ERROR(m.chunk("m", t)->ReadRestPayload(back.data()));
          EXPECT_EQ(back, std::vector<float>(1024, 1.0f + t)) << t;
        }

        // Asked late: the complete chunk goes now, the one filling stays.
        CZ_RETURN_IF_ERROR(
            m.CreateGroup("n", DType::kF32, MemoryCategory::kMaster));
        for (int t = 0; t < 2; ++t) {
          CZ_RETURN_IF_ERROR(
              m.AppendTensor("n", absl::StrCat("t", t), filled(t)).status());
        }
        CZ_RETURN_IF_ERROR(m.SpillWhenComplete("n", disk.get()));
        EXPECT_TRUE(m.chunk("n", 0)->rests_on_disk());
        EXPECT_FALSE(m.chunk("n", 1)->rests_on_disk());
        EXPECT_EQ(tracker.Current(Device::Cpu(), MemoryCategory::kMaster),
                  4096);

        EXPECT_EQ(m.SpillWhenComplete("nope", disk.get()).code(),
                  absl::StatusCode::kNotFound);
        EXPECT_THAT(m.SpillWhenComplete("n", nullptr).message(),
                    HasSubstr("spilling chunk group 'n' to no disk tier"));
        CZ_RETURN_IF_ERROR(m.RemoveGroup("n"));
        CZ_RETURN_IF_ERROR(m.RemoveGroup("m"));
        return absl::OkStatus();
      })));
}

// RenameGroup renames the group, its chunks (the tags of their collectives)
// and the pairing; DropChunkPayload frees a chunk for good, accessed or not.
TEST(ChunkManager, RenameGroupAndDropChunkPayload) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(2, [](comm::ProcessGroup& g) -> absl::Status {
        MemoryTracker tracker;
        comm::RecordingProcessGroup recorder(g);
        ChunkManager m(&recorder, Opts(ChunkLayout::kSharded, 10), &tracker);
        CZ_RETURN_IF_ERROR(
            m.CreateGroup("p.decl", DType::kF32, MemoryCategory::kParam));
        CZ_RETURN_IF_ERROR(m.CreatePairedGroup("m.decl", "p.decl", DType::kF32,
                                               MemoryCategory::kMaster));
        CZ_RETURN_IF_ERROR(
            m.CreateGroup("taken", DType::kF32, MemoryCategory::kParam));
        EXPECT_EQ(m.RenameGroup("p.decl", "taken").message(),
                  "cannot rename chunk group 'p.decl' to 'taken': it exists");
        EXPECT_EQ(m.RenameGroup("nope", "x").code(),
                  absl::StatusCode::kNotFound);
        CZ_RETURN_IF_ERROR(m.RenameGroup("p.decl", "p"));
        // The paired group follows the rename of its source.
        CZ_RETURN_IF_ERROR(m.AppendTensor("p", "a", Values(0)).status());
        CZ_RETURN_IF_ERROR(m.AppendTensor("m.decl", "a", Values(0)).status());
        CZ_RETURN_IF_ERROR(m.CloseGroup("p"));
        CZ_RETURN_IF_ERROR(m.CloseGroup("m.decl"));
        EXPECT_EQ(m.chunk("p", 0)->name(), "p#0");
        EXPECT_EQ(m.RemoveGroup("p").code(),
                  absl::StatusCode::kFailedPrecondition);
        recorder.Reset();
        CZ_RETURN_IF_ERROR(m.AccessTensor("p", "a"));
        EXPECT_EQ(recorder.Snapshot().calls.at(0).tag, "p#0");
        EXPECT_EQ(m.accessed_chunks().size(), 1u);
        EXPECT_EQ(tracker.Current(Device::Cpu(), MemoryCategory::kParam),
                  20 + 40);
        m.DropChunkPayload(m.chunk("p", 0));
        EXPECT_TRUE(m.accessed_chunks().empty());
        EXPECT_EQ(tracker.Current(Device::Cpu(), MemoryCategory::kParam), 0);
        EXPECT_EQ(recorder.Snapshot().calls.size(), 1u);  // No collective.
        return absl::OkStatus();
      })));
}

TEST(ChunkManager, Errors) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(1, [](comm::ProcessGroup& g) -> absl::Status {
        ChunkManager m(&g, Opts(ChunkLayout::kSharded, 8));
        EXPECT_EQ(m.AppendTensor("p", "a", Values(0)).status().code(),
                  absl::StatusCode::kNotFound);
        CZ_RETURN_IF_ERROR(
            m.CreateGroup("p", DType::kF32, MemoryCategory::kParam));
        EXPECT_EQ(
            m.CreateGroup("p", DType::kF32, MemoryCategory::kParam).code(),
            absl::StatusCode::kAlreadyExists);
        EXPECT_EQ(m.CreatePairedGroup("q", "nope", DType::kF32,
                                      MemoryCategory::kMaster)
                      .code(),
                  absl::StatusCode::kNotFound);
        CZ_RETURN_IF_ERROR(m.AppendTensor("p", "a", Values(0)).status());
        EXPECT_EQ(m.AppendTensor("p", "a", Values(0)).status().code(),
                  absl::StatusCode::kAlreadyExists);
        EXPECT_EQ(
            m.AppendTensor("p", "h", Values(0, DType::kF16)).status().message(),
            "tensor 'h' is f16 but group 'p' holds f32");
        absl::Status big =
            m.AppendTensor("p", "wte", *Tensor::Zeros({3, 4}, DType::kF32))
                .status();
        EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument);
        EXPECT_THAT(
            std::string(big.message()),
            HasSubstr("tensor 'wte' [3, 4] has 12 elements, more than the "
                      "chunk size 8 of group 'p'; use a chunk size of at "
                      "least 12"));
        EXPECT_EQ(m.Locate("p", "zz").status().message(),
                  "no tensor 'zz' in chunk group 'p'");
        EXPECT_EQ(
            m.SetTensorState("p", "a", TensorState::kReadyForReduce).code(),
            absl::StatusCode::kFailedPrecondition);
        CZ_RETURN_IF_ERROR(m.CloseGroup("p"));
        EXPECT_EQ(m.AppendTensor("p", "b", Values(1)).status().code(),
                  absl::StatusCode::kFailedPrecondition);
        return absl::OkStatus();
      })));
}

// Access is skipped only for chunks in the accessed set: the owner's
// tensors are HOLD before access, yet its first access still broadcasts.
TEST(ChunkManager, AccessedSetDecidesWhetherToBroadcast) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(2, [](comm::ProcessGroup& g) -> absl::Status {
        comm::RecordingProcessGroup recorder(g);
        ChunkManager m(&recorder, Opts(ChunkLayout::kOwner, 10));
        CZ_RETURN_IF_ERROR(RegisterAll(m));
        Chunk* c0 = m.chunk("p", 0);
        EXPECT_EQ(c0->tensor(0).state,
                  g.rank() == 0 ? TensorState::kHold : TensorState::kFree);
        CZ_RETURN_IF_ERROR(m.AccessChunk(c0));
        CZ_RETURN_IF_ERROR(m.AccessChunk(c0));
        CZ_RETURN_IF_ERROR(m.AccessTensor("p", "b"));  // Same chunk.
        EXPECT_THAT(m.accessed_chunks(), ElementsAre(c0));
        comm::RecordingSnapshot s = recorder.Snapshot();
        EXPECT_EQ(s.calls.size(), 1u);
        EXPECT_EQ(s.calls[0].kind, comm::CollectiveKind::kBroadcast);
        EXPECT_EQ(s.calls[0].count, 10u);
        CZ_RETURN_IF_ERROR(m.ReleaseChunk(c0));
        CZ_RETURN_IF_ERROR(m.AccessChunk(c0));
        EXPECT_EQ(recorder.Snapshot().calls.size(), 2u);
        return m.ReleaseChunk(c0);
      })));
}

TEST(ChunkManager, LazyReleaseKeepsWhatTheNextOpNeeds) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(2, [](comm::ProcessGroup& g) -> absl::Status {
        ChunkManager m(&g, Opts(ChunkLayout::kSharded, std::nullopt));
        CZ_RETURN_IF_ERROR(RegisterAll(m));  // Five chunks, one per tensor.
        std::vector<Chunk*> c = m.AllChunks();
        for (Chunk* chunk : c) CZ_RETURN_IF_ERROR(m.AccessChunk(chunk));
        CZ_RETURN_IF_ERROR(m.SetTensorState("p", "b", TensorState::kCompute));
        // b computes (cannot release), d is needed next (kept).
        absl::StatusOr<int> released = m.ReleaseAccessedExcept({c[3]});
        EXPECT_EQ(*released, 3);
        EXPECT_THAT(m.accessed_chunks(), ElementsAre(c[1], c[3]));
        EXPECT_FALSE(c[0]->is_materialised());
        EXPECT_TRUE(c[3]->is_materialised());
        EXPECT_EQ(m.AccessTensor("p", "nope").code(),
                  absl::StatusCode::kNotFound);
        CZ_RETURN_IF_ERROR(m.SetTensorState("p", "b", TensorState::kHold));
        EXPECT_EQ(*m.ReleaseAccessedExcept({}), 2);
        EXPECT_TRUE(m.accessed_chunks().empty());
        return absl::OkStatus();
      })));
}

TEST(ChunkManager, RemoveGroupFreesItsChunks) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(2, [](comm::ProcessGroup& g) -> absl::Status {
        MemoryTracker tracker;
        ChunkManager m(&g, Opts(ChunkLayout::kSharded, 10), &tracker);
        CZ_RETURN_IF_ERROR(
            m.CreateGroup("p", DType::kF32, MemoryCategory::kParam));
        CZ_RETURN_IF_ERROR(m.CreatePairedGroup("m", "p", DType::kF32,
                                               MemoryCategory::kMaster));
        CZ_ASSIGN_OR_RETURN(Tensor view, m.AppendTensor("p", "a", Values(0)));
        CZ_RETURN_IF_ERROR(m.AppendTensor("m", "a", Values(0)).status());
        CZ_RETURN_IF_ERROR(m.CloseGroup("p"));
        CZ_RETURN_IF_ERROR(m.CloseGroup("m"));
        CZ_RETURN_IF_ERROR(m.AccessTensor("p", "a"));
        EXPECT_EQ(m.RemoveGroup("p").message(),
                  "cannot remove chunk group 'p': group 'm' is paired to it");
        CZ_RETURN_IF_ERROR(m.RemoveGroup("m"));
        CZ_RETURN_IF_ERROR(m.RemoveGroup("p"));
        EXPECT_FALSE(view.is_materialized());
        EXPECT_TRUE(m.accessed_chunks().empty());
        EXPECT_EQ(tracker.CurrentTotal(Device::Cpu()), 0);
        EXPECT_EQ(m.num_chunks("p"), 0);
        EXPECT_EQ(m.RemoveGroup("p").code(), absl::StatusCode::kNotFound);
        // The name can be used again.
        return m.CreateGroup("p", DType::kF16, MemoryCategory::kParam);
      })));
}

TEST(ChunkManager, ViewsMayOutliveTheManager) {
  EXPECT_TRUE(
      AllRanksOk(SpawnRanks(2, [](comm::ProcessGroup& g) -> absl::Status {
        Tensor view;
        MemoryTracker tracker;
        {
          ChunkManager m(&g, Opts(ChunkLayout::kSharded, 10), &tracker);
          CZ_RETURN_IF_ERROR(
              m.CreateGroup("p", DType::kF32, MemoryCategory::kParam));
          CZ_ASSIGN_OR_RETURN(view, m.AppendTensor("p", "a", Values(0)));
          CZ_RETURN_IF_ERROR(m.CloseGroup("p"));
          CZ_RETURN_IF_ERROR(m.AccessTensor("p", "a"));
          EXPECT_TRUE(view.is_materialized());
        }
        EXPECT_FALSE(view.is_materialized());
        EXPECT_EQ(tracker.CurrentTotal(Device::Cpu()), 0);
        return absl::OkStatus();
      })));
}

// Random sequences of legal operations on random tensor sets keep the
// invariants: tracked bytes equal the sum of payloads; a FREE tensor has no
// payload here; a materialised chunk is identical on all ranks. Every rank
// draws the same sequence (same seed), so collectives match.
TEST(ChunkManager, RandomLegalSequencesKeepInvariants) {
  for (int seed = 1; seed <= 12; ++seed) {
    const ChunkLayout layout = kLayouts[seed % 3];
    const int world = 1 + seed % 4;
    SCOPED_TRACE(testing::Message()
                 << "seed " << seed << " " << layout << " world " << world);
    // Materialised chunks' bytes as seen by each rank, compared after.
    std::vector<std::map<int, std::vector<float>>> seen(world);
    EXPECT_TRUE(AllRanksOk(
        SpawnRanks(world, [&](comm::ProcessGroup& g) -> absl::Status {
          std::mt19937 rng(seed);
          MemoryTracker tracker;
          std::optional<int64_t> size;
          if (seed % 2 == 0) size = 16 + seed;
          ChunkManager m(&g, Opts(layout, size), &tracker);
          CZ_RETURN_IF_ERROR(
              m.CreateGroup("p", DType::kF32, MemoryCategory::kParam));
          const int num_tensors = 3 + rng() % 6;
          for (int t = 0; t < num_tensors; ++t) {
            const int64_t n = 1 + rng() % 16;
            std::vector<float> v(n);
            for (int64_t k = 0; k < n; ++k) v[k] = t * 100 + k;
            CZ_RETURN_IF_ERROR(m.AppendTensor("p", absl::StrCat("t", t),
                                              *Tensor::FromFloats(v, {n}))
                                   .status());
          }
          CZ_RETURN_IF_ERROR(m.CloseGroup("p"));
          std::vector<Chunk*> chunks = m.AllChunks();
          auto check = [&](int step) {
            EXPECT_EQ(tracker.CurrentTotal(Device::Cpu()) +
                          tracker.CurrentTotal(Device::Simulated(0)),
                      m.PayloadBytes(Device::Cpu()) +
                          m.PayloadBytes(Device::Simulated(0)))
                << "step " << step;
            for (Chunk* c : chunks) {
              for (int i = 0; i < c->num_tensors(); ++i) {
                if (c->tensor(i).state == TensorState::kFree) {
                  EXPECT_FALSE(c->TensorView(i).is_materialized())
                      << c->name() << " tensor " << i << " step " << step;
                }
              }
            }
          };
          for (int step = 0; step < 60; ++step) {
            Chunk* c = chunks[rng() % chunks.size()];
            switch (rng() % 5) {
              case 0:
                CZ_RETURN_IF_ERROR(m.AccessChunk(c));
                break;
              case 1:
                if (c->CanRelease()) CZ_RETURN_IF_ERROR(m.ReleaseChunk(c));
                break;
              case 2:  // A backward pass over the chunk: grads of 1, reduced.
                CZ_RETURN_IF_ERROR(m.AccessChunk(c));
                for (int i = 0; i < c->num_tensors(); ++i) {
                  CZ_RETURN_IF_ERROR(
                      c->SetTensorState(i, TensorState::kCompute));
                  CZ_RETURN_IF_ERROR(c->CopyTensorToChunkSlice(
                      i, *Tensor::FromFloats(
                             std::vector<float>(c->tensor(i).numel, 1.0f),
                             c->tensor(i).shape)));
                  CZ_RETURN_IF_ERROR(
                      c->SetTensorState(i, TensorState::kReadyForReduce));
                }
                CZ_RETURN_IF_ERROR(m.ReduceChunk(c));
                break;
              case 3:
                CZ_RETURN_IF_ERROR(m.MoveChunk(
                    c, rng() % 2 ? Device::Simulated(0) : Device::Cpu()));
                break;
              case 4:  // Forward use and back.
                CZ_RETURN_IF_ERROR(m.AccessChunk(c));
                CZ_RETURN_IF_ERROR(c->SetTensorState(0, TensorState::kCompute));
                CZ_RETURN_IF_ERROR(c->SetTensorState(0, TensorState::kHold));
                break;
            }
            check(step);
          }
          // Materialise everything and record what this rank sees.
          for (size_t i = 0; i < chunks.size(); ++i) {
            CZ_RETURN_IF_ERROR(m.AccessChunk(chunks[i]));
            seen[g.rank()][i] = *chunks[i]->FullView().ToFloats();
          }
          return absl::OkStatus();
        })));
    for (int r = 1; r < world; ++r) {
      EXPECT_EQ(seen[r], seen[0]) << "rank " << r << " differs from rank 0";
    }
  }
}

}  // namespace
}  // namespace chunkzero
