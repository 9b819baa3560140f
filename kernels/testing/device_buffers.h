// Device memory for the GPU layers' tests: copies up and down, and every
// buffer freed when the holder goes; and GpuTest, their fixture.
//
//   DeviceBuffers gpu;
//   float* x = gpu.Up(host_x);
//   ... run a layer ...
//   EXPECT_EQ(gpu.Down(x, n), want);
#ifndef CHUNKZERO_KERNELS_TESTING_DEVICE_BUFFERS_H_
#define CHUNKZERO_KERNELS_TESTING_DEVICE_BUFFERS_H_

#include <algorithm>
#include <cstddef>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/cuda/cuda_runtime.h"

namespace chunkzero {
namespace kernels_testing {

class DeviceBuffers {
 public:
  DeviceBuffers() = default;
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;
  ~DeviceBuffers() {
    for (void* p : allocated_) EXPECT_TRUE(CudaFree(0, p).ok());
  }

  // n zeroed elements on GPU 0.
  template <typename T>
  T* Zeros(size_t n) {
    absl::StatusOr<void*> p = CudaMalloc(0, std::max<size_t>(n, 1) * sizeof(T));
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return nullptr;
    allocated_.push_back(*p);
    const std::vector<T> zeros(n, T{});
    EXPECT_TRUE(CudaMemcpy(*p, zeros.data(), n * sizeof(T)).ok());
    return static_cast<T*>(*p);
  }
  // A device copy of `host`.
  template <typename T>
  T* Up(const std::vector<T>& host) {
    T* p = Zeros<T>(host.size());
    if (p != nullptr) {
      EXPECT_TRUE(CudaMemcpy(p, host.data(), host.size() * sizeof(T)).ok());
    }
    return p;
  }
  // n elements from the device.
  template <typename T>
  std::vector<T> Down(const T* device, size_t n) {
    std::vector<T> host(n);
    EXPECT_TRUE(CudaMemcpy(host.data(), device, n * sizeof(T)).ok());
    return host;
  }

 private:
  std::vector<void*> allocated_;
};

// A fixture for tests that need a GPU: skipped without one, with
// DeviceBuffers at hand.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no GPU visible";
  }
  template <typename T>
  T* Up(const std::vector<T>& host) {
    return gpu_.Up(host);
  }
  template <typename T>
  T* Zeros(size_t n) {
    return gpu_.Zeros<T>(n);
  }
  template <typename T>
  std::vector<T> Down(const T* device, size_t n) {
    return gpu_.Down(device, n);
  }

 private:
  DeviceBuffers gpu_;
};

}  // namespace kernels_testing
}  // namespace chunkzero

#endif  // CHUNKZERO_KERNELS_TESTING_DEVICE_BUFFERS_H_
