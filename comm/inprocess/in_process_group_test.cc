#include "comm/inprocess/in_process_group.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/mutex.h"
#include "base/thread.h"
#include "comm/testing/every_dtype_check.h"
#include "comm/testing/spawn_ranks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor/half.h"

namespace chunkzero {
namespace comm {
namespace {

using ::chunkzero::comm_testing::AllRanksOk;
using ::chunkzero::comm_testing::SpawnRanks;
using ::testing::HasSubstr;

// ---------------------------------------------------------------------------
// Test data and the serial rank-order reference.

constexpr DType kDTypes[] = {DType::kF32, DType::kF16, DType::kBF16};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax,
                             ReduceOp::kMin};

// Rank-dependent values with non-trivial rounding in every dtype; the
// maximum moves between ranks from element to element.
float InputValue(int rank, size_t i) {
  return 0.1f * static_cast<float>(rank + 1) + static_cast<float>(i) * 1e-3f -
         0.37f * static_cast<float>((rank + i) % 3);
}

// A typed host buffer. Elements are kept as bit patterns (f32 bits or
// 16-bit patterns) so comparisons are bit for bit.
class TestBuffer {
 public:
  TestBuffer(DType dtype, size_t count) : dtype_(dtype) {
    if (dtype == DType::kF32) {
      f32_.assign(count, -7.0f);
    } else {
      h_.assign(count, 0xBEEF);
    }
  }
  size_t count() const {
    return dtype_ == DType::kF32 ? f32_.size() : h_.size();
  }
  MutableBuffer buffer(size_t offset = 0, size_t count = SIZE_MAX) {
    if (count == SIZE_MAX) count = this->count() - offset;
    void* base = dtype_ == DType::kF32 ? static_cast<void*>(f32_.data())
                                       : static_cast<void*>(h_.data());
    return {static_cast<char*>(base) + offset * ElementSize(dtype_), count,
            dtype_};
  }
  // Stores `v` rounded to the dtype.
  void Set(size_t i, float v) {
    if (dtype_ == DType::kF32) {
      f32_[i] = v;
    } else if (dtype_ == DType::kF16) {
      h_[i] = FloatToHalfBits(v);
    } else {
      h_[i] = FloatToBFloat16Bits(v);
    }
  }
  uint32_t Bits(size_t i) const {
    return dtype_ == DType::kF32 ? FloatBits(f32_[i]) : h_[i];
  }

 private:
  DType dtype_;
  std::vector<float> f32_;
  std::vector<uint16_t> h_;
};

float Widen(DType dtype, uint32_t bits) {
  switch (dtype) {
    case DType::kF32:
      return BitsToFloat(bits);
    case DType::kF16:
      return HalfBitsToFloat(static_cast<uint16_t>(bits));
    case DType::kBF16:
      return BFloat16BitsToFloat(static_cast<uint16_t>(bits));
    default:  // The float types only.
      break;
  }
  return 0;
}

uint32_t Narrow(DType dtype, float v) {
  switch (dtype) {
    case DType::kF32:
      return FloatBits(v);
    case DType::kF16:
      return FloatToHalfBits(v);
    case DType::kBF16:
      return FloatToBFloat16Bits(v);
    default:  // The float types only.
      break;
  }
  return 0;
}

// Bits of InputValue(rank, i) stored in `dtype`.
uint32_t InputBits(DType dtype, int rank, size_t i) {
  return Narrow(dtype, InputValue(rank, i));
}

// The serial reduction in rank order of element i over n ranks: acc = x0;
// acc = acc op xk; kAvg divides by n; 16-bit rounds once at the end.
uint32_t ReferenceReduce(DType dtype, ReduceOp op, int n, size_t i) {
  if (n == 1) return InputBits(dtype, 0, i);
  float acc = Widen(dtype, InputBits(dtype, 0, i));
  for (int k = 1; k < n; ++k) {
    const float x = Widen(dtype, InputBits(dtype, k, i));
    if (op == ReduceOp::kMax) {
      acc = acc < x ? x : acc;
    } else if (op == ReduceOp::kMin) {
      acc = x < acc ? x : acc;
    } else {
      acc = acc + x;
    }
  }
  if (op == ReduceOp::kAvg) acc /= static_cast<float>(n);
  return Narrow(dtype, acc);
}

// Returns an error naming the first element of `buf[offset, offset+count)`
// whose bits differ from want(i).
absl::Status CheckBits(absl::string_view what, const TestBuffer& buf,
                       size_t offset, size_t count,
                       const std::function<uint32_t(size_t)>& want) {
  for (size_t i = 0; i < count; ++i) {
    const uint32_t got = buf.Bits(offset + i);
    const uint32_t expected = want(i);
    if (got != expected) {
      return absl::InternalError(
          absl::StrFormat("%s: element %d: got bits 0x%x, want 0x%x", what,
                          offset + i, got, expected));
    }
  }
  return absl::OkStatus();
}

// Every rank runs the same list of cases in the same order; each case issues
// one collective, waits, and checks this rank's result bit for bit.
struct Case {
  std::string name;
  std::function<absl::Status(ProcessGroup&)> run;
};

std::vector<Case> AllCases(int n) {
  std::vector<Case> cases;
  const size_t kCounts[] = {0, 1, 37, 4500};      // 4500: > one 2048 tile
  const size_t kSlotCounts[] = {0, 1, 37, 2100};  // per-rank counts
  for (DType dtype : kDTypes) {
    const std::string dt(DTypeName(dtype));
    for (size_t count : kCounts) {
      for (ReduceOp op : kOps) {
        cases.push_back(
            {absl::StrCat("AllReduce ", dt, " count=", count,
                          " op=", ReduceOpName(op)),
             [=](ProcessGroup& g) -> absl::Status {
               TestBuffer buf(dtype, count);
               for (size_t i = 0; i < count; ++i)
                 buf.Set(i, InputValue(g.rank(), i));
               AllReduceOptions opts;
               opts.op = op;
               if (absl::Status s = AllReduce(g, buf.buffer(), opts); !s.ok())
                 return s;
               return CheckBits("result", buf, 0, count, [&](size_t i) {
                 return ReferenceReduce(dtype, op, n, i);
               });
             }});
      }
      for (int root : {0, n - 1}) {
        cases.push_back(
            {absl::StrCat("Broadcast ", dt, " count=", count, " root=", root),
             [=](ProcessGroup& g) -> absl::Status {
               TestBuffer buf(dtype, count);
               if (g.rank() == root) {
                 for (size_t i = 0; i < count; ++i)
                   buf.Set(i, InputValue(root, i));
               }
               BroadcastOptions opts;
               opts.root = root;
               if (absl::Status s = Broadcast(g, buf.buffer(), opts); !s.ok())
                 return s;
               return CheckBits("result", buf, 0, count, [&](size_t i) {
                 return InputBits(dtype, root, i);
               });
             }});
        for (ReduceOp op : kOps) {
          for (bool in_place : {false, true}) {
            cases.push_back(
                {absl::StrCat("Reduce ", dt, " count=", count, " root=", root,
                              " op=", ReduceOpName(op),
                              in_place ? " in-place" : ""),
                 [=](ProcessGroup& g) -> absl::Status {
                   TestBuffer send(dtype, count);
                   TestBuffer recv(dtype, count);
                   for (size_t i = 0; i < count; ++i)
                     send.Set(i, InputValue(g.rank(), i));
                   ReduceOptions opts;
                   opts.root = root;
                   opts.op = op;
                   TestBuffer& out = in_place ? send : recv;
                   const bool is_root = g.rank() == root;
                   if (absl::Status s = Reduce(
                           g, send.buffer(),
                           is_root ? out.buffer() : MutableBuffer{}, opts);
                       !s.ok())
                     return s;
                   if (!is_root) {  // Untouched.
                     return CheckBits("non-root send", send, 0, count,
                                      [&](size_t i) {
                                        return InputBits(dtype, g.rank(), i);
                                      });
                   }
                   return CheckBits("result", out, 0, count, [&](size_t i) {
                     return ReferenceReduce(dtype, op, n, i);
                   });
                 }});
          }
        }
      }
    }
    for (size_t count : kSlotCounts) {
      for (bool in_place : {false, true}) {
        cases.push_back(
            {absl::StrCat("AllGather ", dt, " count=", count,
                          in_place ? " in-place" : ""),
             [=](ProcessGroup& g) -> absl::Status {
               const int r = g.rank();
               TestBuffer recv(dtype, n * count);
               TestBuffer own(dtype, count);
               TestBuffer& src = in_place ? recv : own;
               const size_t src_offset = in_place ? r * count : 0;
               for (size_t i = 0; i < count; ++i)
                 src.Set(src_offset + i, InputValue(r, i));
               if (absl::Status s = AllGather(g, src.buffer(src_offset, count),
                                              recv.buffer());
                   !s.ok())
                 return s;
               return CheckBits("result", recv, 0, n * count, [&](size_t i) {
                 return InputBits(dtype, static_cast<int>(i / count),
                                  i % count);
               });
             }});
        for (ReduceOp op : kOps) {
          cases.push_back(
              {absl::StrCat("ReduceScatter ", dt, " count=", count, " op=",
                            ReduceOpName(op), in_place ? " in-place" : ""),
               [=](ProcessGroup& g) -> absl::Status {
                 const int r = g.rank();
                 // Slot k of rank r's send holds elements [k*count,
                 // (k+1)*count) of rank r's input, so the reference is
                 // ReferenceReduce at index r*count + i.
                 TestBuffer send(dtype, n * count);
                 for (size_t i = 0; i < n * count; ++i)
                   send.Set(i, InputValue(r, i));
                 TestBuffer own(dtype, count);
                 TestBuffer& dst = in_place ? send : own;
                 const size_t dst_offset = in_place ? r * count : 0;
                 ReduceScatterOptions opts;
                 opts.op = op;
                 if (absl::Status s = ReduceScatter(
                         g, send.buffer(), dst.buffer(dst_offset, count), opts);
                     !s.ok())
                   return s;
                 return CheckBits(
                     "result", dst, dst_offset, count, [&](size_t i) {
                       return ReferenceReduce(dtype, op, n, r * count + i);
                     });
               }});
        }
      }
    }
  }
  cases.push_back({"Barrier", [](ProcessGroup& g) { return Barrier(g); }});
  return cases;
}

class InProcessWorldSizeTest : public ::testing::TestWithParam<int> {};

TEST_P(InProcessWorldSizeTest, EveryOpMatchesSerialReferenceBitForBit) {
  const int n = GetParam();
  const std::vector<Case> cases = AllCases(n);
  const std::vector<absl::Status> statuses =
      SpawnRanks(n, [&](ProcessGroup& g) -> absl::Status {
        for (const Case& c : cases) {
          if (absl::Status s = c.run(g); !s.ok()) {
            return absl::Status(s.code(),
                                absl::StrCat(c.name, ": ", s.message()));
          }
        }
        return absl::OkStatus();
      });
  EXPECT_TRUE(AllRanksOk(statuses)) << "world size " << n;
}

TEST_P(InProcessWorldSizeTest, AsyncOpsOverlapAndCompleteInIssueOrder) {
  const int n = GetParam();
  constexpr size_t kCount = 300;
  EXPECT_TRUE(AllRanksOk(SpawnRanks(n, [&](ProcessGroup& g) -> absl::Status {
    const int r = g.rank();
    TestBuffer a(DType::kF32, kCount), gathered(DType::kF32, n * kCount),
        own(DType::kF32, kCount), b(DType::kBF16, kCount),
        scatter_in(DType::kF16, n * kCount), scatter_out(DType::kF16, kCount);
    for (size_t i = 0; i < kCount; ++i) {
      a.Set(i, InputValue(r, i));
      own.Set(i, InputValue(r, i));
      if (r == 0) b.Set(i, InputValue(0, i));
    }
    for (size_t i = 0; i < n * kCount; ++i) scatter_in.Set(i, InputValue(r, i));
    // Issue everything, then wait in order.
    std::vector<std::unique_ptr<Work>> works;
    works.push_back(g.AllReduce(a.buffer(), {}));
    works.push_back(g.AllGather(own.buffer(), gathered.buffer(), {}));
    works.push_back(g.Broadcast(b.buffer(), {}));
    works.push_back(
        g.ReduceScatter(scatter_in.buffer(), scatter_out.buffer(), {}));
    works.push_back(g.Barrier({}));
    for (auto& w : works) {
      if (absl::Status s = w->Wait(); !s.ok()) return s;
      if (!w->IsCompleted()) return absl::InternalError("not completed");
    }
    if (absl::Status s = CheckBits("allreduce", a, 0, kCount,
                                   [&](size_t i) {
                                     return ReferenceReduce(
                                         DType::kF32, ReduceOp::kSum, n, i);
                                   });
        !s.ok())
      return s;
    if (absl::Status s = CheckBits(
            "allgather", gathered, 0, n * kCount,
            [&](size_t i) {
              return InputBits(DType::kF32, static_cast<int>(i / kCount),
                               i % kCount);
            });
        !s.ok())
      return s;
    if (absl::Status s =
            CheckBits("broadcast", b, 0, kCount,
                      [&](size_t i) { return InputBits(DType::kBF16, 0, i); });
        !s.ok())
      return s;
    return CheckBits("reducescatter", scatter_out, 0, kCount, [&](size_t i) {
      return ReferenceReduce(DType::kF16, ReduceOp::kSum, n, r * kCount + i);
    });
  })));
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, InProcessWorldSizeTest,
                         ::testing::Values(1, 2, 3, 4, 8),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat("N", info.param);
                         });

// ---------------------------------------------------------------------------
// Mismatched collectives.

struct MismatchCase {
  std::string name;
  // Issues rank r's collective (r = 0 or 1) and returns its status.
  std::function<absl::Status(ProcessGroup&, std::vector<float>&)> issue;
  std::string expected_message;
};

TEST(InProcessWorld, IntegerAndF64CollectivesAreExactWithEveryOp) {
  for (int n : {1, 2, 3}) {
    SCOPED_TRACE(absl::StrCat(n, " ranks"));
    EXPECT_TRUE(comm_testing::AllRanksOk(
        comm_testing::SpawnRanks(n, comm_testing::CheckEveryDTypeCollective)));
  }
}

TEST(InProcessWorld, MismatchedCollectivesFailOnEveryRankNamingBothSides) {
  const std::vector<MismatchCase> cases = {
      {"kind",
       [](ProcessGroup& g, std::vector<float>& x) {
         if (g.rank() == 0) return AllReduce(g, MutableBuffer::Of(x));
         std::vector<float> recv(20);
         return AllGather(g, ConstBuffer::Of(x), MutableBuffer::Of(recv));
       },
       "collective #0 mismatch: rank 0 called AllReduce(f32, count=10, "
       "op=sum), rank 1 called AllGather(f32, count=10)"},
      {"count",
       [](ProcessGroup& g, std::vector<float>& x) {
         return AllReduce(g, {x.data(), g.rank() == 0 ? 10u : 9u, DType::kF32});
       },
       "collective #0 mismatch: rank 0 called AllReduce(f32, count=10, "
       "op=sum), rank 1 called AllReduce(f32, count=9, op=sum)"},
      {"dtype",
       [](ProcessGroup& g, std::vector<float>& x) {
         return AllReduce(
             g, {x.data(), 10, g.rank() == 0 ? DType::kF32 : DType::kBF16});
       },
       "collective #0 mismatch: rank 0 called AllReduce(f32, count=10, "
       "op=sum), rank 1 called AllReduce(bf16, count=10, op=sum)"},
      {"root",
       [](ProcessGroup& g, std::vector<float>& x) {
         BroadcastOptions opts;
         opts.root = g.rank();
         return Broadcast(g, MutableBuffer::Of(x), opts);
       },
       "collective #0 mismatch: rank 0 called Broadcast(f32, count=10, "
       "root=0), rank 1 called Broadcast(f32, count=10, root=1)"},
      {"op",
       [](ProcessGroup& g, std::vector<float>& x) {
         AllReduceOptions opts;
         opts.op = g.rank() == 0 ? ReduceOp::kSum : ReduceOp::kMax;
         return AllReduce(g, MutableBuffer::Of(x), opts);
       },
       "collective #0 mismatch: rank 0 called AllReduce(f32, count=10, "
       "op=sum), rank 1 called AllReduce(f32, count=10, op=max)"},
      // Same shape, different purpose: e.g. two chunks of one size.
      {"tag",
       [](ProcessGroup& g, std::vector<float>& x) {
         std::vector<float> recv(20);
         AllGatherOptions opts;
         opts.tag = g.rank() == 0 ? "fp16_param#3" : "fp16_param#4";
         return AllGather(g, ConstBuffer::Of(x), MutableBuffer::Of(recv), opts);
       },
       "collective #0 mismatch: rank 0 called AllGather(f32, count=10, "
       "tag=fp16_param#3), rank 1 called AllGather(f32, count=10, "
       "tag=fp16_param#4)"},
  };
  for (const MismatchCase& c : cases) {
    SCOPED_TRACE(c.name);
    InProcessWorld world(2);
    std::vector<absl::Status> follow_up(2);
    const std::vector<absl::Status> statuses =
        SpawnRanks(world, [&](ProcessGroup& g) {
          std::vector<float> x(10, 1.0f);
          absl::Status s = c.issue(g, x);
          // The group stays usable: a matching collective now succeeds.
          std::vector<float> y(4, static_cast<float>(g.rank()));
          follow_up[g.rank()] = AllReduce(g, MutableBuffer::Of(y));
          if (follow_up[g.rank()].ok() && y[3] != 1.0f) {
            follow_up[g.rank()] = absl::InternalError("wrong follow-up sum");
          }
          return s;
        });
    for (int r = 0; r < 2; ++r) {
      SCOPED_TRACE(absl::StrCat("rank ", r));
      EXPECT_EQ(statuses[r].code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(statuses[r].message(), HasSubstr(c.expected_message));
      EXPECT_TRUE(follow_up[r].ok()) << follow_up[r];
    }
    EXPECT_TRUE(world.abort_status().ok());
  }
}

// ---------------------------------------------------------------------------
// Missing ranks, timeouts, abort.

TEST(InProcessWorld, MissingRankMakesOthersTimeOutNamingItThenWorldIsAborted) {
  constexpr absl::Duration kTimeout = absl::Milliseconds(200);
  InProcessWorld world(3);
  std::vector<absl::Duration> elapsed(3);
  const std::vector<absl::Status> statuses =
      SpawnRanks(world, [&](ProcessGroup& g) -> absl::Status {
        if (g.rank() == 1) return absl::OkStatus();  // Never arrives.
        std::vector<float> x(8, 1.0f);
        AllReduceOptions opts;
        opts.timeout = kTimeout;
        const absl::Time start = absl::Now();
        absl::Status s = AllReduce(g, MutableBuffer::Of(x), opts);
        elapsed[g.rank()] = absl::Now() - start;
        return s;
      });
  EXPECT_TRUE(statuses[1].ok());
  for (int r : {0, 2}) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    EXPECT_EQ(statuses[r].code(), absl::StatusCode::kDeadlineExceeded)
        << statuses[r];
    EXPECT_THAT(statuses[r].message(),
                HasSubstr("collective #0 AllReduce(f32, count=8, op=sum)"));
    EXPECT_THAT(statuses[r].message(),
                HasSubstr("waiting for rank 1 to join (rank 1 has joined no "
                          "collective yet)"));
    EXPECT_LT(elapsed[r], kTimeout + absl::Seconds(2));  // slack for TSAN
  }
  // The first rank to time out waited the full timeout; the other one may
  // have been woken by its abort sooner.
  EXPECT_GE(std::max(elapsed[0], elapsed[2]), kTimeout - absl::Milliseconds(5));
  EXPECT_EQ(world.abort_status().code(), absl::StatusCode::kDeadlineExceeded);

  // Every later collective fails fast with FailedPrecondition quoting the
  // first failure, on every rank.
  const std::vector<absl::Status> later =
      SpawnRanks(world, [](ProcessGroup& g) {
        const absl::Time start = absl::Now();
        absl::Status s = Barrier(g);
        if (absl::Now() - start > absl::Seconds(2)) {
          return absl::InternalError("did not fail fast");
        }
        return s;
      });
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    EXPECT_EQ(later[r].code(), absl::StatusCode::kFailedPrecondition)
        << later[r];
    EXPECT_THAT(later[r].message(),
                HasSubstr("aborted by an earlier failure: collective #0 "
                          "AllReduce(f32, count=8, op=sum) timed out"));
  }
}

TEST(InProcessWorld, TimeoutNamesTheLastCollectiveTheMissingRankJoined) {
  InProcessWorld world(2);
  const std::vector<absl::Status> statuses =
      SpawnRanks(world, [](ProcessGroup& g) -> absl::Status {
        if (absl::Status s = Barrier(g); !s.ok()) return s;
        if (g.rank() == 1) return absl::OkStatus();
        BarrierOptions opts;
        opts.timeout = absl::Milliseconds(100);
        return Barrier(g, opts);
      });
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(statuses[0].message(),
              HasSubstr("collective #1 Barrier() timed out on rank 0 after "
                        "100ms waiting for rank 1 to join (rank 1 last "
                        "joined collective #0)"));
}

TEST(Work, WaitWithDeadlineReturnsDeadlineExceededWhileOpIsPending) {
  Notification rank0_checked;
  EXPECT_TRUE(AllRanksOk(SpawnRanks(2, [&](ProcessGroup& g) -> absl::Status {
    std::vector<float> x(16, 1.0f + g.rank());
    if (g.rank() == 1) {
      rank0_checked.WaitForNotification();
      return AllReduce(g, MutableBuffer::Of(x));
    }
    std::unique_ptr<Work> w = g.AllReduce(MutableBuffer::Of(x), {});
    // Rank 1 has not issued yet: the op cannot complete.
    absl::Status early = w->Wait(absl::Now() + absl::Milliseconds(20));
    const bool completed = w->IsCompleted();
    rank0_checked.Notify();
    if (early.code() != absl::StatusCode::kDeadlineExceeded || completed) {
      return absl::InternalError(
          absl::StrCat("early wait: ", early.ToString()));
    }
    if (!absl::StrContains(early.message(), "still running")) {
      return absl::InternalError(early.ToString());
    }
    if (absl::Status s = w->Wait(); !s.ok()) return s;  // Still succeeds.
    return x[15] == 3.0f ? absl::OkStatus() : absl::InternalError("bad sum");
  })));
}

TEST(InProcessWorld, DestructionCancelsPendingOpsWithoutHanging) {
  std::unique_ptr<Work> waiting, queued;
  {
    InProcessWorld world(2);
    std::vector<float> x(4), y(4);
    waiting = (*world.group(0))->AllReduce(MutableBuffer::Of(x), {});  // 5 min
    queued = (*world.group(0))->AllReduce(MutableBuffer::Of(y), {});
    EXPECT_FALSE(waiting->IsCompleted());
  }  // Rank 1 never arrives; must not wait 5 minutes.
  ASSERT_TRUE(waiting->IsCompleted());
  ASSERT_TRUE(queued->IsCompleted());
  EXPECT_EQ(waiting->Wait().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(queued->Wait().code(), absl::StatusCode::kCancelled);
}

TEST(InProcessWorld, ArgumentErrorsComeBackAsFailedWorkNamingRankAndOp) {
  InProcessWorld world(2);
  ProcessGroup& g = **world.group(1);
  std::vector<float> a(8), b(16);
  struct ArgCase {
    std::string name;
    std::function<std::unique_ptr<Work>()> issue;
    std::string message;
  };
  const std::vector<ArgCase> cases = {
      {"null data",
       [&] {
         return g.AllReduce({nullptr, 4, DType::kF32}, {});
       },
       "rank 1: AllReduce(f32, count=4, op=sum) [inprocess]: buffer has null "
       "data with count=4"},
      {"bad root",
       [&] {
         BroadcastOptions o;
         o.root = 2;
         return g.Broadcast(MutableBuffer::Of(a), o);
       },
       "rank 1: Broadcast(f32, count=8, root=2) [inprocess]: root 2 is not in "
       "[0, 2)"},
      {"allgather count",
       [&] {
         return g.AllGather(ConstBuffer::Of(a), {b.data(), 15, DType::kF32},
                            {});
       },
       "recv.count is 15, expected size() * send.count = 2 * 8"},
      {"reducescatter count",
       [&] {
         return g.ReduceScatter({b.data(), 15, DType::kF32},
                                MutableBuffer::Of(a), {});
       },
       "send.count is 15, expected size() * recv.count = 2 * 8"},
      {"dtype mismatch",
       [&] {
         return g.AllGather({a.data(), 4, DType::kF16}, MutableBuffer::Of(a),
                            {});
       },
       "send dtype f16 differs from recv dtype f32"},
      {"partial overlap",
       [&] {
         // Rank 1's in-place slot is b[8..16); b[4..12) overlaps wrongly.
         return g.AllGather({b.data() + 4, 8, DType::kF32},
                            MutableBuffer::Of(b), {});
       },
       "send and recv overlap"},
      {"reduce recv count at root",
       [&] {
         ReduceOptions o;
         o.root = 1;
         return g.Reduce(ConstBuffer::Of(a), {b.data(), 9, DType::kF32}, o);
       },
       "recv.count is 9 at the root, expected send.count = 8"},
  };
  for (const ArgCase& c : cases) {
    SCOPED_TRACE(c.name);
    std::unique_ptr<Work> w = c.issue();
    ASSERT_TRUE(w->IsCompleted());
    absl::Status s = w->Wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
  EXPECT_TRUE(world.abort_status().ok());
}

// A library never aborts on bad input: a bad world size or rank is an
// error naming them.
TEST(InProcessWorld, BadWorldSizeOrRankIsInvalidArgument) {
  InProcessWorld empty(-3);
  EXPECT_EQ(empty.size(), 0);
  absl::StatusOr<ProcessGroup*> none = empty.group(0);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(none.status().message(),
            "InProcessWorld::group: rank 0 is not in a world of size -3 (a "
            "world needs at least one rank)");
  InProcessWorld world(2);
  EXPECT_TRUE(world.group(1).ok());
  for (int rank : {-1, 2}) {
    absl::StatusOr<ProcessGroup*> bad = world.group(rank);
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(bad.status().message(),
              absl::StrCat("InProcessWorld::group: rank ", rank,
                           " is not in a world of size 2"));
  }
  const std::vector<absl::Status> spawned =
      SpawnRanks(0, [](ProcessGroup&) { return absl::OkStatus(); });
  ASSERT_EQ(spawned.size(), 1u);
  EXPECT_EQ(spawned[0].code(), absl::StatusCode::kInvalidArgument);
}

TEST(InProcessWorld, AWorkerThatCannotStartFailsEveryGroup) {
  FailThreadStartsForTesting(/*skip=*/1, /*fail=*/1);
  InProcessWorld world(3);
  FailThreadStartsForTesting(0, 0);
  for (int r = 0; r < 3; ++r) {
    absl::StatusOr<ProcessGroup*> group = world.group(r);
    ASSERT_FALSE(group.ok());
    EXPECT_EQ(group.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(std::string(group.status().message()),
                HasSubstr("InProcessWorld of 3 ranks: cannot start the "
                          "in-process comm worker of rank 1: Resource "
                          "temporarily unavailable"));
  }
}

TEST(InProcessWorld, AbortCancelsWhatIsQueuedAndLaterCallsFail) {
  InProcessWorld world(2);
  ProcessGroup& group = **world.group(0);
  std::vector<float> a(4), b(4);
  std::unique_ptr<Work> waiting = group.AllReduce(MutableBuffer::Of(a), {});
  std::unique_ptr<Work> queued = group.AllReduce(MutableBuffer::Of(b), {});
  group.Abort(absl::UnavailableError("rank 0 lost its device"));
  ASSERT_TRUE(waiting->IsCompleted());
  ASSERT_TRUE(queued->IsCompleted());
  // Failed in the rendezvous (Unavailable) or cancelled in the queue,
  // depending on whether the worker had reached it.
  EXPECT_THAT(std::string(waiting->Wait().message()),
              HasSubstr("rank 0 lost its device"));
  EXPECT_EQ(queued->Wait().code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(std::string(queued->Wait().message()),
              HasSubstr("cancelled before it started: the group was aborted: "
                        "rank 0 lost its device"));
  EXPECT_EQ(world.abort_status().message(), "rank 0 lost its device");
  EXPECT_FALSE(AllReduce(group, MutableBuffer::Of(a)).ok());
  // The peer fails at once rather than at its timeout.
  EXPECT_FALSE(AllReduce(**world.group(1), MutableBuffer::Of(a)).ok());
  group.Abort(absl::CancelledError("again"));  // Idempotent.
}

}  // namespace
}  // namespace comm
}  // namespace chunkzero
