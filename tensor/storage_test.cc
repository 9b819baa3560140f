#include "tensor/storage.h"

#include <cstring>

#include "base/mutex.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

class StorageTest : public ::testing::Test {
 protected:
  StorageTest()
      : cpu_(Device::Cpu()),
        sim_(Device::Simulated(0)),
        cpu_count_(&cpu_),
        sim_count_(&sim_) {
    registry_.Register(&cpu_count_);
    registry_.Register(&sim_count_);
    options_.category = MemoryCategory::kParam;
    options_.tracker = &tracker_;
    options_.allocators = &registry_;
  }

  HostAllocator cpu_, sim_;
  CountingAllocator cpu_count_, sim_count_;
  AllocatorRegistry registry_;
  MemoryTracker tracker_;
  StorageOptions options_;
};

TEST_F(StorageTest, CreateAllocatesAndAccounts) {
  absl::StatusOr<std::shared_ptr<Storage>> s =
      Storage::Create(96, Device::Cpu(), options_);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE((*s)->allocated());
  EXPECT_EQ((*s)->nbytes(), 96u);
  EXPECT_EQ((*s)->category(), MemoryCategory::kParam);
  EXPECT_EQ(tracker_.Current(Device::Cpu(), MemoryCategory::kParam), 96);
  EXPECT_EQ(cpu_count_.allocations(), 1);
  s->reset();
  EXPECT_EQ(tracker_.Current(Device::Cpu(), MemoryCategory::kParam), 0);
  EXPECT_EQ(cpu_count_.deallocations(), 1);
}

TEST_F(StorageTest, FreeAndAllocateAgainKeepLogicalSize) {
  std::shared_ptr<Storage> s = *Storage::Create(64, Device::Cpu(), options_);
  s->Free();
  EXPECT_FALSE(s->allocated());
  EXPECT_EQ(s->data(), nullptr);
  EXPECT_EQ(s->nbytes(), 64u);
  EXPECT_EQ(tracker_.Current(Device::Cpu(), MemoryCategory::kParam), 0);
  s->Free();  // Freeing twice is a no-op.
  ASSERT_TRUE(s->Allocate().ok());
  ASSERT_TRUE(s->Allocate().ok());  // Already allocated: no second allocation.
  EXPECT_EQ(cpu_count_.allocations(), 2);
  EXPECT_EQ(tracker_.Current(Device::Cpu(), MemoryCategory::kParam), 64);
  EXPECT_EQ(tracker_.Peak(Device::Cpu(), MemoryCategory::kParam), 64);
}

TEST_F(StorageTest, UnallocatedHoldsNothing) {
  std::shared_ptr<Storage> s =
      Storage::CreateUnallocated(128, Device::Simulated(0), options_);
  EXPECT_FALSE(s->allocated());
  EXPECT_EQ(sim_count_.allocations(), 0);
  ASSERT_TRUE(s->MoveTo(Device::Cpu()).ok());
  EXPECT_EQ(s->device(), Device::Cpu());
  EXPECT_EQ(cpu_count_.allocations(), 0);
}

TEST_F(StorageTest, MoveCopiesContentsAndMovesAccounting) {
  std::shared_ptr<Storage> s = *Storage::Create(16, Device::Cpu(), options_);
  std::memcpy(s->data(), "0123456789abcdef", 16);
  void* before = s->data();
  ASSERT_TRUE(s->MoveTo(Device::Simulated(0)).ok());
  EXPECT_EQ(s->device(), Device::Simulated(0));
  EXPECT_NE(s->data(), before);
  EXPECT_EQ(std::memcmp(s->data(), "0123456789abcdef", 16), 0);
  EXPECT_EQ(tracker_.Current(Device::Cpu(), MemoryCategory::kParam), 0);
  EXPECT_EQ(tracker_.Current(Device::Simulated(0), MemoryCategory::kParam), 16);
  EXPECT_EQ(sim_count_.live_bytes(), 16);
  EXPECT_EQ(cpu_count_.live_bytes(), 0);
  ASSERT_TRUE(s->MoveTo(Device::Simulated(0)).ok());  // Same device: no-op.
  EXPECT_EQ(sim_count_.allocations(), 1);
}

// An asynchronous move allocates at once and points data() at the new
// memory; the copy, `readers_done` (the old memory still intact), the
// freeing of the old memory and `then` run on the stream, in that order.
TEST_F(StorageTest, AsyncMoveCopiesOnTheStreamAndFreesTheOldMemoryAfter) {
  std::shared_ptr<Storage> s = *Storage::Create(16, Device::Cpu(), options_);
  std::memcpy(s->data(), "0123456789abcdef", 16);
  CopyStream stream;
  Notification hold;
  stream.Enqueue([&] { hold.WaitForNotification(); });  // Stream busy.
  bool old_intact = false, old_freed = false;
  absl::StatusOr<const void*> old = s->MoveToAsync(
      Device::Simulated(0), stream,
      [&] {
        old_intact = cpu_count_.live_bytes() == 16;
        return absl::OkStatus();
      },
      [&](absl::Status copied) {
        EXPECT_TRUE(copied.ok());
        old_freed = cpu_count_.live_bytes() == 0;
      });
  ASSERT_TRUE(old.ok());
  // Both held while the copy is pending; data() is already the new memory.
  EXPECT_EQ(s->device(), Device::Simulated(0));
  EXPECT_NE(s->data(), *old);
  EXPECT_EQ(std::memcmp(*old, "0123456789abcdef", 16), 0);
  EXPECT_EQ(tracker_.Current(Device::Cpu(), MemoryCategory::kParam), 16);
  EXPECT_EQ(tracker_.Current(Device::Simulated(0), MemoryCategory::kParam), 16);
  hold.Notify();
  stream.Drain();
  EXPECT_TRUE(old_intact);
  EXPECT_TRUE(old_freed);
  EXPECT_EQ(std::memcmp(s->data(), "0123456789abcdef", 16), 0);
  EXPECT_EQ(tracker_.Current(Device::Cpu(), MemoryCategory::kParam), 0);
  EXPECT_EQ(cpu_count_.live_bytes(), 0);
  // Unallocated: refused, nothing enqueued.
  s->Free();
  EXPECT_EQ(s->MoveToAsync(Device::Cpu(), stream, nullptr, [](absl::Status) {})
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(stream.tasks_run(), 2);
}

TEST_F(StorageTest, FailedMoveChangesNothing) {
  std::shared_ptr<Storage> s = *Storage::Create(8, Device::Cpu(), options_);
  void* before = s->data();
  absl::Status moved = s->MoveTo(Device::Cuda(64));
  EXPECT_EQ(moved.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(moved.message().find("moving 8 bytes from cpu"),
            absl::string_view::npos);
  EXPECT_EQ(s->device(), Device::Cpu());
  EXPECT_EQ(s->data(), before);
  EXPECT_EQ(tracker_.Current(Device::Cpu(), MemoryCategory::kParam), 8);
}

TEST_F(StorageTest, AllocationFailureIsReported) {
  absl::StatusOr<std::shared_ptr<Storage>> s =
      Storage::Create(size_t{1} << 62, Device::Cpu(), options_);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(tracker_.Current(Device::Cpu(), MemoryCategory::kParam), 0);
  // The failed request shows in no peak.
  EXPECT_EQ(tracker_.PeakTotal(Device::Cpu()), 0);
}

// A request past the device's memory limit is refused before it reaches
// the allocator, naming the device, the category and the bytes.
TEST_F(StorageTest, TheDeviceMemoryLimitCapsAllocations) {
  tracker_.SetLimit(Device::Simulated(0), 100);
  std::shared_ptr<Storage> held =
      *Storage::Create(64, Device::Simulated(0), options_);
  StorageOptions activations = options_;
  activations.category = MemoryCategory::kActivation;
  absl::StatusOr<std::shared_ptr<Storage>> refused =
      Storage::Create(40, Device::Simulated(0), activations);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.status().message(),
            "sim:0: cannot hold 40 B more of activation: 64 B of its 100 B "
            "device memory limit are held (param 64 B)");
  EXPECT_EQ(sim_count_.allocations(), 1);
  EXPECT_EQ(tracker_.PeakTotal(Device::Simulated(0)), 64);
  // Freeing makes room; Allocate again finds it.
  std::shared_ptr<Storage> later =
      Storage::CreateUnallocated(40, Device::Simulated(0), activations);
  held->Free();
  ASSERT_TRUE(later->Allocate().ok());
  EXPECT_FALSE(held->Allocate().ok());
  EXPECT_FALSE(held->allocated());
  // The host has no limit.
  EXPECT_TRUE(Storage::Create(1000, Device::Cpu(), options_).ok());
}

// Moving into a device without room fails and leaves the storage where it
// was, its contents and its accounting untouched.
TEST_F(StorageTest, MoveIntoAFullDeviceChangesNothing) {
  tracker_.SetLimit(Device::Simulated(0), 8);
  std::shared_ptr<Storage> s = *Storage::Create(16, Device::Cpu(), options_);
  std::memcpy(s->data(), "0123456789abcdef", 16);
  void* before = s->data();
  absl::Status moved = s->MoveTo(Device::Simulated(0));
  EXPECT_EQ(moved.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(moved.message().find("sim:0: cannot hold 16 B more of param"),
            absl::string_view::npos)
      << moved;
  EXPECT_NE(moved.message().find("moving 16 bytes from cpu"),
            absl::string_view::npos)
      << moved;
  EXPECT_EQ(s->device(), Device::Cpu());
  EXPECT_EQ(s->data(), before);
  EXPECT_EQ(std::memcmp(s->data(), "0123456789abcdef", 16), 0);
  EXPECT_EQ(sim_count_.allocations(), 0);
  EXPECT_EQ(tracker_.CurrentTotal(Device::Simulated(0)), 0);
  EXPECT_EQ(tracker_.Current(Device::Cpu(), MemoryCategory::kParam), 16);
}

}  // namespace
}  // namespace chunkzero
