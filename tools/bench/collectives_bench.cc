// In-process collective bandwidth, nccl-tests style (DESIGN.md §7), and
// Gloo's shared-memory path against its TCP path (BM_GlooSharedMemoryVsTcp,
// at the end).
//
//   bazel run --config=opt //tools/bench:collectives_bench --
//       --benchmark_filter='AllReduce/ranks:2/bytes:67108864'
//
// For each collective, world size N in {2, 4} and size S from 1 KiB to
// 256 MiB (f32), rank 0 runs the timed loop on the benchmark thread and
// ranks 1..N-1 run the same number of iterations on helper threads. S is the
// nccl-tests size: the buffer for AllReduce and Broadcast, the FULL gathered
// recv for AllGather (send is S/N), the FULL send for ReduceScatter.
// Counters (GB/s = 1e9 bytes/s, over wall time):
//   algbw          S / time
//   busbw          algbw * factor (AllReduce 2(N-1)/N, AllGather and
//                  ReduceScatter (N-1)/N, Broadcast 1)
//   memcpy         bandwidth of a 2-thread memcpy of the same S bytes (each
//                  thread copies S/2 into a separate destination), measured
//                  in this binary: S / time
//   memcpy_each    2 threads each copying their own S bytes, S / time: what
//                  one thread (one "rank") gets while both copy
//   busbw_over_memcpy, busbw_over_memcpy_each: the ratios
// Every benchmark first runs the collective once on known data and checks the
// result on every rank (SkipWithError if wrong).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "comm/gloo/gloo_process_group.h"
#include "comm/inprocess/in_process_group.h"
#include "comm/process_group.h"
#include "comm/recording_process_group.h"
#include "gloo/rendezvous/hash_store.h"

namespace chunkzero {
namespace comm {
namespace {

// Bandwidth (bytes/s) of `threads` threads each copying `bytes_per_thread`
// bytes between private buffers, best of a few repetitions. Measured once per
// configuration and cached.
double MemcpyBandwidth(size_t bytes_per_thread, int threads,
                       size_t bytes_reported) {
  static auto* cache = new std::map<std::pair<size_t, int>, double>();
  auto key = std::make_pair(bytes_per_thread, threads);
  if (auto it = cache->find(key); it != cache->end()) return it->second;
  std::vector<std::vector<char>> src(threads), dst(threads);
  for (int t = 0; t < threads; ++t) {
    src[t].assign(bytes_per_thread, static_cast<char>(t + 1));
    dst[t].assign(bytes_per_thread, 0);
  }
  // Enough repetitions for ~50 ms per measurement at ~10 GB/s.
  const int reps = static_cast<int>(std::clamp<size_t>(
      (size_t{500} << 20) / (bytes_per_thread * threads + 1), 1, 100000));
  double best = 0;
  for (int trial = 0; trial < 5; ++trial) {
    const absl::Time start = absl::Now();
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        for (int i = 0; i < reps; ++i) {
          std::memcpy(dst[t].data(), src[t].data(), bytes_per_thread);
          benchmark::ClobberMemory();
        }
      });
    }
    for (auto& w : workers) w.join();
    const double secs = absl::ToDoubleSeconds(absl::Now() - start);
    best = std::max(best, static_cast<double>(bytes_reported) * reps / secs);
  }
  (*cache)[key] = best;
  return best;
}

// Per-rank buffers and the issue function of one collective.
struct Setup {
  std::vector<std::vector<float>> send, recv;
  std::function<std::unique_ptr<Work>(ProcessGroup&, int)> issue;
  std::function<void()> fill;               // Known inputs.
  std::function<bool(std::string*)> check;  // After one run.
};

// Fills `*out` (its lambdas refer to *out, which must stay put).
void MakeSetup(CollectiveKind kind, int n, size_t full_count, Setup* out) {
  Setup& s = *out;
  s.send.resize(n);
  s.recv.resize(n);
  const size_t slot = full_count / n;
  const absl::Duration timeout = absl::Seconds(60);
  switch (kind) {
    case CollectiveKind::kAllReduce:
      for (int r = 0; r < n; ++r) s.recv[r].resize(full_count);
      s.fill = [&s, n, full_count] {
        for (int r = 0; r < n; ++r)
          for (size_t i = 0; i < full_count; ++i)
            s.recv[r][i] = static_cast<float>(i % 13 + r);
      };
      s.check = [&s, n, full_count](std::string* err) {
        for (int r = 0; r < n; ++r)
          for (size_t i = 0; i < full_count; ++i) {
            const float want =
                static_cast<float>(n * (i % 13) + n * (n - 1) / 2);
            if (s.recv[r][i] != want) {
              *err = absl::StrCat("rank ", r, " element ", i, ": ",
                                  s.recv[r][i], " != ", want);
              return false;
            }
          }
        return true;
      };
      s.issue = [&s, timeout](ProcessGroup& g, int r) {
        AllReduceOptions o;
        o.timeout = timeout;
        return g.AllReduce(MutableBuffer::Of(s.recv[r]), o);
      };
      break;
    case CollectiveKind::kBroadcast:
      for (int r = 0; r < n; ++r) s.recv[r].resize(full_count);
      s.fill = [&s, n, full_count] {
        for (int r = 0; r < n; ++r)
          for (size_t i = 0; i < full_count; ++i)
            s.recv[r][i] = r == 0 ? static_cast<float>(i % 101) : -1.0f;
      };
      s.check = [&s, n, full_count](std::string* err) {
        for (int r = 0; r < n; ++r)
          for (size_t i = 0; i < full_count; ++i)
            if (s.recv[r][i] != static_cast<float>(i % 101)) {
              *err = absl::StrCat("rank ", r, " element ", i);
              return false;
            }
        return true;
      };
      s.issue = [&s, timeout](ProcessGroup& g, int r) {
        BroadcastOptions o;
        o.timeout = timeout;
        return g.Broadcast(MutableBuffer::Of(s.recv[r]), o);
      };
      break;
    case CollectiveKind::kAllGather:
      for (int r = 0; r < n; ++r) {
        s.send[r].resize(slot);
        s.recv[r].resize(full_count);
      }
      s.fill = [&s, n, slot] {
        for (int r = 0; r < n; ++r) {
          for (size_t j = 0; j < slot; ++j)
            s.send[r][j] = static_cast<float>(r * 1000 + j % 97);
          std::fill(s.recv[r].begin(), s.recv[r].end(), -1.0f);
        }
      };
      s.check = [&s, n, slot](std::string* err) {
        for (int r = 0; r < n; ++r)
          for (int k = 0; k < n; ++k)
            for (size_t j = 0; j < slot; ++j)
              if (s.recv[r][k * slot + j] !=
                  static_cast<float>(k * 1000 + j % 97)) {
                *err = absl::StrCat("rank ", r, " slot ", k, " element ", j);
                return false;
              }
        return true;
      };
      s.issue = [&s, timeout](ProcessGroup& g, int r) {
        AllGatherOptions o;
        o.timeout = timeout;
        return g.AllGather(ConstBuffer::Of(s.send[r]),
                           MutableBuffer::Of(s.recv[r]), o);
      };
      break;
    case CollectiveKind::kReduceScatter:
      for (int r = 0; r < n; ++r) {
        s.send[r].resize(full_count);
        s.recv[r].resize(slot);
      }
      s.fill = [&s, n, full_count] {
        for (int r = 0; r < n; ++r)
          for (size_t i = 0; i < full_count; ++i)
            s.send[r][i] = static_cast<float>(i % 13 + r);
      };
      s.check = [&s, n, slot](std::string* err) {
        for (int r = 0; r < n; ++r)
          for (size_t j = 0; j < slot; ++j) {
            const float want =
                static_cast<float>(n * ((r * slot + j) % 13) + n * (n - 1) / 2);
            if (s.recv[r][j] != want) {
              *err = absl::StrCat("rank ", r, " element ", j);
              return false;
            }
          }
        return true;
      };
      s.issue = [&s, timeout](ProcessGroup& g, int r) {
        ReduceScatterOptions o;
        o.timeout = timeout;
        return g.ReduceScatter(ConstBuffer::Of(s.send[r]),
                               MutableBuffer::Of(s.recv[r]), o);
      };
      break;
    default:
      break;
  }
}

// Runs `iterations` of rank r's collective; stops at the first error.
absl::Status RunRank(Setup& s, InProcessWorld& world, int r,
                     int64_t iterations) {
  for (int64_t i = 0; i < iterations; ++i) {
    if (absl::Status st = s.issue(**world.group(r), r)->Wait(); !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

void BM_Collective(benchmark::State& state, CollectiveKind kind) {
  const int n = static_cast<int>(state.range(0));
  const size_t bytes = static_cast<size_t>(state.range(1));
  const size_t full_count = bytes / sizeof(float);
  InProcessWorld world(n);
  Setup s;
  MakeSetup(kind, n, full_count, &s);

  // Verify once on known data, every rank.
  s.fill();
  {
    std::vector<absl::Status> statuses(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back(
          [&, r] { statuses[r] = RunRank(s, world, r, /*iterations=*/1); });
    }
    for (auto& t : threads) t.join();
    for (const absl::Status& st : statuses) {
      if (!st.ok()) {
        state.SkipWithError(st.ToString().c_str());
        return;
      }
    }
    std::string err;
    if (!s.check(&err)) {
      state.SkipWithError(("wrong result: " + err).c_str());
      return;
    }
  }

  // Timed: rank 0 here, ranks 1..n-1 on helpers, same iteration count.
  std::vector<absl::Status> helper_status(n);
  std::vector<std::thread> helpers;
  for (int r = 1; r < n; ++r) {
    helpers.emplace_back([&, r] {
      helper_status[r] = RunRank(s, world, r, state.max_iterations);
    });
  }
  const absl::Time start = absl::Now();
  for (auto _ : state) {
    if (absl::Status st = s.issue(**world.group(0), 0)->Wait(); !st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      world.Abort(st);  // Lets the helpers stop.
      break;
    }
  }
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);
  for (auto& t : helpers) t.join();

  // Rates over the loop's wall time, as plain (non-rate) counters in GB/s.
  const double factor = BusBytesFactor(kind, n);
  const double moved = static_cast<double>(bytes) * state.iterations();
  const double algbw = moved / secs;
  const double busbw = algbw * factor;
  const double memcpy_bw = MemcpyBandwidth(bytes / 2, 2, bytes);
  const double memcpy_each_bw = MemcpyBandwidth(bytes, 2, bytes);
  state.counters["algbw_GBps"] = algbw / 1e9;
  state.counters["busbw_GBps"] = busbw / 1e9;
  state.counters["memcpy_GBps"] = memcpy_bw / 1e9;
  state.counters["memcpy_each_GBps"] = memcpy_each_bw / 1e9;
  state.counters["busbw_over_memcpy"] = busbw / memcpy_bw;
  state.counters["busbw_over_memcpy_each"] = busbw / memcpy_each_bw;
}

void Sizes(benchmark::internal::Benchmark* b) {
  for (int n : {2, 4}) {
    for (int64_t bytes = 1 << 10; bytes <= (int64_t{256} << 20); bytes *= 4) {
      b->Args({n, bytes});
    }
  }
  b->ArgNames({"ranks", "bytes"})->UseRealTime()->MinTime(0.3);
}

BENCHMARK_CAPTURE(BM_Collective, AllReduce, CollectiveKind::kAllReduce)
    ->Apply(Sizes);
BENCHMARK_CAPTURE(BM_Collective, AllGather, CollectiveKind::kAllGather)
    ->Apply(Sizes);
BENCHMARK_CAPTURE(BM_Collective, ReduceScatter, CollectiveKind::kReduceScatter)
    ->Apply(Sizes);
BENCHMARK_CAPTURE(BM_Collective, Broadcast, CollectiveKind::kBroadcast)
    ->Apply(Sizes);

// Runs `reps` of the collective on every rank of `groups` (rank 0 on this
// thread); returns the wall time, or the first error.
absl::StatusOr<double> TimeRanks(
    Setup& s, std::vector<std::unique_ptr<GlooProcessGroup>>& groups,
    int reps) {
  const int n = static_cast<int>(groups.size());
  std::vector<absl::Status> statuses(n);
  auto run = [&](int r) {
    for (int i = 0; i < reps && statuses[r].ok(); ++i) {
      statuses[r] = s.issue(*groups[r], r)->Wait();
    }
  };
  const absl::Time start = absl::Now();
  std::vector<std::thread> helpers;
  for (int r = 1; r < n; ++r) helpers.emplace_back(run, r);
  run(0);
  for (auto& t : helpers) t.join();
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);
  for (const absl::Status& st : statuses) {
    if (!st.ok()) return st;
  }
  return secs;
}

// Gloo between 2 ranks on one host: its data through shared memory against
// TCP alone, the same collective and bytes, timed alternately in one run.
// The ranks are threads here, but each group talks as separate processes
// would (loopback TCP, /dev/shm segments), so the ratio is what the train
// job's processes get. Counters: tcp_GBps and shm_GBps (algbw), shm_over_tcp.
void BM_GlooSharedMemoryVsTcp(benchmark::State& state, CollectiveKind kind) {
  constexpr int kRanks = 2;
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<std::unique_ptr<GlooProcessGroup>> tcp, shm;
  for (const bool shared : {false, true}) {
    gloo::rendezvous::HashStore store;
    std::vector<absl::StatusOr<std::unique_ptr<GlooProcessGroup>>> made(kRanks);
    std::vector<std::thread> threads;
    for (int r = 0; r < kRanks; ++r) {
      threads.emplace_back([&, r] {
        GlooOptions options;
        if (!shared) options.max_shared_memory_bytes = 0;
        made[r] = GlooProcessGroup::Create(r, kRanks, store, options);
      });
    }
    for (auto& t : threads) t.join();
    for (auto& g : made) {
      if (!g.ok()) {
        state.SkipWithError(g.status().ToString().c_str());
        return;
      }
      (shared ? shm : tcp).push_back(*std::move(g));
    }
  }
  Setup s;
  MakeSetup(kind, kRanks, bytes / sizeof(float), &s);
  for (auto* groups : {&tcp, &shm}) {
    s.fill();
    absl::StatusOr<double> once = TimeRanks(s, *groups, 1);
    std::string err;
    if (!once.ok() || !s.check(&err)) {
      state.SkipWithError(
          (once.ok() ? "wrong result: " + err : once.status().ToString())
              .c_str());
      return;
    }
  }
  // About 0.2 s per measurement at 2 GB/s.
  const int reps = static_cast<int>(
      std::clamp<size_t>((size_t{400} << 20) / bytes, 1, 2000));
  double tcp_secs = 0, shm_secs = 0;
  for (auto _ : state) {
    absl::StatusOr<double> t = TimeRanks(s, tcp, reps);
    absl::StatusOr<double> m = TimeRanks(s, shm, reps);
    if (!t.ok() || !m.ok()) {
      state.SkipWithError((t.ok() ? m : t).status().ToString().c_str());
      return;
    }
    tcp_secs += *t;
    shm_secs += *m;
  }
  if (shm[0]->shared_memory_collectives() == 0 ||
      tcp[0]->shared_memory_collectives() != 0) {
    state.SkipWithError("the transports were not the ones asked for");
    return;
  }
  const double moved = static_cast<double>(bytes) * reps * state.iterations();
  state.counters["tcp_GBps"] = moved / tcp_secs / 1e9;
  state.counters["shm_GBps"] = moved / shm_secs / 1e9;
  state.counters["shm_over_tcp"] = tcp_secs / shm_secs;
}

void GlooSizes(benchmark::internal::Benchmark* b) {
  for (int64_t bytes = 4 << 10; bytes <= (int64_t{64} << 20); bytes *= 4) {
    b->Arg(bytes);
  }
  b->ArgNames({"bytes"})->Iterations(3);
}

BENCHMARK_CAPTURE(BM_GlooSharedMemoryVsTcp, AllGather,
                  CollectiveKind::kAllGather)
    ->Apply(GlooSizes);
BENCHMARK_CAPTURE(BM_GlooSharedMemoryVsTcp, ReduceScatter,
                  CollectiveKind::kReduceScatter)
    ->Apply(GlooSizes);
BENCHMARK_CAPTURE(BM_GlooSharedMemoryVsTcp, AllReduce,
                  CollectiveKind::kAllReduce)
    ->Apply(GlooSizes);

}  // namespace
}  // namespace comm
}  // namespace chunkzero

BENCHMARK_MAIN();
