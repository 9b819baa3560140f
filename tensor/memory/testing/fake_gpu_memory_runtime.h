// A GpuMemoryRuntime for tests on machines without a GPU: "device" memory
// is host memory up to a capacity, streams are numbers, and the test
// decides when a stream's work finishes.
//
//   FakeGpuMemoryRuntime runtime(/*capacity_bytes=*/1 << 20);
//   const CudaStream s = FakeStream(1);
//   StreamOrderedAllocator allocator(&runtime, s);
//   ... runtime.FinishStream(FakeStream(2));  // events on stream 2 complete
//
// Every call is logged ("malloc 1024", "free 1024", "record 2",
// "release 2"), so tests can assert exact call sequences. Thread-safe.
#ifndef CHUNKZERO_TENSOR_MEMORY_TESTING_FAKE_GPU_MEMORY_RUNTIME_H_
#define CHUNKZERO_TENSOR_MEMORY_TESTING_FAKE_GPU_MEMORY_RUNTIME_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/mutex.h"
#include "tensor/memory/allocator_base.h"
#include "tensor/memory/gpu_memory_runtime.h"

namespace chunkzero {

inline CudaStream FakeStream(uintptr_t id) {
  return reinterpret_cast<CudaStream>(id);
}
inline uintptr_t FakeStreamId(CudaStream stream) {
  return reinterpret_cast<uintptr_t>(stream);
}

class FakeGpuMemoryRuntime final : public GpuMemoryRuntime {
 public:
  explicit FakeGpuMemoryRuntime(size_t capacity_bytes,
                                Device device = Device::Cuda(0))
      : capacity_(capacity_bytes), device_(device) {}
  ~FakeGpuMemoryRuntime() override {
    MutexLock lock(&mu_);
    for (const auto& [ptr, bytes] : blocks_) {
      ::operator delete(ptr, std::align_val_t(kAllocationAlignment));
    }
  }

  Device device() const override { return device_; }

  absl::StatusOr<void*> Malloc(size_t bytes) override {
    MutexLock lock(&mu_);
    if (in_use_ + bytes > capacity_) {
      log_.push_back(absl::StrCat("malloc ", bytes, " failed"));
      return absl::ResourceExhaustedError(absl::StrCat(
          "fake device full (", in_use_, " of ", capacity_, " bytes in use)"));
    }
    void* ptr = ::operator new(bytes, std::align_val_t(kAllocationAlignment));
    blocks_[ptr] = bytes;
    in_use_ += bytes;
    log_.push_back(absl::StrCat("malloc ", bytes));
    return ptr;
  }

  absl::Status Free(void* ptr) override {
    MutexLock lock(&mu_);
    auto it = blocks_.find(ptr);
    if (it == blocks_.end()) {
      log_.push_back("free of an unknown pointer");
      return absl::InvalidArgumentError("free of an unknown pointer");
    }
    log_.push_back(absl::StrCat("free ", it->second));
    in_use_ -= it->second;
    ::operator delete(ptr, std::align_val_t(kAllocationAlignment));
    blocks_.erase(it);
    return absl::OkStatus();
  }

  absl::StatusOr<CudaEvent> RecordEvent(CudaStream stream) override {
    MutexLock lock(&mu_);
    if (!record_error_.ok()) return record_error_;
    StreamState& s = streams_[FakeStreamId(stream)];
    const uintptr_t id = ++next_event_;
    events_[id] = {FakeStreamId(stream), ++s.recorded};
    log_.push_back(absl::StrCat("record ", FakeStreamId(stream)));
    return reinterpret_cast<CudaEvent>(id);
  }

  absl::StatusOr<bool> EventDone(CudaEvent event) override {
    MutexLock lock(&mu_);
    if (!query_error_.ok()) return query_error_;
    const auto& [stream, position] = events_.at(Id(event));
    return streams_[stream].finished >= position;
  }

  absl::Status WaitEvent(CudaEvent event) override {
    MutexLock lock(&mu_);
    const auto& [stream, position] = events_.at(Id(event));
    log_.push_back(absl::StrCat("wait ", stream));
    StreamState& s = streams_[stream];
    if (s.finished < position) s.finished = position;
    return absl::OkStatus();
  }

  void ReleaseEvent(CudaEvent event) override {
    MutexLock lock(&mu_);
    log_.push_back(absl::StrCat("release ", events_.at(Id(event)).first));
    events_.erase(Id(event));
  }

  // Completes everything recorded on `stream` so far.
  void FinishStream(CudaStream stream) {
    MutexLock lock(&mu_);
    StreamState& s = streams_[FakeStreamId(stream)];
    s.finished = s.recorded;
  }

  // Makes RecordEvent, or EventDone, fail with `error` from now on.
  void FailRecords(absl::Status error) {
    MutexLock lock(&mu_);
    record_error_ = std::move(error);
  }
  void FailQueries(absl::Status error) {
    MutexLock lock(&mu_);
    query_error_ = std::move(error);
  }

  std::vector<std::string> TakeLog() {
    MutexLock lock(&mu_);
    return std::exchange(log_, {});
  }
  size_t in_use() const {
    MutexLock lock(&mu_);
    return in_use_;
  }
  size_t live_events() const {
    MutexLock lock(&mu_);
    return events_.size();
  }

 private:
  struct StreamState {
    uint64_t recorded = 0;
    uint64_t finished = 0;
  };
  static uintptr_t Id(CudaEvent event) {
    return reinterpret_cast<uintptr_t>(event);
  }

  const size_t capacity_;
  const Device device_;
  mutable Mutex mu_;
  size_t in_use_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<void*, size_t> blocks_ ABSL_GUARDED_BY(mu_);
  std::map<uintptr_t, StreamState> streams_ ABSL_GUARDED_BY(mu_);
  // Event -> (stream, position in the stream's records).
  std::map<uintptr_t, std::pair<uintptr_t, uint64_t>> events_
      ABSL_GUARDED_BY(mu_);
  uintptr_t next_event_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status record_error_ ABSL_GUARDED_BY(mu_);
  absl::Status query_error_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> log_ ABSL_GUARDED_BY(mu_);
};

}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_MEMORY_TESTING_FAKE_GPU_MEMORY_RUNTIME_H_
