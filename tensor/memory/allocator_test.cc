#include "tensor/memory/allocator.h"

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "gtest/gtest.h"
#include "tensor/cuda/cuda_runtime.h"

namespace chunkzero {
namespace {

TEST(HostAllocator, AlignsAndServesItsDevice) {
  HostAllocator a(Device::Simulated(1));
  EXPECT_EQ(a.device(), Device::Simulated(1));
  for (size_t bytes : {0, 1, 63, 64, 65, 4096, 1 << 20}) {
    SCOPED_TRACE(bytes);
    absl::StatusOr<void*> p = a.Allocate(bytes);
    ASSERT_TRUE(p.ok());
    ASSERT_NE(*p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(*p) % kAllocationAlignment, 0u);
    if (bytes > 0) std::memset(*p, 0xab, bytes);
    a.Deallocate(*p, bytes);
  }
}

// Resident kilobytes of this process (VmRSS), or -1.
int64_t ResidentKiB() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  int64_t kib = -1;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib;
}

// A large block goes back to the kernel the moment it is freed, so freed
// chunks never linger in resident memory.
TEST(HostAllocator, ALargeBlockLeavesResidentMemoryWhenFreed) {
#ifdef CHUNKZERO_SANITIZER_BUILD
  GTEST_SKIP() << "sanitizer builds take every block from the heap";
#endif
  // A mapped 16 MiB heap block, freed, raises glibc's mmap threshold to 16
  // MiB (and its trim threshold to 32): from then on the heap would serve,
  // and keep, a block of 8.
  {
    char* raise = new char[size_t{16} << 20];
    std::memset(raise, 0, size_t{16} << 20);
    delete[] raise;
  }
  HostAllocator a(Device::Cpu());
  constexpr size_t kBytes = size_t{8} << 20;
  absl::StatusOr<void*> p = a.Allocate(kBytes);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*p) % 4096, 0u);  // Mapped pages.
  std::memset(*p, 1, kBytes);
  const int64_t touched = ResidentKiB();
  a.Deallocate(*p, kBytes);
  const int64_t freed = ResidentKiB();
  ASSERT_GT(touched, 0);
  EXPECT_GE(touched - freed, 7 << 10);  // KiB: nearly all 8 MiB.
}

TEST(HostAllocator, HugeRequestIsResourceExhausted) {
  HostAllocator a(Device::Cpu());
  absl::StatusOr<void*> p = a.Allocate(size_t{1} << 62);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(p.status().message().find("on cpu"), absl::string_view::npos);
}

TEST(CountingAllocator, CountsCallsAndLiveBytes) {
  HostAllocator host(Device::Cpu());
  CountingAllocator counting(&host);
  void* a = *counting.Allocate(100);
  void* b = *counting.Allocate(28);
  EXPECT_EQ(counting.allocations(), 2);
  EXPECT_EQ(counting.live_bytes(), 128);
  counting.Deallocate(a, 100);
  EXPECT_EQ(counting.deallocations(), 1);
  EXPECT_EQ(counting.live_bytes(), 28);
  counting.Deallocate(b, 28);
  EXPECT_EQ(counting.live_bytes(), 0);
}

TEST(AllocatorRegistry, HostDevicesHaveDistinctAllocators) {
  AllocatorRegistry registry;
  absl::StatusOr<Allocator*> cpu = registry.Get(Device::Cpu());
  absl::StatusOr<Allocator*> sim = registry.Get(Device::Simulated(0));
  ASSERT_TRUE(cpu.ok());
  ASSERT_TRUE(sim.ok());
  EXPECT_NE(*cpu, *sim);
  EXPECT_EQ((*sim)->device(), Device::Simulated(0));
  EXPECT_EQ(*registry.Get(Device::Cpu()), *cpu);
}

TEST(AllocatorRegistry, MissingGpuIsNotFound) {
  AllocatorRegistry registry;
  const Device beyond = Device::Cuda(CudaDeviceCount());
  absl::StatusOr<Allocator*> cuda = registry.Get(beyond);
  EXPECT_EQ(cuda.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(cuda.status().message().find(beyond.ToString()),
            absl::string_view::npos);
}

TEST(CudaRuntime, StubReportsUnimplemented) {
  if (BuiltWithCuda()) GTEST_SKIP() << "CUDA build";
  EXPECT_EQ(CudaDeviceCount(), 0);
  EXPECT_EQ(CudaMalloc(0, 16).status().code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(CudaMemcpy(nullptr, nullptr, 1).code(),
            absl::StatusCode::kUnimplemented);
}

// Runs where a GPU is present (a --config=cuda build on a GPU machine).
TEST(CudaAllocator, RoundTripsThroughDeviceMemory) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no GPU";
  AllocatorRegistry registry;
  absl::StatusOr<Allocator*> gpu = registry.Get(Device::Cuda(0));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  absl::StatusOr<void*> p = (*gpu)->Allocate(64);
  ASSERT_TRUE(p.ok()) << p.status();
  char src[64], back[64] = {};
  for (int i = 0; i < 64; ++i) src[i] = static_cast<char>(i * 3);
  ASSERT_TRUE(CopyBytes(*p, Device::Cuda(0), src, Device::Cpu(), 64).ok());
  ASSERT_TRUE(CopyBytes(back, Device::Cpu(), *p, Device::Cuda(0), 64).ok());
  EXPECT_EQ(std::memcmp(src, back, 64), 0);
  (*gpu)->Deallocate(*p, 64);
}

TEST(AllocatorRegistry, RegisteredAllocatorWins) {
  AllocatorRegistry registry;
  HostAllocator host(Device::Cpu());
  CountingAllocator counting(&host);
  registry.Register(&counting);
  EXPECT_EQ(*registry.Get(Device::Cpu()), &counting);
}

TEST(CopyBytes, CopiesBetweenHostDevices) {
  const char src[] = "chunk payload";
  char dst[sizeof(src)] = {};
  ASSERT_TRUE(
      CopyBytes(dst, Device::Simulated(0), src, Device::Cpu(), sizeof(src))
          .ok());
  EXPECT_STREQ(dst, "chunk payload");
  if (!BuiltWithCuda()) {
    absl::Status no_cuda =
        CopyBytes(dst, Device::Cuda(0), src, Device::Cpu(), 1);
    EXPECT_EQ(no_cuda.code(), absl::StatusCode::kUnimplemented);
    EXPECT_NE(no_cuda.message().find("from cpu to cuda:0"),
              absl::string_view::npos);
  }
}

}  // namespace
}  // namespace chunkzero
