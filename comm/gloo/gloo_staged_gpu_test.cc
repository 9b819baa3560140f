// Two Gloo ranks sharing cuda:0 through StagingProcessGroup and pinned
// host memory: the way several ranks share one GPU (NCCL refuses it). The
// results on the device equal the same collectives on host buffers. Skips
// where no GPU is visible.
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "comm/gloo/gloo_process_group.h"
#include "comm/staging_process_group.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "tensor/cuda/cuda_runtime.h"
#include "tensor/memory/caching_allocator.h"

namespace chunkzero {
namespace comm {
namespace {

TEST(GlooStagedOnGpu, TwoRanksShareOneGpu) {
  if (CudaDeviceCount() == 0) {
    GTEST_SKIP() << "no GPU visible (built with CUDA: " << BuiltWithCuda()
                 << ")";
  }
  constexpr int kRanks = 2;
  constexpr size_t kN = 1 << 20;
  gloo::rendezvous::HashStore store;
  std::vector<absl::Status> results(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<GlooProcessGroup>> gloo =
          GlooProcessGroup::Create(r, kRanks, store);
      if (!gloo.ok()) {
        results[r] = gloo.status();
        return;
      }
      PinnedHostAllocator pinned;
      CachingAllocator staging(&pinned);
      StagingProcessGroup group(gloo->get(), Device::Cuda(0), &staging);
      std::vector<float> host(kN), on_host(kN);
      for (size_t i = 0; i < kN; ++i) {
        host[i] = on_host[i] = (r + 1) * 0.25f + i * 1e-6f;
      }
      void* device = *CudaMalloc(0, kN * sizeof(float));
      absl::Status s = CudaMemcpy(device, host.data(), kN * sizeof(float));
      if (s.ok()) s = AllReduce(group, MutableBuffer{device, kN, DType::kF32});
      if (s.ok()) s = AllReduce(**gloo, MutableBuffer::Of(on_host));
      if (s.ok()) s = CudaMemcpy(host.data(), device, kN * sizeof(float));
      if (s.ok() && host != on_host) {
        s = absl::InternalError("device result differs from the host's");
      }
      CudaFree(0, device).IgnoreError();
      results[r] = s;
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) EXPECT_TRUE(results[r].ok()) << results[r];
}

}  // namespace
}  // namespace comm
}  // namespace chunkzero
