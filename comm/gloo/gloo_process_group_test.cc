#include "comm/gloo/gloo_process_group.h"

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/thread.h"
#include "comm/gloo/shared_segments.h"
#include "comm/testing/every_dtype_check.h"
#include "gloo/rendezvous/hash_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor/half.h"

namespace chunkzero {
namespace comm {
namespace {

using ::testing::HasSubstr;

// Collectives that should fail fast get this; healthy ones the default.
constexpr absl::Duration kShortTimeout = absl::Milliseconds(300);
// Slack on "fails fast" bounds for a loaded 2-core machine.
constexpr absl::Duration kSlack = absl::Seconds(3);

// ---------------------------------------------------------------------------
// Ranks as threads, each with its own group over one shared HashStore.

using RankFn = std::function<absl::Status(GlooProcessGroup& group)>;

// Options with a test-friendly timeout; `shared_memory` false keeps every
// collective on TCP.
GlooOptions TestOptions(bool shared_memory = true) {
  GlooOptions options;
  options.timeout = absl::Seconds(20);
  if (!shared_memory) options.max_shared_memory_bytes = 0;
  // Every collective that can go through shared memory does, so that the
  // tests' small data exercises it.
  options.min_shared_memory_bytes = 0;
  return options;
}

// Creates n groups over one HashStore (on n threads, since Create blocks
// until all ranks join) and returns them, or the first Create error. Rank
// r gets options_of(r).
absl::StatusOr<std::vector<std::unique_ptr<GlooProcessGroup>>> CreateGroups(
    int n, const std::function<GlooOptions(int)>& options_of) {
  gloo::rendezvous::HashStore store;
  std::vector<absl::StatusOr<std::unique_ptr<GlooProcessGroup>>> created(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      created[r] = GlooProcessGroup::Create(r, n, store, options_of(r));
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<std::unique_ptr<GlooProcessGroup>> groups;
  for (auto& g : created) {
    if (!g.ok()) return g.status();
    groups.push_back(std::move(*g));
  }
  return groups;
}

absl::StatusOr<std::vector<std::unique_ptr<GlooProcessGroup>>> CreateGroups(
    int n, bool shared_memory = true) {
  return CreateGroups(n, [&](int) { return TestOptions(shared_memory); });
}

// Runs fn(group r) on one thread per rank; returns the statuses by rank.
// The groups outlive every fn (a rank that returns early stays connected).
std::vector<absl::Status> RunRanks(
    std::vector<std::unique_ptr<GlooProcessGroup>>& groups, const RankFn& fn) {
  std::vector<absl::Status> statuses(groups.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < groups.size(); ++r) {
    threads.emplace_back([&, r] { statuses[r] = fn(*groups[r]); });
  }
  for (std::thread& t : threads) t.join();
  return statuses;
}

std::vector<absl::Status> SpawnGloo(int n, const RankFn& fn,
                                    bool shared_memory = true) {
  auto groups = CreateGroups(n, shared_memory);
  if (!groups.ok()) return std::vector<absl::Status>(n, groups.status());
  return RunRanks(*groups, fn);
}

::testing::AssertionResult AllOk(const std::vector<absl::Status>& statuses) {
  ::testing::AssertionResult failure = ::testing::AssertionFailure();
  bool ok = true;
  for (size_t r = 0; r < statuses.size(); ++r) {
    if (statuses[r].ok()) continue;
    ok = false;
    failure << "\n  rank " << r << ": " << statuses[r];
  }
  return ok ? ::testing::AssertionSuccess() : failure;
}

// ---------------------------------------------------------------------------
// Data and the serial rank-order reference (process_group.h's contract).

constexpr DType kDTypes[] = {DType::kF32, DType::kF16, DType::kBF16};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax,
                             ReduceOp::kMin};

// Values that round differently in every dtype, with the maximum moving
// between ranks.
float Value(int rank, size_t i) {
  return 0.3f * static_cast<float>(rank + 1) - 0.011f * static_cast<float>(i) +
         0.41f * static_cast<float>((rank * 7 + i) % 5);
}

uint32_t ToBits(DType dtype, float v) {
  if (dtype == DType::kF16) return FloatToHalfBits(v);
  if (dtype == DType::kBF16) return FloatToBFloat16Bits(v);
  return FloatBits(v);
}

float FromBits(DType dtype, uint32_t bits) {
  if (dtype == DType::kF16) return HalfBitsToFloat(bits);
  if (dtype == DType::kBF16) return BFloat16BitsToFloat(bits);
  return BitsToFloat(bits);
}

uint32_t InputBits(DType dtype, int rank, size_t i) {
  return ToBits(dtype, Value(rank, i));
}

// Element i reduced over n ranks: inputs widened to f32, combined in rank
// order, avg divided by n, rounded once.
uint32_t Reduced(DType dtype, ReduceOp op, int n, size_t i) {
  float acc = FromBits(dtype, InputBits(dtype, 0, i));
  for (int k = 1; k < n; ++k) {
    const float x = FromBits(dtype, InputBits(dtype, k, i));
    if (op == ReduceOp::kMax) {
      acc = acc < x ? x : acc;
    } else if (op == ReduceOp::kMin) {
      acc = x < acc ? x : acc;
    } else {
      acc = acc + x;
    }
  }
  if (op == ReduceOp::kAvg && n > 1) acc /= static_cast<float>(n);
  return ToBits(dtype, acc);
}

// Elements of any dtype kept as bit patterns, so checks are bit for bit.
class Data {
 public:
  Data(DType dtype, size_t count)
      : dtype_(dtype), bytes_(count * ElementSize(dtype), 0xA5) {}
  MutableBuffer buffer(size_t offset, size_t count) {
    return {bytes_.data() + offset * ElementSize(dtype_), count, dtype_};
  }
  MutableBuffer all() { return buffer(0, count()); }
  size_t count() const { return bytes_.size() / ElementSize(dtype_); }
  // Element offset + i = Value(rank, first + i), for i < count.
  void Fill(size_t offset, size_t count, int rank, size_t first = 0) {
    for (size_t i = 0; i < count; ++i) {
      Put(offset + i, InputBits(dtype_, rank, first + i));
    }
  }
  uint32_t Get(size_t i) const {
    uint32_t bits = 0;
    std::memcpy(&bits, &bytes_[i * ElementSize(dtype_)], ElementSize(dtype_));
    return bits;
  }
  // First element in [offset, offset + count) whose bits differ from
  // want(i), as an error.
  absl::Status Expect(absl::string_view what, size_t offset, size_t count,
                      const std::function<uint32_t(size_t)>& want) const {
    for (size_t i = 0; i < count; ++i) {
      if (Get(offset + i) == want(i)) continue;
      return absl::InternalError(
          absl::StrFormat("%s: element %d: got bits 0x%x, want 0x%x", what,
                          offset + i, Get(offset + i), want(i)));
    }
    return absl::OkStatus();
  }

 private:
  void Put(size_t i, uint32_t bits) {
    std::memcpy(&bytes_[i * ElementSize(dtype_)], &bits, ElementSize(dtype_));
  }
  DType dtype_;
  std::vector<uint8_t> bytes_;
};

// ---------------------------------------------------------------------------
// Every collective, dtype, op, root and form against the reference.

struct Case {
  std::string name;
  RankFn run;
  // An AllGather, ReduceScatter or AllReduce with data: one that moves it
  // through shared memory when the ranks can.
  bool bulk = false;
};

void AddReductions(int n, DType dt, size_t count, std::vector<Case>& cases) {
  const std::string d(DTypeName(dt));
  for (ReduceOp op : kOps) {
    const std::string o(ReduceOpName(op));
    cases.push_back(
        {absl::StrCat("AllReduce ", d, " ", count, " ", o),
         [=](ProcessGroup& g) -> absl::Status {
           Data x(dt, count);
           x.Fill(0, count, g.rank());
           AllReduceOptions opts;
           opts.op = op;
           if (absl::Status s = AllReduce(g, x.all(), opts); !s.ok()) return s;
           return x.Expect("allreduce", 0, count,
                           [&](size_t i) { return Reduced(dt, op, n, i); });
         },
         count > 0});
    for (int root : {0, n - 1}) {
      for (bool in_place : {false, true}) {
        cases.push_back(
            {absl::StrCat("Reduce ", d, " ", count, " ", o, " root ", root,
                          in_place ? " in place" : ""),
             [=](ProcessGroup& g) -> absl::Status {
               Data send(dt, count), recv(dt, count);
               send.Fill(0, count, g.rank());
               Data& out = in_place ? send : recv;
               const bool is_root = g.rank() == root;
               ReduceOptions opts;
               opts.root = root;
               opts.op = op;
               if (absl::Status s =
                       Reduce(g, send.all(),
                              is_root ? out.all() : MutableBuffer{}, opts);
                   !s.ok())
                 return s;
               if (!is_root) {
                 return send.Expect("non-root send", 0, count, [&](size_t i) {
                   return InputBits(dt, g.rank(), i);
                 });
               }
               return out.Expect("reduce", 0, count, [&](size_t i) {
                 return Reduced(dt, op, n, i);
               });
             }});
      }
    }
  }
}

void AddMovements(int n, DType dt, size_t count, std::vector<Case>& cases) {
  const std::string d(DTypeName(dt));
  for (int root : {0, n - 1}) {
    cases.push_back(
        {absl::StrCat("Broadcast ", d, " ", count, " root ", root),
         [=](ProcessGroup& g) -> absl::Status {
           Data x(dt, count);
           if (g.rank() == root) x.Fill(0, count, root);
           BroadcastOptions opts;
           opts.root = root;
           if (absl::Status s = Broadcast(g, x.all(), opts); !s.ok()) return s;
           return x.Expect("broadcast", 0, count,
                           [&](size_t i) { return InputBits(dt, root, i); });
         }});
  }
  for (bool in_place : {false, true}) {
    const std::string form = in_place ? " in place" : "";
    cases.push_back(
        {absl::StrCat("AllGather ", d, " ", count, form),
         [=](ProcessGroup& g) -> absl::Status {
           const int r = g.rank();
           Data recv(dt, n * count), own(dt, count);
           Data& src = in_place ? recv : own;
           const size_t at = in_place ? r * count : 0;
           src.Fill(at, count, r);
           if (absl::Status s = AllGather(g, src.buffer(at, count), recv.all());
               !s.ok())
             return s;
           return recv.Expect("allgather", 0, n * count, [&](size_t i) {
             return InputBits(dt, static_cast<int>(i / count), i % count);
           });
         },
         count > 0});
    for (ReduceOp op : kOps) {
      cases.push_back(
          {absl::StrCat("ReduceScatter ", d, " ", count, " ", ReduceOpName(op),
                        form),
           [=](ProcessGroup& g) -> absl::Status {
             // Rank r's send holds Value(r, 0 .. n*count), so slot k is
             // the reference at k*count + i.
             const int r = g.rank();
             Data send(dt, n * count), own(dt, count);
             send.Fill(0, n * count, r);
             Data& dst = in_place ? send : own;
             const size_t at = in_place ? r * count : 0;
             ReduceScatterOptions opts;
             opts.op = op;
             if (absl::Status s =
                     ReduceScatter(g, send.all(), dst.buffer(at, count), opts);
                 !s.ok())
               return s;
             return dst.Expect("reducescatter", at, count, [&](size_t i) {
               return Reduced(dt, op, n, r * count + i);
             });
           },
           count > 0});
    }
  }
}

std::vector<Case> AllCases(int n) {
  std::vector<Case> cases;
  for (DType dt : kDTypes) {
    // 4500 splits unevenly into AllReduce segments for n = 2, 3, 4; 1 and 2
    // leave some ranks' segments empty.
    for (size_t count : {0, 1, 2, 37, 4500}) {
      AddReductions(n, dt, count, cases);
      AddMovements(n, dt, count, cases);
    }
  }
  cases.push_back({"Barrier", [](ProcessGroup& g) { return Barrier(g); }});
  return cases;
}

// World size, and whether the data may go through shared memory (ranks as
// threads share a host, so it does unless switched off).
class GlooWorldSizeTest
    : public ::testing::TestWithParam<std::tuple<int, bool>> {
 protected:
  int n() const { return std::get<0>(GetParam()); }
  bool shared_memory() const { return std::get<1>(GetParam()); }
};

TEST_P(GlooWorldSizeTest, EveryOpMatchesSerialReferenceBitForBit) {
  const int n = this->n();
  const std::vector<Case> cases = AllCases(n);
  // Every bulk case through shared memory when it is on, none when off.
  uint64_t bulk = 0;
  for (const Case& c : cases) bulk += c.bulk ? 1 : 0;
  const bool expect_shm = shared_memory() && n > 1;
  EXPECT_TRUE(AllOk(SpawnGloo(
      n,
      [&](GlooProcessGroup& g) -> absl::Status {
        if (g.uses_shared_memory() != expect_shm) {
          return absl::InternalError(
              absl::StrCat("uses_shared_memory() is ", g.uses_shared_memory()));
        }
        for (const Case& c : cases) {
          if (absl::Status s = c.run(g); !s.ok()) {
            return absl::Status(s.code(),
                                absl::StrCat(c.name, ": ", s.message()));
          }
        }
        const uint64_t want = expect_shm ? bulk : 0;
        if (g.shared_memory_collectives() != want) {
          return absl::InternalError(
              absl::StrCat(g.shared_memory_collectives(),
                           " collectives through shared memory, want ", want));
        }
        return absl::OkStatus();
      },
      shared_memory())));
}

// The chunk code starts an all-gather (prefetch) and waits for it later,
// with other collectives issued in between: every rank issues in one order.
TEST_P(GlooWorldSizeTest, AsyncOpsOverlapAndCompleteInIssueOrder) {
  const int n = this->n();
  constexpr size_t kCount = 3000;
  EXPECT_TRUE(AllOk(SpawnGloo(
      n,
      [&](GlooProcessGroup& g) -> absl::Status {
        const int r = g.rank();
        Data own(DType::kF16, kCount), gathered(DType::kF16, n * kCount),
            grads(DType::kF32, kCount), params(DType::kBF16, kCount),
            scatter_in(DType::kF32, n * kCount),
            scatter_out(DType::kF32, kCount);
        own.Fill(0, kCount, r);
        grads.Fill(0, kCount, r);
        if (r == n - 1) params.Fill(0, kCount, n - 1);
        scatter_in.Fill(0, n * kCount, r);
        BroadcastOptions from_last;
        from_last.root = n - 1;
        std::vector<std::unique_ptr<Work>> works;
        works.push_back(g.AllGather(own.all(), gathered.all(), {}));
        works.push_back(g.AllReduce(grads.all(), {}));
        works.push_back(g.Broadcast(params.all(), from_last));
        works.push_back(
            g.ReduceScatter(scatter_in.all(), scatter_out.all(), {}));
        works.push_back(g.Barrier({}));
        for (auto& w : works) {
          if (absl::Status s = w->Wait(); !s.ok()) return s;
          if (!w->IsCompleted()) return absl::InternalError("not completed");
        }
        if (absl::Status s = gathered.Expect(
                "allgather", 0, n * kCount,
                [&](size_t i) {
                  return InputBits(DType::kF16, static_cast<int>(i / kCount),
                                   i % kCount);
                });
            !s.ok())
          return s;
        if (absl::Status s = grads.Expect(
                "allreduce", 0, kCount,
                [&](size_t i) {
                  return Reduced(DType::kF32, ReduceOp::kSum, n, i);
                });
            !s.ok())
          return s;
        if (absl::Status s = params.Expect(
                "broadcast", 0, kCount,
                [&](size_t i) { return InputBits(DType::kBF16, n - 1, i); });
            !s.ok())
          return s;
        return scatter_out.Expect("reducescatter", 0, kCount, [&](size_t i) {
          return Reduced(DType::kF32, ReduceOp::kSum, n, r * kCount + i);
        });
      },
      shared_memory())));
}

INSTANTIATE_TEST_SUITE_P(
    WorldSizes, GlooWorldSizeTest,
    ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Bool()),
    [](const ::testing::TestParamInfo<std::tuple<int, bool>>& info) {
      return absl::StrCat("N", std::get<0>(info.param),
                          std::get<1>(info.param) ? "SharedMemory" : "Tcp");
    });

// Hundreds of collectives queued at once: each matches its peers' by issue
// order (the Gloo tag is the sequence number).
TEST(GlooProcessGroup, IntegerAndF64CollectivesAreExactWithEveryOp) {
  for (int n : {1, 2, 3}) {
    SCOPED_TRACE(absl::StrCat(n, " ranks"));
    EXPECT_TRUE(AllOk(SpawnGloo(n, [](GlooProcessGroup& g) {
      return comm_testing::CheckEveryDTypeCollective(g);
    })));
  }
}

TEST(GlooProcessGroup, ManyQueuedOpsCompleteInOrder) {
  constexpr int kOps = 300;
  EXPECT_TRUE(AllOk(SpawnGloo(3, [&](GlooProcessGroup& g) -> absl::Status {
    std::vector<std::vector<float>> xs(kOps);
    std::vector<std::unique_ptr<Work>> works;
    for (int k = 0; k < kOps; ++k) {
      xs[k].assign(1 + k % 7, static_cast<float>(k + g.rank()));
      works.push_back(g.AllReduce(MutableBuffer::Of(xs[k]), {}));
    }
    for (int k = 0; k < kOps; ++k) {
      if (absl::Status s = works[k]->Wait(); !s.ok()) return s;
      if (xs[k].back() != static_cast<float>(3 * k + 3)) {
        return absl::InternalError(absl::StrCat("op ", k, ": ", xs[k].back()));
      }
    }
    return absl::OkStatus();
  })));
}

// Larger than Gloo's 1 MiB transfer segments and the sockets' buffers, and
// than the shared segments' 2 MiB growth step.
TEST(GlooProcessGroup, LargeBuffers) {
  constexpr size_t kCount = 1 << 20;  // 4 MiB of f32 per rank.
  for (const bool shared_memory : {true, false}) {
    SCOPED_TRACE(shared_memory ? "shared memory" : "tcp");
    EXPECT_TRUE(AllOk(SpawnGloo(
        3,
        [&](GlooProcessGroup& g) -> absl::Status {
          Data x(DType::kF32, kCount);
          x.Fill(0, kCount, g.rank());
          if (absl::Status s = AllReduce(g, x.all()); !s.ok()) return s;
          if (absl::Status s = x.Expect("allreduce", 0, kCount,
                                        [&](size_t i) {
                                          return Reduced(DType::kF32,
                                                         ReduceOp::kSum, 3, i);
                                        });
              !s.ok())
            return s;
          Data gathered(DType::kF32, 3 * kCount);
          x.Fill(0, kCount, g.rank());
          if (absl::Status s = AllGather(g, x.all(), gathered.all()); !s.ok())
            return s;
          if (absl::Status s = gathered.Expect(
                  "allgather", 0, 3 * kCount,
                  [&](size_t i) {
                    return InputBits(DType::kF32, static_cast<int>(i / kCount),
                                     i % kCount);
                  });
              !s.ok())
            return s;
          const uint64_t want = shared_memory ? 2 : 0;
          if (g.shared_memory_collectives() != want) {
            return absl::InternalError(
                absl::StrCat(g.shared_memory_collectives(),
                             " through shared memory, want ", want));
          }
          return absl::OkStatus();
        },
        shared_memory)));
  }
}

// A collective larger than a rank's shared-memory cap goes over TCP on
// every rank (the ranks' headers say whose segment is ready); smaller ones
// before and after still use shared memory, and every result is exact.
// All-reduces f32 buffers of counts[c] elements over the `ranks` ranks and
// checks each result and, after each, that through_shm[c] collectives so
// far went through shared memory.
absl::Status CheckAllReduces(GlooProcessGroup& g, int ranks,
                             const std::vector<uint64_t>& counts,
                             const std::vector<uint64_t>& through_shm) {
  for (size_t c = 0; c < counts.size(); ++c) {
    Data x(DType::kF32, counts[c]);
    x.Fill(0, counts[c], g.rank());
    if (absl::Status s = AllReduce(g, x.all()); !s.ok()) return s;
    if (absl::Status s = x.Expect("allreduce", 0, counts[c],
                                  [&](size_t i) {
                                    return Reduced(DType::kF32, ReduceOp::kSum,
                                                   ranks, i);
                                  });
        !s.ok())
      return s;
    if (g.shared_memory_collectives() != through_shm[c]) {
      return absl::InternalError(
          absl::StrCat("after an all-reduce of ", counts[c],
                       " elements: ", g.shared_memory_collectives(),
                       " through shared memory, want ", through_shm[c]));
    }
  }
  return absl::OkStatus();
}

TEST(GlooProcessGroup, CollectivesPastTheSharedMemoryCapGoOverTcp) {
  constexpr size_t kCap = size_t{4} << 20;
  // Rank 1 alone has the cap: its header decides for everyone.
  auto groups = CreateGroups(3, [&](int r) {
    GlooOptions options = TestOptions();
    if (r == 1) options.max_shared_memory_bytes = kCap;
    return options;
  });
  ASSERT_TRUE(groups.ok()) << groups.status();
  EXPECT_TRUE(AllOk(RunRanks(*groups, [&](GlooProcessGroup& g) -> absl::Status {
    // kCap bytes of f32 fit exactly; one element more does not.
    std::vector<uint64_t> counts = {1000, kCap / 4, kCap / 4 + 1, 37};
    std::vector<uint64_t> through_shm = {1, 2, 2, 3};
    return CheckAllReduces(g, 3, counts, through_shm);
  })));
}

// Below min_shared_memory_bytes of per-rank bytes a collective stays on TCP;
// at it, it goes through shared memory. Rank 1's default minimum decides for
// the ranks that would take any size.
TEST(GlooProcessGroup, CollectivesBelowTheSharedMemoryMinimumGoOverTcp) {
  const size_t kMin = GlooOptions().min_shared_memory_bytes;
  ASSERT_EQ(kMin, size_t{1} << 20);
  auto groups = CreateGroups(2, [&](int r) {
    GlooOptions options = TestOptions();
    if (r == 1) options.min_shared_memory_bytes = kMin;
    return options;
  });
  ASSERT_TRUE(groups.ok()) << groups.status();
  EXPECT_TRUE(AllOk(RunRanks(*groups, [&](GlooProcessGroup& g) -> absl::Status {
    // AllReduce: the buffer's bytes count.
    const std::vector<uint64_t> counts = {kMin / 4 - 1, kMin / 4};
    const std::vector<uint64_t> through_shm = {0, 1};
    if (absl::Status s = CheckAllReduces(g, 2, counts, through_shm); !s.ok()) {
      return s;
    }
    // ReduceScatter: the whole send counts, 2 x 512 KiB of bf16 here.
    const size_t count = kMin / 2 / 2;
    Data send(DType::kBF16, 2 * count), own(DType::kBF16, count);
    send.Fill(0, 2 * count, g.rank());
    if (absl::Status s = ReduceScatter(g, send.all(), own.all(), {}); !s.ok()) {
      return s;
    }
    if (absl::Status s = own.Expect("reducescatter", 0, count,
                                    [&](size_t i) {
                                      return Reduced(DType::kBF16,
                                                     ReduceOp::kSum, 2,
                                                     g.rank() * count + i);
                                    });
        !s.ok())
      return s;
    if (g.shared_memory_collectives() != 2) {
      return absl::InternalError(absl::StrCat(
          "after the reduce-scatter: ", g.shared_memory_collectives(),
          " through shared memory, want 2"));
    }
    return absl::OkStatus();
  })));
}

// One rank that may not use shared memory keeps every rank on TCP, decided
// once at Create.
TEST(GlooProcessGroup, OneRankWithoutSharedMemoryKeepsEveryRankOnTcp) {
  auto groups = CreateGroups(3, [&](int r) { return TestOptions(r != 2); });
  ASSERT_TRUE(groups.ok()) << groups.status();
  for (const auto& g : *groups) EXPECT_FALSE(g->uses_shared_memory());
  EXPECT_TRUE(AllOk(RunRanks(*groups, [&](GlooProcessGroup& g) -> absl::Status {
    Data x(DType::kBF16, 5000);
    x.Fill(0, 5000, g.rank());
    if (absl::Status s = AllReduce(g, x.all()); !s.ok()) return s;
    if (g.shared_memory_collectives() != 0) {
      return absl::InternalError("used shared memory");
    }
    return x.Expect("allreduce", 0, 5000, [&](size_t i) {
      return Reduced(DType::kBF16, ReduceOp::kSum, 3, i);
    });
  })));
}

// What SetSegmentFaultForTesting makes fail in the tests below: `call` on
// rank `rank`, with errno `error`. Set before the ranks' threads start.
struct InjectedFault {
  int rank = -1;
  gloo_internal::SegmentCall call = gloo_internal::SegmentCall::kGrow;
  int error = 0;
};
InjectedFault injected_fault;
std::atomic<int> injected_fault_hits{0};

int InjectFault(int rank, gloo_internal::SegmentCall call, int, size_t) {
  if (rank != injected_fault.rank || call != injected_fault.call) return 0;
  injected_fault_hits.fetch_add(1);
  return injected_fault.error;
}

// A rank whose segment cannot grow (/dev/shm full: ENOSPC from
// posix_fallocate) or cannot be mapped, or that cannot map a peer's segment
// (ENOMEM: no address space or memory), says in its header that its segment
// is not ready: every rank moves that collective over TCP, and every result
// is exact. Such a failure used to surface only when the data moved: the
// rank that could not map a peer's segment failed with Unavailable and a
// probe's "every peer's host answers", as if the network had failed, and
// its peers failed in their next exchange with it.
TEST(GlooProcessGroup, SegmentsWithoutMemoryKeepEveryRankOnTcp) {
  using gloo_internal::SegmentCall;
  const InjectedFault faults[] = {{1, SegmentCall::kGrow, ENOSPC},
                                  {2, SegmentCall::kMapMine, ENOMEM},
                                  {1, SegmentCall::kMapPeer, ENOMEM}};
  for (const InjectedFault& fault : faults) {
    SCOPED_TRACE(absl::StrCat("rank ", fault.rank, " call ",
                              static_cast<int>(fault.call), ": ",
                              std::strerror(fault.error)));
    auto groups = CreateGroups(3);
    ASSERT_TRUE(groups.ok()) << groups.status();
    injected_fault = fault;
    injected_fault_hits = 0;
    gloo_internal::SetSegmentFaultForTesting(&InjectFault);
    const std::vector<absl::Status> statuses =
        RunRanks(*groups, [&](GlooProcessGroup& g) -> absl::Status {
          // 1 MiB of f32 per rank, past the first 2 MiB growth step for the
          // reduce-scatter's whole send.
          constexpr size_t kCount = size_t{1} << 18;
          Data x(DType::kF32, kCount);
          x.Fill(0, kCount, g.rank());
          if (absl::Status s = AllReduce(g, x.all()); !s.ok()) return s;
          if (absl::Status s = x.Expect("allreduce", 0, kCount,
                                        [&](size_t i) {
                                          return Reduced(DType::kF32,
                                                         ReduceOp::kSum, 3, i);
                                        });
              !s.ok()) {
            return s;
          }
          Data gathered(DType::kF32, 3 * kCount);
          x.Fill(0, kCount, g.rank());
          if (absl::Status s = AllGather(g, x.all(), gathered.all()); !s.ok()) {
            return s;
          }
          if (absl::Status s = gathered.Expect(
                  "allgather", 0, 3 * kCount,
                  [&](size_t i) {
                    return InputBits(DType::kF32, static_cast<int>(i / kCount),
                                     i % kCount);
                  });
              !s.ok()) {
            return s;
          }
          Data send(DType::kF32, 3 * kCount), own(DType::kF32, kCount);
          send.Fill(0, 3 * kCount, g.rank());
          if (absl::Status s = ReduceScatter(g, send.all(), own.all(), {});
              !s.ok()) {
            return s;
          }
          if (absl::Status s = own.Expect("reducescatter", 0, kCount,
                                          [&](size_t i) {
                                            return Reduced(
                                                DType::kF32, ReduceOp::kSum, 3,
                                                g.rank() * kCount + i);
                                          });
              !s.ok()) {
            return s;
          }
          if (g.shared_memory_collectives() != 0) {
            return absl::InternalError(
                absl::StrCat(g.shared_memory_collectives(),
                             " collectives through shared memory, want 0"));
          }
          return absl::OkStatus();
        });
    gloo_internal::SetSegmentFaultForTesting(nullptr);
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(statuses[r], absl::OkStatus()) << "rank " << r;
    }
    EXPECT_GE(injected_fault_hits.load(), 1);
    // With the memory back, the next collective goes through shared memory
    // on every rank.
    EXPECT_TRUE(AllOk(RunRanks(*groups, [&](GlooProcessGroup& g) {
      return CheckAllReduces(g, 3, {size_t{1} << 18}, {1});
    })));
  }
}

// The names in /dev/shm that this process's groups made.
std::vector<std::string> OurSharedMemoryNames() {
  std::vector<std::string> names;
  const std::string prefix = absl::StrCat("chunkzero-gloo-", getpid(), "-");
  std::error_code error;
  for (const auto& entry :
       std::filesystem::directory_iterator("/dev/shm", error)) {
    const std::string name = entry.path().filename().string();
    if (absl::StartsWith(name, prefix)) names.push_back(name);
  }
  return names;
}

// Every segment is unlinked once all ranks have opened it: nothing is left
// in /dev/shm for a killed job to leak, while the group works.
TEST(GlooProcessGroup, NoSharedMemoryNameOutlivesCreate) {
  auto groups = CreateGroups(3);
  ASSERT_TRUE(groups.ok()) << groups.status();
  for (const auto& g : *groups) EXPECT_TRUE(g->uses_shared_memory());
  EXPECT_THAT(OurSharedMemoryNames(), ::testing::IsEmpty());
  EXPECT_TRUE(AllOk(RunRanks(*groups, [&](GlooProcessGroup& g) {
    Data x(DType::kF16, 300);
    x.Fill(0, 300, g.rank());
    return AllReduce(g, x.all());
  })));
  EXPECT_THAT(OurSharedMemoryNames(), ::testing::IsEmpty());
}

// ---------------------------------------------------------------------------
// Mismatches, timeouts, abort, destruction.

TEST(GlooProcessGroup,
     MismatchFailsOnEveryRankNamingBothSidesGroupStaysUsable) {
  struct MismatchCase {
    std::string name;
    std::function<absl::Status(ProcessGroup&, std::vector<float>&)> issue;
    std::string message;
  };
  const std::vector<MismatchCase> cases = {
      {"kind",
       [](ProcessGroup& g, std::vector<float>& x) {
         if (g.rank() == 0) return AllReduce(g, MutableBuffer::Of(x));
         std::vector<float> recv(20);
         return AllGather(g, ConstBuffer::Of(x), MutableBuffer::Of(recv));
       },
       "mismatch: rank 0 called AllReduce(f32, count=10, op=sum), rank 1 "
       "called AllGather(f32, count=10)"},
      {"count",
       [](ProcessGroup& g, std::vector<float>& x) {
         return AllReduce(g, {x.data(), g.rank() == 0 ? 10u : 9u, DType::kF32});
       },
       "rank 0 called AllReduce(f32, count=10, op=sum), rank 1 called "
       "AllReduce(f32, count=9, op=sum)"},
      {"root",
       [](ProcessGroup& g, std::vector<float>& x) {
         BroadcastOptions opts;
         opts.root = g.rank();
         return Broadcast(g, MutableBuffer::Of(x), opts);
       },
       "rank 0 called Broadcast(f32, count=10, root=0), rank 1 called "
       "Broadcast(f32, count=10, root=1)"},
      {"tag",
       [](ProcessGroup& g, std::vector<float>& x) {
         std::vector<float> recv(20);
         AllGatherOptions opts;
         opts.tag = g.rank() == 0 ? "fp16_param#3" : "fp16_param#4";
         return AllGather(g, ConstBuffer::Of(x), MutableBuffer::Of(recv), opts);
       },
       "rank 0 called AllGather(f32, count=10, tag=fp16_param#3), rank 1 "
       "called AllGather(f32, count=10, tag=fp16_param#4)"},
  };
  auto groups = CreateGroups(2);
  ASSERT_TRUE(groups.ok()) << groups.status();
  for (const MismatchCase& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<absl::Status> follow_up(2);
    const std::vector<absl::Status> statuses =
        RunRanks(*groups, [&](GlooProcessGroup& g) {
          std::vector<float> x(10, 1.0f);
          absl::Status s = c.issue(g, x);
          std::vector<float> y(4, static_cast<float>(g.rank()));
          follow_up[g.rank()] = AllReduce(g, MutableBuffer::Of(y));
          if (follow_up[g.rank()].ok() && y[3] != 1.0f) {
            follow_up[g.rank()] = absl::InternalError("wrong follow-up sum");
          }
          return s;
        });
    for (int r = 0; r < 2; ++r) {
      SCOPED_TRACE(absl::StrCat("rank ", r));
      EXPECT_EQ(statuses[r].code(), absl::StatusCode::kInvalidArgument)
          << statuses[r];
      EXPECT_THAT(statuses[r].message(), HasSubstr(c.message));
      EXPECT_TRUE(follow_up[r].ok()) << follow_up[r];
    }
  }
  for (auto& g : *groups) EXPECT_TRUE(g->abort_status().ok());
}

TEST(GlooProcessGroup, MissingRankMakesOthersTimeOutNamingItThenGroupAborts) {
  auto groups = CreateGroups(3);
  ASSERT_TRUE(groups.ok()) << groups.status();
  std::vector<absl::Duration> elapsed(3);
  const std::vector<absl::Status> statuses =
      RunRanks(*groups, [&](GlooProcessGroup& g) -> absl::Status {
        if (g.rank() == 1) return absl::OkStatus();  // Never issues.
        std::vector<float> x(8, 1.0f);
        AllReduceOptions opts;
        opts.timeout = kShortTimeout;
        const absl::Time start = absl::Now();
        absl::Status s = AllReduce(g, MutableBuffer::Of(x), opts);
        elapsed[g.rank()] = absl::Now() - start;
        return s;
      });
  for (int r : {0, 2}) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    EXPECT_EQ(statuses[r].code(), absl::StatusCode::kDeadlineExceeded)
        << statuses[r];
    EXPECT_THAT(statuses[r].message(),
                HasSubstr(absl::StrCat(
                    "collective #0 AllReduce(f32, count=8, op=sum) timed out "
                    "on rank ",
                    r, " after 300ms waiting for rank 1 to join")));
    EXPECT_GE(elapsed[r], kShortTimeout - absl::Milliseconds(5));
    EXPECT_LT(elapsed[r], kShortTimeout + kSlack);
    EXPECT_EQ((*groups)[r]->abort_status().code(),
              absl::StatusCode::kDeadlineExceeded);
  }

  // Later collectives fail fast: FailedPrecondition quoting the first
  // failure on the aborted ranks; rank 1 finds its connections reset.
  const std::vector<absl::Status> later =
      RunRanks(*groups, [](GlooProcessGroup& g) {
        const absl::Time start = absl::Now();
        absl::Status s = Barrier(g);
        if (absl::Now() - start > kSlack) {
          return absl::InternalError(absl::StrCat("slow: ", s.ToString()));
        }
        return s;
      });
  for (int r : {0, 2}) {
    EXPECT_EQ(later[r].code(), absl::StatusCode::kFailedPrecondition)
        << later[r];
    EXPECT_THAT(later[r].message(),
                HasSubstr("aborted by an earlier failure: collective #0 "
                          "AllReduce(f32, count=8, op=sum) timed out"));
  }
  EXPECT_EQ(later[1].code(), absl::StatusCode::kUnavailable) << later[1];
  EXPECT_THAT(later[1].message(),
              HasSubstr("collective #0 Barrier() failed on rank 1 [gloo tag "
                        "0]"));
  // The closed connection is a symptom: rank 1 probes the peers' hosts
  // (every one is this machine, and answers).
  EXPECT_THAT(later[1].message(),
              HasSubstr("; probe: every peer's host answers (so a rank "
                        "stopped, or the network between some hosts is "
                        "down); the group is now aborted"));
  EXPECT_EQ((*groups)[1]->abort_status().message(), later[1].message());
}

TEST(GlooProcessGroup, CreateTimesOutNamingTheRanksThatDidNotJoin) {
  gloo::rendezvous::HashStore store;
  std::vector<absl::Status> statuses(2);
  std::vector<std::thread> threads;
  const absl::Time start = absl::Now();
  for (int r = 0; r < 2; ++r) {  // Ranks 2 and 3 of 4 never come.
    threads.emplace_back([&, r] {
      GlooOptions options;
      options.timeout = kShortTimeout;
      statuses[r] = GlooProcessGroup::Create(r, 4, store, options).status();
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LT(absl::Now() - start, kShortTimeout + kSlack);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(statuses[r].code(), absl::StatusCode::kDeadlineExceeded)
        << statuses[r];
    EXPECT_THAT(
        statuses[r].message(),
        HasSubstr(absl::StrCat("rank ", r,
                               " of 4 timed out after 300ms waiting for "
                               "ranks 2, 3 to join the rendezvous")));
  }
}

// In a directory too, the ranks that never came are named within the
// timeout: Gloo's FileStore counted whole seconds, and naming each missing
// rank (a probe of its key) took a second per rank.
TEST(GlooProcessGroup, CreateInADirectoryNamesTheMissingRanksInTime) {
  const std::string dir =
      absl::StrCat(testing::TempDir(), "/missing_ranks_", getpid());
  std::filesystem::remove_all(dir);
  GlooOptions options;
  options.timeout = kShortTimeout;
  const absl::Time start = absl::Now();
  const absl::Status status =
      GlooProcessGroup::CreateWithFileStore(0, 8, dir, options).status();
  EXPECT_LT(absl::Now() - start, kShortTimeout + kSlack);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_THAT(status.message(),
              HasSubstr("rank 0 of 8 timed out after 300ms waiting for ranks "
                        "1, 2, 3, 4, 5, 6, 7 to join the rendezvous"));
}

// Ranks started with different settings fail at the rendezvous, naming the
// setting, instead of waiting for ranks that will never come.
TEST(GlooProcessGroup, CreateFailsFastWhenRanksDisagreeOnTheJob) {
  struct Case {
    int size[2];
    std::map<std::string, std::string> config[2];
    std::string says[2];
  };
  const Case cases[] = {
      {{2, 2},
       {{{"lr", "0.1"}}, {{"lr", "0.2"}}},
       {"rank 1 was started with another configuration than rank 0: lr is "
        "0.2 on rank 1 but 0.1 on rank 0",
        "rank 0 was started with another configuration than rank 1: lr is "
        "0.1 on rank 0 but 0.2 on rank 1"}},
      // The world size is named first, although a setting derived from it
      // ("chunk_size" sorts before it) differs too.
      {{2, 3},
       {{{"chunk_size", "34"}}, {{"chunk_size", "33"}}},
       {"rank 1 was started with another configuration than rank 0: "
        "world_size is 3 on rank 1 but 2 on rank 0",
        "rank 0 was started with another configuration than rank 1: "
        "world_size is 2 on rank 0 but 3 on rank 1"}},
  };
  for (const Case& c : cases) {
    gloo::rendezvous::HashStore store;
    std::vector<absl::Status> statuses(2);
    std::vector<std::thread> threads;
    const absl::Time start = absl::Now();
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        GlooOptions options;
        options.timeout = absl::Seconds(60);
        options.job_config = c.config[r];
        statuses[r] =
            GlooProcessGroup::Create(r, c.size[r], store, options).status();
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_LT(absl::Now() - start, absl::Seconds(30)) << "not fast";
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(statuses[r].code(), absl::StatusCode::kFailedPrecondition)
          << statuses[r];
      EXPECT_THAT(statuses[r].message(), HasSubstr(c.says[r]));
      EXPECT_THAT(statuses[r].message(),
                  HasSubstr("(every rank of a job must be started with the "
                            "same flags)"));
    }
  }
}

// A directory that already holds a rank's key belongs to an earlier job:
// refused at once, naming the directory, instead of Gloo's "File already
// exists" or a hang on the earlier job's dead addresses.
TEST(GlooProcessGroup, FileStoreOfAnEarlierJobIsRefusedNamingIt) {
  const std::string dir =
      absl::StrCat(std::getenv("TEST_TMPDIR"), "/gloo_stale_",
                   absl::ToUnixNanos(absl::Now()));
  { ASSERT_TRUE(GlooProcessGroup::CreateWithFileStore(0, 1, dir).ok()); }
  auto again = GlooProcessGroup::CreateWithFileStore(0, 1, dir);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition)
      << again.status();
  EXPECT_THAT(again.status().message(),
              HasSubstr("the rendezvous store already holds this rank's key, "
                        "so it holds an earlier job's rendezvous"));
  EXPECT_THAT(again.status().message(),
              HasSubstr(absl::StrCat("[rendezvous directory ", dir, "]")));
}

TEST(GlooProcessGroup, CreateRejectsBadArguments) {
  gloo::rendezvous::HashStore store;
  EXPECT_EQ(GlooProcessGroup::Create(2, 2, store).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GlooProcessGroup::Create(0, 0, store).status().code(),
            absl::StatusCode::kInvalidArgument);
  GlooOptions zero;
  zero.timeout = absl::ZeroDuration();
  EXPECT_EQ(GlooProcessGroup::Create(0, 1, store, zero).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(GlooProcessGroup, DestructionCancelsPendingOpsWithoutWaitingForPeers) {
  auto groups = CreateGroups(2);
  ASSERT_TRUE(groups.ok()) << groups.status();
  std::vector<float> x(4), y(4);
  // Rank 1 never issues; the default timeout is 5 minutes.
  std::unique_ptr<Work> waiting =
      (*groups)[0]->AllReduce(MutableBuffer::Of(x), {});
  std::unique_ptr<Work> queued =
      (*groups)[0]->AllReduce(MutableBuffer::Of(y), {});
  absl::SleepFor(absl::Milliseconds(50));  // Let the first one start.
  EXPECT_FALSE(waiting->IsCompleted());
  const absl::Time start = absl::Now();
  (*groups)[0].reset();
  EXPECT_LT(absl::Now() - start, kSlack);
  ASSERT_TRUE(waiting->IsCompleted());
  ASSERT_TRUE(queued->IsCompleted());
  EXPECT_EQ(waiting->Wait().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(queued->Wait().code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(queued->Wait().message(), HasSubstr("before it started"));
}

// A rank that gives up with collectives in flight (ProcessGroup::Abort):
// once Abort returns, nothing of its group touches their buffers, a late
// peer fails at once instead of at its timeout, and later calls fail.
TEST(GlooProcessGroup, AbortStopsWhatIsInFlightAndTellsThePeers) {
  for (bool shared_memory : {true, false}) {
    SCOPED_TRACE(shared_memory ? "shared memory" : "tcp");
    auto groups = CreateGroups(2, shared_memory);
    ASSERT_TRUE(groups.ok()) << groups.status();
    constexpr size_t kCount = 4096;
    auto recv = std::make_unique<std::vector<float>>(2 * kCount, 0.0f);
    std::vector<float> send(kCount, 3.0f), queued_buffer(8);
    std::unique_ptr<Work> gather = (*groups)[0]->AllGather(
        ConstBuffer::Of(send), MutableBuffer::Of(*recv), {});
    std::unique_ptr<Work> queued =
        (*groups)[0]->AllReduce(MutableBuffer::Of(queued_buffer), {});
    absl::SleepFor(absl::Milliseconds(50));  // Let the gather start.
    EXPECT_FALSE(gather->IsCompleted());
    const absl::Time start = absl::Now();
    (*groups)[0]->Abort(absl::ResourceExhaustedError("rank 0: out of memory"));
    EXPECT_LT(absl::Now() - start, kSlack);
    ASSERT_TRUE(gather->IsCompleted());
    ASSERT_TRUE(queued->IsCompleted());
    EXPECT_EQ(gather->Wait().code(), absl::StatusCode::kCancelled);
    EXPECT_EQ(queued->Wait().code(), absl::StatusCode::kCancelled);
    EXPECT_THAT(queued->Wait().message(),
                HasSubstr("cancelled before it started: the group was aborted: "
                          "rank 0: out of memory"));
    // The buffers may go now; the peer comes late and must not reach them.
    std::fill(recv->begin(), recv->end(), -1.0f);
    std::vector<float> peer_send(kCount, 7.0f), peer_recv(2 * kCount);
    const absl::Time peer_start = absl::Now();
    const absl::Status peer =
        AllGather(*(*groups)[1], ConstBuffer::Of(peer_send),
                  MutableBuffer::Of(peer_recv));
    EXPECT_FALSE(peer.ok());
    EXPECT_LT(absl::Now() - peer_start, kSlack) << "the peer waited";
    EXPECT_EQ(*recv, std::vector<float>(2 * kCount, -1.0f));
    // Later collectives fail at once, quoting the cause.
    std::vector<float> x(4);
    const absl::Status later = AllReduce(*(*groups)[0], MutableBuffer::Of(x));
    EXPECT_EQ(later.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(later.message(), HasSubstr("rank 0: out of memory"));
    EXPECT_THAT((*groups)[0]->abort_status().message(),
                HasSubstr("rank 0: out of memory"));
    // Twice is fine; the first cause stays.
    (*groups)[0]->Abort(absl::CancelledError("again"));
    EXPECT_THAT((*groups)[0]->abort_status().message(),
                HasSubstr("rank 0: out of memory"));
  }
}

// A rank that will not come (its thread could not start) is announced,
// and the ranks waiting for it in Create fail at once, quoting why, rather
// than at their timeout.
TEST(GlooProcessGroup, ARankThatGivesUpFailsTheOthersAtOnce) {
  GlooOptions options = TestOptions();
  options.timeout = absl::Seconds(60);
  gloo::rendezvous::HashStore store;
  std::vector<absl::Status> statuses(2);
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      statuses[r] = GlooProcessGroup::Create(r, 3, store, options).status();
    });
  }
  absl::SleepFor(absl::Milliseconds(200));
  GlooProcessGroup::AnnounceGiveUp(
      store, 2,
      absl::ResourceExhaustedError("cannot start the thread of rank 2"));
  for (std::thread& t : threads) t.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  for (int r : {0, 1}) {
    EXPECT_EQ(statuses[r].code(), absl::StatusCode::kFailedPrecondition)
        << statuses[r];
    EXPECT_THAT(statuses[r].message(),
                HasSubstr(absl::StrCat(
                    "rank ", r,
                    " of 3: rank 2 gave up before the rendezvous completed: "
                    "RESOURCE_EXHAUSTED: cannot start the thread of rank 2")));
  }
}

TEST(GlooProcessGroup, AWorkerThatCannotStartFailsCreate) {
  gloo::rendezvous::HashStore store;
  FailThreadStartsForTesting(0, 1);
  absl::StatusOr<std::unique_ptr<GlooProcessGroup>> group =
      GlooProcessGroup::Create(0, 1, store, TestOptions());
  FailThreadStartsForTesting(0, 0);
  ASSERT_FALSE(group.ok());
  EXPECT_EQ(group.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(group.status().message(),
              HasSubstr("cannot start the Gloo worker thread of rank 0: "
                        "Resource temporarily unavailable"));
}

TEST(GlooProcessGroup, ArgumentErrorsComeBackAsFailedWorkLikeEveryBackend) {
  auto groups = CreateGroups(2);
  ASSERT_TRUE(groups.ok()) << groups.status();
  GlooProcessGroup& g = *(*groups)[1];
  EXPECT_EQ(g.backend_name(), "gloo");
  EXPECT_TRUE(g.SupportsDType(DType::kF32));
  EXPECT_TRUE(g.SupportsDType(DType::kF16));
  EXPECT_TRUE(g.SupportsDType(DType::kBF16));
  EXPECT_TRUE(g.SupportsDType(DType::kU8));
  EXPECT_TRUE(g.SupportsDType(DType::kI32));
  EXPECT_TRUE(g.SupportsDType(DType::kI64));
  EXPECT_TRUE(g.SupportsDType(DType::kF64));
  EXPECT_FALSE(g.SupportsDType(static_cast<DType>(kNumDTypes)));
  std::vector<float> a(8), b(16);
  BroadcastOptions bad_root;
  bad_root.root = 2;
  ReduceOptions at_one;
  at_one.root = 1;
  struct ArgCase {
    std::unique_ptr<Work> work;
    std::string message;
  };
  ArgCase cases[] = {
      {g.AllReduce({nullptr, 4, DType::kF32}, {}),
       "rank 1: AllReduce(f32, count=4, op=sum) [gloo]: buffer has null data "
       "with count=4"},
      {g.Broadcast(MutableBuffer::Of(a), bad_root),
       "rank 1: Broadcast(f32, count=8, root=2) [gloo]: root 2 is not in "
       "[0, 2)"},
      {g.AllGather(ConstBuffer::Of(a), {b.data(), 15, DType::kF32}, {}),
       "recv.count is 15, expected size() * send.count = 2 * 8"},
      {g.ReduceScatter({b.data(), 15, DType::kF32}, MutableBuffer::Of(a), {}),
       "send.count is 15, expected size() * recv.count = 2 * 8"},
      {g.AllGather({a.data(), 4, DType::kF16}, MutableBuffer::Of(a), {}),
       "send dtype f16 differs from recv dtype f32"},
      {g.AllGather({b.data() + 4, 8, DType::kF32}, MutableBuffer::Of(b), {}),
       "send and recv overlap"},
      {g.Reduce(ConstBuffer::Of(a), {b.data(), 9, DType::kF32}, at_one),
       "recv.count is 9 at the root, expected send.count = 8"},
  };
  for (ArgCase& c : cases) {
    SCOPED_TRACE(c.message);
    ASSERT_TRUE(c.work->IsCompleted());
    const absl::Status s = c.work->Wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
  // Not issued to the peers: the group is still in step.
  EXPECT_TRUE(
      AllOk(RunRanks(*groups, [](GlooProcessGroup& g) { return Barrier(g); })));
}

// ---------------------------------------------------------------------------
// FileStore rendezvous across processes, as the train job's launcher uses it.

// One rank's part: join through `dir`, all-reduce, check, and stay connected
// until every rank is done.
absl::Status RunFileStoreRank(int rank, int size, const std::string& dir) {
  GlooOptions options = TestOptions();
  auto g = GlooProcessGroup::CreateWithFileStore(rank, size, dir, options);
  if (!g.ok()) return g.status();
  AllReduceOptions opts;
  opts.timeout = absl::Seconds(20);
  Data x(DType::kBF16, 100);
  x.Fill(0, 100, rank);
  if (!(*g)->uses_shared_memory()) {
    return absl::InternalError("processes on one host did not share memory");
  }
  if (absl::Status s = AllReduce(**g, x.all(), opts); !s.ok()) return s;
  if ((*g)->shared_memory_collectives() != 1) {
    return absl::InternalError("the all-reduce did not use shared memory");
  }
  if (absl::Status s = x.Expect("allreduce", 0, 100,
                                [&](size_t i) {
                                  return Reduced(DType::kBF16, ReduceOp::kSum,
                                                 size, i);
                                });
      !s.ok())
    return s;
  BarrierOptions barrier;
  barrier.timeout = absl::Seconds(20);
  return Barrier(**g, barrier);
}

TEST(GlooProcessGroup, FileStoreConnectsRanksInSeparateProcesses) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/gloo_filestore_",
                   absl::ToUnixNanos(absl::Now()));
  constexpr int kRanks = 3;
  // Ranks 1 and 2 are child processes (forked before this test starts any
  // thread; earlier tests have joined theirs); rank 0 is this process.
  std::vector<pid_t> children;
  for (int r = 1; r < kRanks; ++r) {
    const pid_t pid = fork();
    ASSERT_NE(pid, -1) << std::strerror(errno);
    if (pid == 0) {
      const absl::Status s = RunFileStoreRank(r, kRanks, dir);
      if (!s.ok())
        std::fprintf(stderr, "rank %d: %s\n", r, s.ToString().c_str());
      std::_Exit(s.ok() ? 0 : 1);
    }
    children.push_back(pid);
  }
  const absl::Status s = RunFileStoreRank(0, kRanks, dir);
  EXPECT_TRUE(s.ok()) << s;
  for (const pid_t pid : children) {
    int wstatus = 0;
    ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
    EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)
        << "child exit status " << wstatus;
  }
}

TEST(GlooProcessGroup, UnusableHostnameIsUnavailable) {
  gloo::rendezvous::HashStore store;
  GlooOptions options;
  options.hostname = "no-such-host.invalid";
  auto g = GlooProcessGroup::Create(0, 1, store, options);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kUnavailable) << g.status();
  EXPECT_THAT(g.status().message(), HasSubstr("no-such-host.invalid"));
}

TEST(GlooProcessGroup, FileStoreInAnUncreatableDirectoryFails) {
  auto g = GlooProcessGroup::CreateWithFileStore(0, 1, "/proc/no/such/dir");
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument)
      << g.status();
}

}  // namespace
}  // namespace comm
}  // namespace chunkzero
