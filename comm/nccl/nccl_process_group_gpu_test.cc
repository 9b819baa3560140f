// NcclProcessGroup on real NCCL: every collective and dtype at world size 1
// on cuda:0, and two ranks on two GPUs where the machine has them. Skips
// where no GPU is visible.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/nccl/nccl_process_group.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "tensor/cuda/cuda_runtime.h"

namespace chunkzero {
namespace comm {
namespace {

// `bytes` of device memory holding `init`, freed at scope exit.
class DeviceBytes {
 public:
  explicit DeviceBytes(const std::vector<uint8_t>& init, int device = 0)
      : device_(device), size_(init.size()) {
    ptr_ = *CudaMalloc(device, size_ == 0 ? 1 : size_);
    EXPECT_TRUE(CudaMemcpy(ptr_, init.data(), size_).ok());
  }
  ~DeviceBytes() { CudaFree(device_, ptr_).IgnoreError(); }
  void* get() const { return ptr_; }
  std::vector<uint8_t> Read() const {
    std::vector<uint8_t> out(size_);
    EXPECT_TRUE(CudaMemcpy(out.data(), ptr_, size_).ok());
    return out;
  }

 private:
  int device_;
  size_t size_;
  void* ptr_;
};

std::vector<uint8_t> Pattern(size_t bytes, int seed) {
  std::vector<uint8_t> v(bytes);
  // Small values in every byte: valid (finite) in every dtype's encoding.
  for (size_t i = 0; i < bytes; ++i)
    v[i] = static_cast<uint8_t>((i + seed) % 7);
  return v;
}

class NcclOnGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no GPU visible (built with CUDA: " << BuiltWithCuda()
                   << ")";
    }
  }
};

// At world size 1 every collective's output is its input, for every dtype
// and reduce op.
TEST_F(NcclOnGpu, WorldSizeOneEveryCollectiveAndDType) {
  gloo::rendezvous::HashStore store;
  absl::StatusOr<std::unique_ptr<NcclProcessGroup>> created =
      NcclProcessGroup::Create(0, 1, 0, store);
  ASSERT_TRUE(created.ok()) << created.status();
  NcclProcessGroup& group = **created;
  constexpr size_t kCount = 1000;
  for (int d = 0; d < kNumDTypes; ++d) {
    const DType dtype = static_cast<DType>(d);
    SCOPED_TRACE(DTypeName(dtype));
    const std::vector<uint8_t> data = Pattern(kCount * ElementSize(dtype), d);
    for (int o = 0; o < kNumReduceOps; ++o) {
      DeviceBytes buffer(data);
      AllReduceOptions options;
      options.op = static_cast<ReduceOp>(o);
      ASSERT_TRUE(
          AllReduce(group, MutableBuffer{buffer.get(), kCount, dtype}, options)
              .ok());
      EXPECT_EQ(buffer.Read(), data) << ReduceOpName(options.op);
    }
    DeviceBytes send(data), recv(std::vector<uint8_t>(data.size(), 0));
    ASSERT_TRUE(AllGather(group, ConstBuffer{send.get(), kCount, dtype},
                          MutableBuffer{recv.get(), kCount, dtype})
                    .ok());
    EXPECT_EQ(recv.Read(), data);
    DeviceBytes scattered(std::vector<uint8_t>(data.size(), 0));
    ASSERT_TRUE(ReduceScatter(group, ConstBuffer{send.get(), kCount, dtype},
                              MutableBuffer{scattered.get(), kCount, dtype})
                    .ok());
    EXPECT_EQ(scattered.Read(), data);
    DeviceBytes reduced(std::vector<uint8_t>(data.size(), 0));
    ASSERT_TRUE(Reduce(group, ConstBuffer{send.get(), kCount, dtype},
                       MutableBuffer{reduced.get(), kCount, dtype})
                    .ok());
    EXPECT_EQ(reduced.Read(), data);
    ASSERT_TRUE(
        Broadcast(group, MutableBuffer{send.get(), kCount, dtype}).ok());
    EXPECT_EQ(send.Read(), data);
  }
  EXPECT_TRUE(Barrier(group).ok());
  EXPECT_TRUE(group.abort_status().ok());
}

// Two ranks on two GPUs: sums, gathers and a collective one rank never
// joins (the other aborts at its timeout).
TEST_F(NcclOnGpu, TwoRanksOnTwoGpus) {
  if (CudaDeviceCount() < 2) GTEST_SKIP() << "fewer than 2 GPUs";
  gloo::rendezvous::HashStore store;
  std::vector<absl::Status> results(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<NcclProcessGroup>> g =
          NcclProcessGroup::Create(r, 2, r, store);
      if (!g.ok()) {
        results[r] = g.status();
        return;
      }
      std::vector<int32_t> mine = {r + 1, 10 * (r + 1)};
      std::vector<uint8_t> bytes(8);
      std::memcpy(bytes.data(), mine.data(), 8);
      DeviceBytes buffer(bytes, r);
      results[r] = AllReduce(**g, MutableBuffer{buffer.get(), 2, DType::kI32});
      std::vector<uint8_t> out = buffer.Read();
      int32_t sums[2];
      std::memcpy(sums, out.data(), 8);
      if (results[r].ok() && (sums[0] != 3 || sums[1] != 30)) {
        results[r] = absl::InternalError("wrong sums");
      }
      if (r == 0 && results[r].ok()) {
        AllReduceOptions lonely;
        lonely.timeout = absl::Seconds(2);
        const absl::Status status =
            AllReduce(**g, MutableBuffer{buffer.get(), 2, DType::kI32}, lonely);
        if (status.code() != absl::StatusCode::kDeadlineExceeded) {
          results[r] = absl::InternalError(
              absl::StrCat("lonely collective: ", status.ToString()));
        }
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  EXPECT_TRUE(results[0].ok()) << results[0];
  EXPECT_TRUE(results[1].ok()) << results[1];
}

}  // namespace
}  // namespace comm
}  // namespace chunkzero
