// The NVMe tier's optimizer step (masters and Adam states resting on disk,
// optim/internal/disk_staging.h: chunk k+1's read while chunk k updates
// and chunk k-1's written back) against the disk itself, measured just
// before and just after in the same iteration:
//   disk    a plain O_DIRECT read, then write, of the same bytes, one
//           large synchronous transfer per region (the disk's sequential
//           read + write rate, what dd oflag=direct measures);
//   step    the pipelined update: the same bytes read and written, with
//           the CPU Adam on each chunk between.
//
//   CHUNKZERO_NVME_BENCH_DIR=/mnt/nvme nvme_bench
//       --benchmark_counters_tabular=true
//
// The directory defaults to $TMPDIR or /tmp (it must be on a disk: a tmpfs
// is refused). Rows: io_uring and the pread/pwrite threads. 8 chunks of 4M
// parameters held by the rank (48 MiB of master, exp_avg and exp_avg_sq
// each: 384 MiB read and 384 MiB written per pass). Counter vs_disk:
// the median over iterations of step's bytes per second / disk's, the
// disk timed just before and just after the step (vs_disk_min: the
// lowest); the target is >= 0.8.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "benchmark/benchmark.h"
#include "chunk/chunk.h"
#include "chunk/chunk_disk_tier.h"
#include "comm/inprocess/in_process_group.h"
#include "io/nvme/aligned_buffer.h"
#include "optim/fused_kernels.h"
#include "optim/internal/disk_staging.h"

namespace chunkzero {
namespace {

constexpr int kChunks = 8;
constexpr int64_t kParams = int64_t{4} << 20;

std::string BenchDir() {
  for (const char* name : {"CHUNKZERO_NVME_BENCH_DIR", "TMPDIR"}) {
    const char* dir = std::getenv(name);
    if (dir != nullptr && *dir != '\0') return dir;
  }
  return "/tmp";
}

AdamStep Step() {
  AdamStep step;
  step.lr = 6e-4f;
  step.weight_decay = 0.1f;
  step.decoupled_weight_decay = true;
  step.bias_correction1 = 0.65f;
  step.bias_correction2_sqrt = 0.1f;
  return step;
}

// The disk's own rate over every region: read all of it, then write it
// back, each region one synchronous O_DIRECT transfer.
absl::Status PlainReadWrite(const std::vector<std::unique_ptr<Chunk>>& groups,
                            AlignedBuffer& buffer) {
  for (IoKind kind : {IoKind::kRead, IoKind::kWrite}) {
    for (const auto& chunk : groups) {
      const DiskRegion& r = chunk->disk_region();
      const int fd = chunk->disk_tier()->file().fd();
      const ssize_t n = kind == IoKind::kRead
                            ? ::pread(fd, buffer.data(),
                                      static_cast<size_t>(r.bytes), r.offset)
                            : ::pwrite(fd, buffer.data(),
                                       static_cast<size_t>(r.bytes), r.offset);
      if (n != r.bytes) {
        return absl::DataLossError(absl::StrCat("plain transfer of ", r.bytes,
                                                " bytes moved ", n, " at ",
                                                r.offset));
      }
    }
  }
  return absl::OkStatus();
}

void BM_NvmeStep(benchmark::State& state) {
  const IoEngineKind kind =
      state.range(0) == 0 ? IoEngineKind::kUring : IoEngineKind::kThreads;
  absl::StatusOr<std::unique_ptr<ChunkDiskTier>> disk =
      ChunkDiskTier::Create(BenchDir(), kind);
  if (!disk.ok()) {
    state.SkipWithError(std::string(disk.status().message()).c_str());
    return;
  }
  state.SetLabel(std::string((*disk)->engine().name()));
  comm::InProcessWorld world(1);
  comm::ProcessGroup* group = *world.group(0);
  // Chunk-major, as the optimizer spills them: master, exp_avg, exp_avg_sq.
  std::vector<std::unique_ptr<Chunk>> chunks;
  absl::Status status;
  for (int c = 0; c < kChunks * 3 && status.ok(); ++c) {
    ChunkOptions o;
    o.group = c % 3 == 0 ? "f32_master" : "exp_avg";
    o.index = c;
    o.dtype = DType::kF32;
    o.capacity = kParams;
    o.layout = ChunkLayout::kReplicated;
    absl::StatusOr<std::unique_ptr<Chunk>> chunk = Chunk::Create(o, group);
    status = chunk.status();
    if (!status.ok()) break;
    std::vector<float> values(kParams, c % 3 == 0 ? 0.02f : 1e-4f);
    absl::StatusOr<Tensor> t = Tensor::FromFloats(values, {kParams});
    status = t.status();
    if (status.ok()) status = (*chunk)->Append("w", *t).status();
    if (status.ok()) status = (*chunk)->Close();
    if (status.ok()) status = (*chunk)->SpillRest(disk->get());
    chunks.push_back(*std::move(chunk));
  }
  absl::StatusOr<AlignedBuffer> plain_buffer =
      AlignedBuffer::Create(kParams * sizeof(float));
  if (status.ok()) status = plain_buffer.status();
  std::vector<uint16_t> params(kParams, 0x3c00);  // bf16 weights and grads.
  const AdamStep step = Step();
  auto pass = [&]() -> absl::Status {
    optim_internal::DiskStaging staging(disk->get());
    auto fetch = [&](int c) {
      return staging.Fetch({chunks[3 * c].get(), chunks[3 * c + 1].get(),
                            chunks[3 * c + 2].get()},
                           0, kParams * 4);
    };
    CZ_RETURN_IF_ERROR(fetch(0));
    for (int c = 0; c < kChunks; ++c) {
      if (c + 1 < kChunks) CZ_RETURN_IF_ERROR(fetch(c + 1));
      CZ_ASSIGN_OR_RETURN(std::vector<char*> p, staging.Get(c));
      CZ_RETURN_IF_ERROR(FusedAdam(
          step, reinterpret_cast<float*>(p[0]), reinterpret_cast<float*>(p[1]),
          reinterpret_cast<float*>(p[2]), params.data(), DType::kBF16,
          params.data(), DType::kBF16, kParams));
      CZ_RETURN_IF_ERROR(staging.Return(c));
    }
    return staging.Finish();
  };
  const double bytes = 2.0 * 3 * kChunks * kParams * sizeof(float);
  double step_s = 0, disk_s = 0, waited_s = 0;
  // This disk's rate drifts between iterations by more than the gap being
  // measured, so each iteration times the plain transfer both before and
  // after the step and compares the step with their mean; the counters
  // report the median of those per-iteration ratios.
  std::vector<double> ratios;
  for (auto _ : state) {
    if (!status.ok()) break;
    const absl::Time t0 = absl::Now();
    status = PlainReadWrite(chunks, *plain_buffer);
    const absl::Time t1 = absl::Now();
    const double waited_before = (*disk)->stats().seconds_waited;
    if (status.ok()) status = pass();
    const absl::Time t2 = absl::Now();
    if (status.ok()) status = PlainReadWrite(chunks, *plain_buffer);
    const absl::Time t3 = absl::Now();
    const double plain =
        (absl::ToDoubleSeconds(t1 - t0) + absl::ToDoubleSeconds(t3 - t2)) / 2;
    const double stepped = absl::ToDoubleSeconds(t2 - t1);
    disk_s += plain;
    step_s += stepped;
    ratios.push_back(plain / stepped);
    waited_s += (*disk)->stats().seconds_waited - waited_before;
    state.SetIterationTime(stepped);
  }
  if (!status.ok()) {
    state.SkipWithError(std::string(status.message()).c_str());
    return;
  }
  std::sort(ratios.begin(), ratios.end());
  const double n = static_cast<double>(state.iterations());
  state.counters["disk_GBps"] = bytes * n / disk_s / 1e9;
  state.counters["step_GBps"] = bytes * n / step_s / 1e9;
  state.counters["vs_disk"] = ratios[ratios.size() / 2];
  state.counters["vs_disk_min"] = ratios.front();
  state.counters["waited_frac"] = waited_s / step_s;
}
BENCHMARK(BM_NvmeStep)
    ->Arg(0)
    ->Arg(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(20);

}  // namespace
}  // namespace chunkzero

BENCHMARK_MAIN();
