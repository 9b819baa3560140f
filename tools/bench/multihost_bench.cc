// Gloo across hosts against a plain TCP stream between the same hosts: the
// multi-host busbw target (docs/PERFORMANCE.md). The hosts are network
// namespaces on this machine (tests/multihost/netns_testbed.h), each with
// its own /dev/shm, so Gloo moves everything over TCP through the bridge.
// Needs root.
//
//   bazel run --config=opt //tools/bench:multihost_bench
//
// BM_TcpStream/bytes:S        host 0 sends S bytes to host 1 over one TCP
//                             connection (the sink acknowledges the last
//                             byte): gbps = S / time (1e9 bytes/s)
// BM_GlooAllReduce/hosts:N/bytes:S
//                             one rank per host, f32 AllReduce of S bytes,
//                             rank 0's mean over 5 iterations after one
//                             warm-up: algbw = S / time, busbw = algbw *
//                             2(N-1)/N, tcp_stream = BM_TcpStream's figure
//                             measured in this run (best of three),
//                             busbw_over_tcp_stream the ratio (target
//                             >= 0.5); tcp_ring = BM_TcpRing's per-link
//                             figure for the same N, busbw_over_tcp_ring
//                             the ratio to it
// BM_TcpRing/hosts:N/bytes:S  every host sends S bytes to the next one
//                             (host i to i+1 mod N) while it receives from
//                             the one before, all starting at one instant:
//                             gbps = S / (the slowest stream's time). On
//                             separate machines this is the one-way stream
//                             again (links are full duplex); here, where
//                             the hosts share the machine's cores, it is
//                             what each link carries when every host sends
//                             and receives at once, as in an all-reduce.
// The workers are this binary again (--role=...), started in the hosts'
// namespaces; each benchmark iteration is one such measurement (manual
// time).
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "comm/gloo/gloo_process_group.h"
#include "comm/net/bind_address.h"
#include "comm/process_group.h"
#include "comm/rendezvous/rendezvous_store.h"
#include "tests/multihost/netns_testbed.h"
#include "tests/multihost/subprocess.h"

namespace chunkzero {
namespace {

using multihost::Child;
using multihost::NetnsTestbed;
using Clock = std::chrono::steady_clock;

constexpr int kPort = 29600;
constexpr int kIterations = 5;

// --name=value from argv, or "".
std::string Arg(int argc, char** argv, absl::string_view name) {
  const std::string prefix = absl::StrCat("--", name, "=");
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (absl::ConsumePrefix(&a, prefix)) return std::string(a);
  }
  return "";
}

// --role=sink: accepts one connection on --port, reads until EOF, answers
// one byte.
int Sink(int port) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)) !=
          0 ||
      listen(listener, 1) != 0) {
    std::perror("sink: listen");
    return 1;
  }
  const int fd = accept(listener, nullptr, nullptr);
  std::vector<char> buffer(1 << 20);
  while (read(fd, buffer.data(), buffer.size()) > 0) {
  }
  const char ack = 1;
  if (write(fd, &ack, 1) != 1) return 1;
  close(fd);
  close(listener);
  return 0;
}

// --role=source: sends --bytes to --to (host:port) and prints the seconds
// from the start to the sink's acknowledgement. The start is when the
// connection is made or, if later, --start_at (ns since the Unix epoch:
// the clock every namespace of the machine shares), so that several
// sources send at once.
int Source(const std::string& host, int port, size_t bytes,
           int64_t start_at_ns) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host.c_str(), &address.sin_addr);
  int fd = -1;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (true) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) ==
        0) {
      break;
    }
    close(fd);
    if (absl::Now() > deadline) {
      std::fprintf(stderr, "source: no sink at %s:%d\n", host.c_str(), port);
      return 1;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  std::vector<char> buffer(1 << 20, 'x');
  const absl::Duration wait = absl::FromUnixNanos(start_at_ns) - absl::Now();
  if (wait > absl::ZeroDuration()) absl::SleepFor(wait);
  const Clock::time_point start = Clock::now();
  for (size_t sent = 0; sent < bytes;) {
    const ssize_t n =
        write(fd, buffer.data(), std::min(buffer.size(), bytes - sent));
    if (n <= 0) return 1;
    sent += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  char ack = 0;
  if (read(fd, &ack, 1) != 1) return 1;
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("seconds %.9f\n", seconds);
  close(fd);
  return 0;
}

// --role=allreduce: one rank of a Gloo group meeting at --rendezvous; rank
// 0 prints the mean seconds of kIterations AllReduces of --bytes.
int AllReduceRank(int rank, int world, const std::string& rendezvous,
                  size_t bytes) {
  absl::StatusOr<comm::RendezvousAddress> address =
      comm::ParseRendezvousAddress(rendezvous);
  if (!address.ok()) return 1;
  absl::StatusOr<std::unique_ptr<comm::RendezvousStore>> store =
      comm::RendezvousStore::Open(*address, rank, absl::Seconds(60));
  absl::StatusOr<std::string> local =
      comm::LocalAddressToward(address->host, address->port);
  if (!store.ok() || !local.ok()) {
    std::fprintf(stderr, "rank %d: %s %s\n", rank,
                 store.status().ToString().c_str(),
                 local.status().ToString().c_str());
    return 1;
  }
  comm::GlooOptions options;
  options.hostname = *local;
  options.timeout = absl::Seconds(120);
  absl::StatusOr<std::unique_ptr<comm::GlooProcessGroup>> group =
      comm::GlooProcessGroup::Create(rank, world, (*store)->store(), options);
  if (!group.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank,
                 group.status().ToString().c_str());
    return 1;
  }
  std::vector<float> data(bytes / sizeof(float), 1.0f);
  if (!comm::AllReduce(**group, comm::MutableBuffer::Of(data)).ok()) return 1;
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < kIterations; ++i) {
    if (!comm::AllReduce(**group, comm::MutableBuffer::Of(data)).ok()) return 1;
  }
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count() / kIterations;
  if (!comm::Barrier(**group).ok()) return 1;
  if (rank == 0) std::printf("seconds %.9f\n", seconds);
  return 0;
}

// The hosts, made once for the whole run; null (and the reason) if they
// cannot be made here.
NetnsTestbed* Hosts(std::string* why) {
  static absl::StatusOr<std::unique_ptr<NetnsTestbed>>* bed =
      new absl::StatusOr<std::unique_ptr<NetnsTestbed>>(
          NetnsTestbed::Create(multihost::TestbedOptions{3, {}, ""}));
  if (!bed->ok()) {
    *why = std::string(bed->status().message());
    return nullptr;
  }
  return bed->value().get();
}

std::string Self() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : "";
}

// Runs the workers (host, argv) to their end; the most "seconds" any of
// them printed, or a negative number after printing why.
double RunWorkers(
    const std::vector<std::pair<int, std::vector<std::string>>>& workers) {
  NetnsTestbed* hosts = nullptr;
  std::string why;
  hosts = Hosts(&why);
  if (hosts == nullptr) return -1;
  std::vector<Child> children;
  std::vector<std::string> logs;
  for (size_t i = 0; i < workers.size(); ++i) {
    char path[] = "/tmp/cz-multihost-bench.XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) return -1;
    close(fd);
    logs.push_back(path);
    std::vector<std::string> argv = {Self()};
    argv.insert(argv.end(), workers[i].second.begin(), workers[i].second.end());
    absl::StatusOr<Child> child =
        Child::Start(hosts->OnHost(workers[i].first, argv), logs.back());
    if (!child.ok()) return -1;
    children.push_back(*std::move(child));
  }
  double seconds = -1;
  for (size_t i = 0; i < children.size(); ++i) {
    absl::StatusOr<int> code = children[i].Wait(absl::Minutes(5));
    const std::string out = multihost::ReadFileOrEmpty(logs[i]);
    unlink(logs[i].c_str());
    if (!code.ok() || *code != 0) {
      std::fprintf(stderr, "worker %zu failed: %s\n", i, out.c_str());
      return -1;
    }
    absl::string_view text = out;
    if (!absl::ConsumePrefix(&text, "seconds ")) continue;
    double these = 0;
    if (!absl::SimpleAtod(absl::StripTrailingAsciiWhitespace(text), &these)) {
      std::fprintf(stderr, "worker %zu printed %s\n", i, out.c_str());
      return -1;
    }
    seconds = std::max(seconds, these);
  }
  return seconds;
}

// Streams of `bytes` from host i to host i + 1 (mod `world`), every one
// starting at the same instant (for `world` 2, host 1 sends back to 0; for
// 1, the single stream 0 to 1); the slowest one's seconds.
double TcpRingSeconds(int world, size_t bytes) {
  std::string why;
  NetnsTestbed* hosts = Hosts(&why);
  if (hosts == nullptr) return -1;
  const std::string size = absl::StrCat("--bytes=", bytes);
  // Long enough for every worker to start and connect (ip netns exec).
  const std::string start_at = absl::StrCat(
      "--start_at=", absl::ToUnixNanos(absl::Now() + absl::Seconds(1)));
  std::vector<std::pair<int, std::vector<std::string>>> workers;
  const int streams = std::max(world, 1);
  for (int i = 0; i < streams; ++i) {
    const int to = (i + 1) % std::max(world, 2);
    workers.push_back({to, {"--role=sink", absl::StrCat("--port=", kPort)}});
    workers.push_back(
        {i,
         {"--role=source", absl::StrCat("--to=", hosts->address(to)),
          absl::StrCat("--port=", kPort), size, start_at}});
  }
  return RunWorkers(workers);
}

// The best of three of TcpRingSeconds(world, bytes), as GB/s; 0 if every
// try failed.
double BestRingGbps(int world, size_t bytes) {
  double best = -1;
  for (int i = 0; i < 3; ++i) {
    const double t = TcpRingSeconds(world, bytes);
    if (t > 0 && (best < 0 || t < best)) best = t;
  }
  return best > 0 ? bytes / best / 1e9 : 0;
}

// One TcpRingSeconds(world, bytes) per iteration; counter gbps.
void MeasureRing(benchmark::State& state, int world, size_t bytes) {
  std::string why;
  if (Hosts(&why) == nullptr) {
    state.SkipWithError(why.c_str());
    return;
  }
  double gbps = 0;
  for (auto _ : state) {
    const double seconds = TcpRingSeconds(world, bytes);
    if (seconds <= 0) {
      state.SkipWithError("a stream failed");
      return;
    }
    state.SetIterationTime(seconds);
    gbps = bytes / seconds / 1e9;
  }
  state.counters["gbps"] = gbps;
}

void BM_TcpStream(benchmark::State& state) {
  MeasureRing(state, 1, static_cast<size_t>(state.range(0)));
}
BENCHMARK(BM_TcpStream)
    ->ArgName("bytes")
    ->Arg(64 << 20)
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);

void BM_TcpRing(benchmark::State& state) {
  MeasureRing(state, static_cast<int>(state.range(0)),
              static_cast<size_t>(state.range(1)));
}
BENCHMARK(BM_TcpRing)
    ->ArgNames({"hosts", "bytes"})
    ->Args({2, 64 << 20})
    ->Args({3, 64 << 20})
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);

void BM_GlooAllReduce(benchmark::State& state) {
  const int world = static_cast<int>(state.range(0));
  const size_t bytes = static_cast<size_t>(state.range(1));
  std::string why;
  NetnsTestbed* hosts = Hosts(&why);
  if (hosts == nullptr) {
    state.SkipWithError(why.c_str());
    return;
  }
  // The streams' figures from this run, for the ratios: best of three.
  const double stream = BestRingGbps(1, bytes);
  const double ring = BestRingGbps(world, bytes);
  double seconds = 0;
  int round = 0;
  for (auto _ : state) {
    std::vector<std::pair<int, std::vector<std::string>>> ranks;
    const std::string rendezvous = absl::StrCat(
        "--rendezvous=tcp://", hosts->address(0), ":", kPort + 1 + round++);
    for (int r = 0; r < world; ++r) {
      ranks.push_back({r,
                       {"--role=allreduce", absl::StrCat("--rank=", r),
                        absl::StrCat("--world=", world), rendezvous,
                        absl::StrCat("--bytes=", bytes)}});
    }
    seconds = RunWorkers(ranks);
    if (seconds <= 0) {
      state.SkipWithError("the all-reduce failed");
      return;
    }
    state.SetIterationTime(seconds);
  }
  const double algbw = bytes / seconds / 1e9;
  const double busbw = algbw * 2.0 * (world - 1) / world;
  state.counters["algbw"] = algbw;
  state.counters["busbw"] = busbw;
  state.counters["tcp_stream"] = stream;
  state.counters["busbw_over_tcp_stream"] = stream > 0 ? busbw / stream : 0;
  state.counters["tcp_ring"] = ring;
  state.counters["busbw_over_tcp_ring"] = ring > 0 ? busbw / ring : 0;
}
BENCHMARK(BM_GlooAllReduce)
    ->ArgNames({"hosts", "bytes"})
    ->Args({2, 64 << 20})
    ->Args({3, 64 << 20})
    ->UseManualTime()
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace chunkzero

int main(int argc, char** argv) {
  const std::string role = chunkzero::Arg(argc, argv, "role");
  if (!role.empty()) {
    // A worker this binary started: its numbers are well formed.
    size_t bytes = 0;
    int port = 0, rank = 0, world = 0;
    int64_t start_at_ns = 0;
    auto number = [&](absl::string_view name, auto* out) {
      return absl::SimpleAtoi(chunkzero::Arg(argc, argv, name), out);
    };
    if (role == "sink" && number("port", &port)) return chunkzero::Sink(port);
    if (role == "source" && number("port", &port) && number("bytes", &bytes) &&
        number("start_at", &start_at_ns)) {
      return chunkzero::Source(chunkzero::Arg(argc, argv, "to"), port, bytes,
                               start_at_ns);
    }
    if (role == "allreduce" && number("bytes", &bytes) &&
        number("rank", &rank) && number("world", &world)) {
      return chunkzero::AllReduceRank(
          rank, world, chunkzero::Arg(argc, argv, "rendezvous"), bytes);
    }
    std::fprintf(stderr, "multihost_bench: bad worker arguments\n");
    return 2;
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
