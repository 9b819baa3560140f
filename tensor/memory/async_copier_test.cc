#include "tensor/memory/async_copier.h"

#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor/cuda/cuda_runtime.h"
#include "tensor/memory/allocator.h"

namespace chunkzero {
namespace {

using ::testing::HasSubstr;

constexpr Device kSim = Device::Simulated(0);

TEST(AsyncCopier, CopiesToAndFromADeviceInOrder) {
  absl::StatusOr<std::unique_ptr<AsyncCopier>> copier =
      AsyncCopier::Create(kSim);
  ASSERT_TRUE(copier.ok()) << copier.status();
  std::vector<int32_t> host(1 << 16), device(1 << 16), back(1 << 16, 0);
  std::iota(host.begin(), host.end(), 7);
  const size_t bytes = host.size() * sizeof(int32_t);
  absl::StatusOr<AsyncCopier::Ticket> in =
      (*copier)->Copy(device.data(), kSim, host.data(), Device::Cpu(), bytes);
  // Issued after the first: runs after it, so it reads the copied bytes.
  absl::StatusOr<AsyncCopier::Ticket> out =
      (*copier)->Copy(back.data(), Device::Cpu(), device.data(), kSim, bytes);
  ASSERT_TRUE(in.ok() && out.ok());
  EXPECT_LT(*in, *out);
  ASSERT_TRUE((*copier)->Wait(*out).ok());
  EXPECT_EQ(back, host);
}

TEST(AsyncCopier, ManyCopiesThenWaitAll) {
  std::unique_ptr<AsyncCopier> copier = *AsyncCopier::Create(kSim);
  std::vector<std::vector<float>> src(50), dst(50);
  for (int i = 0; i < 50; ++i) {
    src[i].assign(1000, static_cast<float>(i));
    dst[i].assign(1000, -1.0f);
    ASSERT_TRUE(copier
                    ->Copy(dst[i].data(), kSim, src[i].data(), Device::Cpu(),
                           1000 * sizeof(float))
                    .ok());
  }
  ASSERT_TRUE(copier->WaitAll().ok());
  for (int i = 0; i < 50; ++i) EXPECT_EQ(dst[i], src[i]) << i;
}

TEST(AsyncCopier, RefusesPairsOtherThanHostAndItsDevice) {
  std::unique_ptr<AsyncCopier> copier = *AsyncCopier::Create(kSim);
  char a = 0, b = 0;
  const absl::Status status =
      copier->Copy(&a, Device::Simulated(1), &b, Device::Cpu(), 1).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "AsyncCopier for sim:0: cannot copy from cpu to sim:1");
  EXPECT_EQ(AsyncCopier::Create(Device::Cpu()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(AsyncCopier, AGpuCopierNeedsAGpu) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is visible";
  const absl::Status status = AsyncCopier::Create(Device::Cuda(0)).status();
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("AsyncCopier for cuda:0"));
}

TEST(AsyncCopier, DestructionWaitsForIssuedCopies) {
  std::vector<char> src(1 << 20, 'x'), dst(1 << 20, 'y');
  {
    std::unique_ptr<AsyncCopier> copier = *AsyncCopier::Create(kSim);
    ASSERT_TRUE(
        copier->Copy(dst.data(), kSim, src.data(), Device::Cpu(), src.size())
            .ok());
  }
  EXPECT_EQ(dst, src);
}

TEST(AsyncCopier, RoundTripThroughAGpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no GPU visible";
  constexpr size_t kBytes = 32 << 20;
  PinnedHostAllocator pinned;
  void* host = *pinned.Allocate(kBytes);
  void* back = *pinned.Allocate(kBytes);
  void* gpu = *CudaMalloc(0, kBytes);
  for (size_t i = 0; i < kBytes; ++i) {
    static_cast<uint8_t*>(host)[i] = static_cast<uint8_t>(i * 31);
  }
  std::unique_ptr<AsyncCopier> copier = *AsyncCopier::Create(Device::Cuda(0));
  ASSERT_TRUE(
      copier->Copy(gpu, Device::Cuda(0), host, Device::Cpu(), kBytes).ok());
  absl::StatusOr<AsyncCopier::Ticket> out =
      copier->Copy(back, Device::Cpu(), gpu, Device::Cuda(0), kBytes);
  ASSERT_TRUE(out.ok());
  ASSERT_TRUE(copier->Wait(*out).ok());
  EXPECT_EQ(std::memcmp(host, back, kBytes), 0);
  EXPECT_TRUE(CudaFree(0, gpu).ok());
  pinned.Deallocate(host, kBytes);
  pinned.Deallocate(back, kBytes);
}

// A copy from the GPU issued right after the compute stream was given work
// on the same bytes sees that work's result, with no host wait between.
TEST(AsyncCopier, CopiesWaitForTheComputeStream) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no GPU visible";
  constexpr size_t kBytes = 256 << 20;  // Long enough to race with.
  PinnedHostAllocator pinned;
  auto* ones = static_cast<uint8_t*>(*pinned.Allocate(kBytes));
  auto* back = static_cast<uint8_t*>(*pinned.Allocate(kBytes));
  std::memset(ones, 1, kBytes);
  std::memset(back, 0, kBytes);
  void* gpu = *CudaMalloc(0, kBytes);
  std::vector<uint8_t> zeros(kBytes, 0);
  ASSERT_TRUE(CudaMemcpy(gpu, zeros.data(), kBytes).ok());
  std::unique_ptr<AsyncCopier> copier = *AsyncCopier::Create(Device::Cuda(0));
  // The compute stream fills the buffer; the copier reads it back.
  ASSERT_TRUE(CudaMemcpyAsync(gpu, ones, kBytes, /*stream=*/nullptr).ok());
  absl::StatusOr<AsyncCopier::Ticket> out =
      copier->Copy(back, Device::Cpu(), gpu, Device::Cuda(0), kBytes);
  ASSERT_TRUE(out.ok());
  ASSERT_TRUE(copier->Wait(*out).ok());
  EXPECT_EQ(back[0], 1);
  EXPECT_EQ(back[kBytes - 1], 1);
  EXPECT_EQ(std::memcmp(ones, back, kBytes), 0);
  EXPECT_TRUE(CudaFree(0, gpu).ok());
  pinned.Deallocate(ones, kBytes);
  pinned.Deallocate(back, kBytes);
}

}  // namespace
}  // namespace chunkzero
