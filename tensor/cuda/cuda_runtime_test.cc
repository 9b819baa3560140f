// The CUDA runtime wrappers: Unimplemented without CUDA; on a GPU, streams,
// events, pinned memory and asynchronous copies that round-trip bytes.
#include "tensor/cuda/cuda_runtime.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/memory/allocator.h"

namespace chunkzero {
namespace {

TEST(CudaRuntime, EveryCallIsUnimplementedWithoutCuda) {
  if (BuiltWithCuda()) GTEST_SKIP() << "CUDA build";
  const auto unimplemented = absl::StatusCode::kUnimplemented;
  EXPECT_EQ(CudaStreamCreate(0).status().code(), unimplemented);
  EXPECT_EQ(CudaStreamDestroy(nullptr).code(), unimplemented);
  EXPECT_EQ(CudaStreamSynchronize(nullptr).code(), unimplemented);
  EXPECT_EQ(CudaStreamWaitEvent(nullptr, nullptr).code(), unimplemented);
  EXPECT_EQ(CudaEventCreate(0).status().code(), unimplemented);
  EXPECT_EQ(CudaEventElapsedMs(nullptr, nullptr).status().code(),
            unimplemented);
  EXPECT_EQ(CudaEventDestroy(nullptr).code(), unimplemented);
  EXPECT_EQ(CudaEventRecord(nullptr, nullptr).code(), unimplemented);
  EXPECT_EQ(CudaEventQuery(nullptr).status().code(), unimplemented);
  EXPECT_EQ(CudaEventSynchronize(nullptr).code(), unimplemented);
  EXPECT_EQ(CudaMemcpyAsync(nullptr, nullptr, 1, nullptr).code(),
            unimplemented);
  EXPECT_EQ(CudaHostAlloc(16).status().code(), unimplemented);
  EXPECT_EQ(CudaHostFree(nullptr).code(), unimplemented);
  EXPECT_EQ(CudaIsPinned(nullptr).status().code(), unimplemented);
  int host = 0;
  EXPECT_FALSE(CudaIsDeviceMemory(&host));  // Nothing is, without CUDA.
  EXPECT_EQ(CudaMemGetInfo(0).status().code(), unimplemented);
  EXPECT_EQ(ScopedCudaDevice(0).status().code(), unimplemented);
  EXPECT_EQ(CudaCurrentDevice(), -1);
  EXPECT_TRUE(CudaPendingError().ok());
  PinnedHostAllocator pinned;
  EXPECT_EQ(pinned.Allocate(16).status().code(), unimplemented);
  CudaMemoryRuntime runtime(0);
  EXPECT_EQ(runtime.Malloc(16).status().code(), unimplemented);
  EXPECT_EQ(runtime.RecordEvent(nullptr).status().code(), unimplemented);
}

class CudaRuntimeOnGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no GPU visible";
  }
};

// A call given a device selects it for itself only, and a call that fails
// leaves no error behind for the next launch to report as its own.
TEST_F(CudaRuntimeOnGpu, CallsRestoreTheDeviceAndClearTheirErrors) {
  ScopedCudaDevice on_first(0);
  ASSERT_TRUE(on_first.status().ok()) << on_first.status();
  const int missing = CudaDeviceCount() + 7;
  EXPECT_EQ(CudaMalloc(missing, 16).status().code(),
            absl::StatusCode::kInternal);
  EXPECT_FALSE(CudaStreamCreate(missing).ok());
  EXPECT_FALSE(CudaEventCreate(missing).ok());
  EXPECT_FALSE(CudaMemGetInfo(missing).ok());
  EXPECT_FALSE(CudaFree(missing, nullptr).ok());
  EXPECT_EQ(CudaCurrentDevice(), 0);
  EXPECT_TRUE(CudaPendingError().ok()) << CudaPendingError();
  // Memory exhausted is ResourceExhausted, cleared for the caller's retry.
  EXPECT_EQ(CudaMalloc(0, size_t{1} << 60).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(CudaPendingError().ok()) << CudaPendingError();
  absl::StatusOr<void*> small = CudaMalloc(0, 256);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_TRUE(CudaFree(0, *small).ok());
  if (CudaDeviceCount() < 2) return;
  // On another GPU, and back.
  absl::StatusOr<void*> other = CudaMalloc(1, 256);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(CudaCurrentDevice(), 0);
  absl::StatusOr<CudaStream> stream = CudaStreamCreate(1);
  ASSERT_TRUE(stream.ok()) << stream.status();
  EXPECT_EQ(CudaCurrentDevice(), 0);
  EXPECT_TRUE(CudaStreamDestroy(*stream).ok());
  EXPECT_TRUE(CudaFree(1, *other).ok());
  EXPECT_EQ(CudaCurrentDevice(), 0);
}

// Host -> device -> device -> host through pinned memory on one stream,
// ordered by the stream alone; an event tells the host when it is done.
TEST_F(CudaRuntimeOnGpu, AsyncCopiesOnAStreamRoundTripThroughPinnedMemory) {
  constexpr size_t kBytes = 64 << 20;
  PinnedHostAllocator pinned;
  absl::StatusOr<void*> host_in = pinned.Allocate(kBytes);
  absl::StatusOr<void*> host_out = pinned.Allocate(kBytes);
  ASSERT_TRUE(host_in.ok()) << host_in.status();
  ASSERT_TRUE(host_out.ok()) << host_out.status();
  EXPECT_TRUE(*CudaIsPinned(*host_in));
  std::vector<char> pageable(16);
  EXPECT_FALSE(*CudaIsPinned(pageable.data()));
  EXPECT_FALSE(CudaIsDeviceMemory(*host_in));  // Pinned, but host memory.
  EXPECT_FALSE(CudaIsDeviceMemory(pageable.data()));
  auto* in = static_cast<uint32_t*>(*host_in);
  for (size_t i = 0; i < kBytes / 4; ++i) in[i] = static_cast<uint32_t>(i * 7);
  std::memset(*host_out, 0, kBytes);

  absl::StatusOr<void*> a = CudaMalloc(0, kBytes);
  absl::StatusOr<void*> b = CudaMalloc(0, kBytes);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(CudaIsDeviceMemory(*a));
  absl::StatusOr<CudaStream> stream = CudaStreamCreate(0);
  absl::StatusOr<CudaEvent> done = CudaEventCreate(0);
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_TRUE(CudaMemcpyAsync(*a, *host_in, kBytes, *stream).ok());
  ASSERT_TRUE(CudaMemcpyAsync(*b, *a, kBytes, *stream).ok());
  ASSERT_TRUE(CudaMemcpyAsync(*host_out, *b, kBytes, *stream).ok());
  ASSERT_TRUE(CudaEventRecord(*done, *stream).ok());
  ASSERT_TRUE(CudaEventSynchronize(*done).ok());
  absl::StatusOr<bool> finished = CudaEventQuery(*done);
  ASSERT_TRUE(finished.ok()) << finished.status();
  EXPECT_TRUE(*finished);
  EXPECT_EQ(std::memcmp(*host_in, *host_out, kBytes), 0);

  EXPECT_TRUE(CudaEventDestroy(*done).ok());
  EXPECT_TRUE(CudaStreamDestroy(*stream).ok());
  EXPECT_TRUE(CudaFree(0, *a).ok());
  EXPECT_TRUE(CudaFree(0, *b).ok());
  pinned.Deallocate(*host_in, kBytes);
  pinned.Deallocate(*host_out, kBytes);
}

// A second stream that waits on an event sees the first stream's copy.
TEST_F(CudaRuntimeOnGpu, StreamWaitEventOrdersTwoStreams) {
  constexpr size_t kBytes = 16 << 20;
  std::vector<uint8_t> in(kBytes), out(kBytes, 0);
  for (size_t i = 0; i < kBytes; ++i) in[i] = static_cast<uint8_t>(i * 13);
  absl::StatusOr<void*> a = CudaMalloc(0, kBytes);
  absl::StatusOr<void*> b = CudaMalloc(0, kBytes);
  absl::StatusOr<CudaStream> first = CudaStreamCreate(0);
  absl::StatusOr<CudaStream> second = CudaStreamCreate(0);
  absl::StatusOr<CudaEvent> copied = CudaEventCreate(0);
  ASSERT_TRUE(a.ok() && b.ok() && first.ok() && second.ok() && copied.ok());
  ASSERT_TRUE(CudaMemcpy(*a, in.data(), kBytes).ok());
  ASSERT_TRUE(CudaMemcpyAsync(*b, *a, kBytes, *first).ok());
  ASSERT_TRUE(CudaEventRecord(*copied, *first).ok());
  ASSERT_TRUE(CudaStreamWaitEvent(*second, *copied).ok());
  ASSERT_TRUE(CudaMemcpyAsync(*a, *b, kBytes, *second).ok());  // a = b
  ASSERT_TRUE(CudaStreamSynchronize(*second).ok());
  ASSERT_TRUE(CudaMemcpy(out.data(), *a, kBytes).ok());
  EXPECT_EQ(out, in);
  EXPECT_TRUE(CudaEventDestroy(*copied).ok());
  EXPECT_TRUE(CudaStreamDestroy(*first).ok());
  EXPECT_TRUE(CudaStreamDestroy(*second).ok());
  EXPECT_TRUE(CudaFree(0, *a).ok());
  EXPECT_TRUE(CudaFree(0, *b).ok());
}

TEST_F(CudaRuntimeOnGpu, TimingEventsMeasureACopy) {
  constexpr size_t kBytes = 256 << 20;
  absl::StatusOr<void*> a = CudaMalloc(0, kBytes);
  absl::StatusOr<void*> b = CudaMalloc(0, kBytes);
  absl::StatusOr<CudaEvent> start = CudaEventCreate(0, /*timing=*/true);
  absl::StatusOr<CudaEvent> end = CudaEventCreate(0, /*timing=*/true);
  ASSERT_TRUE(a.ok() && b.ok() && start.ok() && end.ok());
  ASSERT_TRUE(CudaEventRecord(*start, nullptr).ok());
  ASSERT_TRUE(CudaMemcpyAsync(*b, *a, kBytes, nullptr).ok());
  ASSERT_TRUE(CudaEventRecord(*end, nullptr).ok());
  ASSERT_TRUE(CudaEventSynchronize(*end).ok());
  absl::StatusOr<float> ms = CudaEventElapsedMs(*start, *end);
  ASSERT_TRUE(ms.ok()) << ms.status();
  EXPECT_GT(*ms, 0.0f);
  // Untimed events cannot be timed.
  absl::StatusOr<CudaEvent> cheap = CudaEventCreate(0);
  ASSERT_TRUE(cheap.ok());
  ASSERT_TRUE(CudaEventRecord(*cheap, nullptr).ok());
  ASSERT_TRUE(CudaEventSynchronize(*cheap).ok());
  EXPECT_FALSE(CudaEventElapsedMs(*start, *cheap).ok());
  for (CudaEvent e : {*start, *end, *cheap}) {
    EXPECT_TRUE(CudaEventDestroy(e).ok());
  }
  EXPECT_TRUE(CudaFree(0, *a).ok());
  EXPECT_TRUE(CudaFree(0, *b).ok());
}

TEST_F(CudaRuntimeOnGpu, MemoryInfoIsConsistent) {
  absl::StatusOr<CudaMemoryInfo> info = CudaMemGetInfo(0);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_GT(info->total_bytes, 0u);
  EXPECT_LE(info->free_bytes, info->total_bytes);
}

TEST_F(CudaRuntimeOnGpu, BadDeviceIndexIsAnError) {
  EXPECT_TRUE(ScopedCudaDevice(0).status().ok());
  EXPECT_FALSE(ScopedCudaDevice(CudaDeviceCount()).status().ok());
  EXPECT_FALSE(CudaStreamCreate(CudaDeviceCount()).ok());
  EXPECT_FALSE(CudaMalloc(CudaDeviceCount(), 16).ok());
}

// The registry's allocator for cuda:0 caches: a steady state of equal
// requests reaches cudaMalloc once, and a block used on a second stream
// comes back once that stream has finished.
TEST_F(CudaRuntimeOnGpu, RegistryAllocatorCachesPerStream) {
  AllocatorRegistry registry;
  absl::StatusOr<Allocator*> gpu = registry.Get(Device::Cuda(0));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto* cuda = dynamic_cast<CudaAllocator*>(*gpu);
  ASSERT_NE(cuda, nullptr);
  void* first = nullptr;
  for (int i = 0; i < 10; ++i) {
    absl::StatusOr<void*> p = cuda->Allocate(1 << 20);
    ASSERT_TRUE(p.ok()) << p.status();
    if (i == 0) first = *p;
    EXPECT_EQ(*p, first);
    cuda->Deallocate(*p, 1 << 20);
  }
  EXPECT_EQ(cuda->cache().stats().device_mallocs, 1);

  absl::StatusOr<CudaStream> comm = CudaStreamCreate(0);
  ASSERT_TRUE(comm.ok());
  absl::StatusOr<void*> p = cuda->Allocate(1 << 20);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(cuda->cache().RecordStream(*p, *comm).ok());
  cuda->Deallocate(*p, 1 << 20);
  ASSERT_TRUE(CudaStreamSynchronize(*comm).ok());
  absl::StatusOr<void*> again = cuda->Allocate(1 << 20);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, first);
  cuda->Deallocate(*again, 1 << 20);
  EXPECT_EQ(cuda->cache().stats().device_mallocs, 1);
  EXPECT_TRUE(CudaStreamDestroy(*comm).ok());
}

}  // namespace
}  // namespace chunkzero
