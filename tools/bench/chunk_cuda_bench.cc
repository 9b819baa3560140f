// Chunk access + release on cuda:0 against the bare collective Chunk
// issues, at world size 1, with NCCL and with Gloo staged through pinned
// host memory: the "<= 5% over the bare collective" on a GPU.
//
//   chunk_cuda_bench --benchmark_counters_tabular=true
//
// Rows: backend (nccl, gloo_staged) x layout (sharded: an all-gather of the
// shard into the full buffer; owner: a broadcast of the full buffer) x
// chunk size (4 and 64 MiB of bf16, 8 tensors). Each iteration times
// AccessChunk + ReleaseChunk, then the bare collective on device buffers of
// the same size, each synchronised (the Work's Wait). Counter overhead =
// chunk time / bare time - 1. On a machine without a GPU every row says
// why it skipped.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "benchmark/benchmark.h"
#include "chunk/chunk_manager.h"
#include "comm/gloo/gloo_process_group.h"
#include "comm/nccl/nccl_process_group.h"
#include "comm/staging_process_group.h"
#include "gloo/rendezvous/hash_store.h"
#include "tensor/cuda/cuda_runtime.h"
#include "tensor/memory/caching_allocator.h"

namespace chunkzero {
namespace {

constexpr Device kGpu = Device::Cuda(0);
constexpr int kTensors = 8;

// A world-size-1 group of the backend, and what it needs alive.
struct Backend {
  gloo::rendezvous::HashStore store;
  std::unique_ptr<comm::ProcessGroup> base;
  PinnedHostAllocator pinned;
  std::unique_ptr<CachingAllocator> staging_memory;
  std::unique_ptr<comm::StagingProcessGroup> staged;
  comm::ProcessGroup* group = nullptr;
};

absl::Status MakeBackend(bool nccl, Backend& b) {
  if (nccl) {
    CZ_ASSIGN_OR_RETURN(b.base,
                        comm::NcclProcessGroup::Create(0, 1, 0, b.store));
    b.group = b.base.get();
    return absl::OkStatus();
  }
  CZ_ASSIGN_OR_RETURN(b.base, comm::GlooProcessGroup::Create(0, 1, b.store));
  b.staging_memory = std::make_unique<CachingAllocator>(&b.pinned);
  b.staged = std::make_unique<comm::StagingProcessGroup>(
      b.base.get(), kGpu, b.staging_memory.get());
  b.group = b.staged.get();
  return absl::OkStatus();
}

void BM_ChunkAccessReleaseOnGpu(benchmark::State& state) {
  if (CudaDeviceCount() == 0) {
    state.SkipWithError(BuiltWithCuda() ? "no GPU visible"
                                        : "built without --config=cuda");
    return;
  }
  const bool nccl = state.range(0) == 1;
  const ChunkLayout layout =
      state.range(1) == 0 ? ChunkLayout::kSharded : ChunkLayout::kOwner;
  const int64_t elements = state.range(2) / 2;  // bf16
  state.SetLabel(absl::StrCat(nccl ? "nccl" : "gloo_staged", " ",
                              ChunkLayoutName(layout)));
  Backend backend;
  absl::Status status = MakeBackend(nccl, backend);
  std::unique_ptr<ChunkManager> manager;
  Chunk* chunk = nullptr;
  if (status.ok()) {
    ChunkManagerOptions options;
    options.layout = layout;
    options.chunk_size = elements;
    options.device = kGpu;
    manager = std::make_unique<ChunkManager>(backend.group, options);
    status = manager->CreateGroup("p", DType::kBF16, MemoryCategory::kParam);
    for (int t = 0; t < kTensors && status.ok(); ++t) {
      absl::StatusOr<Tensor> values =
          Tensor::Zeros({elements / kTensors}, DType::kBF16);
      status = values.status();
      if (status.ok()) {
        status =
            manager->AppendTensor("p", absl::StrCat("t", t), *values).status();
      }
    }
    if (status.ok()) status = manager->CloseGroup("p");
  }
  void* full = nullptr;
  if (status.ok()) {
    chunk = manager->chunk("p", 0);
    absl::StatusOr<void*> p = CudaMalloc(0, 2 * chunk->capacity());
    status = p.status();
    if (p.ok()) full = *p;
  }
  if (!status.ok()) {
    state.SkipWithError(std::string(status.message()).c_str());
    return;
  }
  const comm::MutableBuffer full_buffer{
      full, static_cast<size_t>(chunk->capacity()), DType::kBF16};
  double chunk_seconds = 0, bare_seconds = 0;
  for (auto _ : state) {
    absl::Time start = absl::Now();
    status = manager->AccessChunk(chunk);
    if (status.ok()) status = manager->ReleaseChunk(chunk);
    const absl::Duration chunk_time = absl::Now() - start;
    start = absl::Now();
    if (status.ok()) {
      status = layout == ChunkLayout::kSharded
                   ? comm::AllGather(*backend.group, full_buffer, full_buffer)
                   : comm::Broadcast(*backend.group, full_buffer);
    }
    const absl::Duration bare_time = absl::Now() - start;
    if (!status.ok()) {
      state.SkipWithError(std::string(status.message()).c_str());
      break;
    }
    state.SetIterationTime(absl::ToDoubleSeconds(chunk_time));
    chunk_seconds += absl::ToDoubleSeconds(chunk_time);
    bare_seconds += absl::ToDoubleSeconds(bare_time);
  }
  CudaFree(0, full).IgnoreError();
  if (bare_seconds > 0)
    state.counters["overhead"] = chunk_seconds / bare_seconds - 1;
}
BENCHMARK(BM_ChunkAccessReleaseOnGpu)
    ->ArgsProduct({{1, 0}, {0, 1}, {4 << 20, 64 << 20}})
    ->ArgNames({"nccl", "owner", "bytes"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace chunkzero

BENCHMARK_MAIN();
