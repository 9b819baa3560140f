// An NcclApi for tests on machines without a GPU: "device" memory is host
// memory, a collective at world size 1 moves its data at Enqueue (as NCCL
// would), and the test decides when the enqueued work finishes.
//
//   auto api = std::make_unique<FakeNcclApi>();
//   FakeNcclApi* fake = api.get();
//   fake->HoldCompletion();              // events stay pending...
//   ... fake->CompleteAll();             // ...until now
//   fake->FailAsync(absl::UnavailableError("peer gone"));
//
// Every call that acts is logged ("enqueue AllReduce f32 count=4",
// "abort", ...), so tests can assert exact call sequences; polls (Ready,
// AsyncError, EventDone) are not, and Ready's are counted. Thread-safe.
#ifndef CHUNKZERO_COMM_NCCL_TESTING_FAKE_NCCL_API_H_
#define CHUNKZERO_COMM_NCCL_TESTING_FAKE_NCCL_API_H_

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/mutex.h"
#include "comm/nccl/nccl_api.h"

namespace chunkzero {
namespace comm {

class FakeNcclApi final : public NcclApi {
 public:
  explicit FakeNcclApi(std::string unique_id = std::string(128, 'u'))
      : unique_id_(std::move(unique_id)) {}
  ~FakeNcclApi() override {
    MutexLock lock(&mu_);
    for (auto& [ptr, bytes] : allocations_) delete[] static_cast<char*>(ptr);
  }

  absl::StatusOr<std::string> GetUniqueId() override {
    MutexLock lock(&mu_);
    Log("get_unique_id");
    return unique_id_;
  }

  absl::StatusOr<Comm> InitRank(int size, const std::string& unique_id,
                                int rank) override {
    MutexLock lock(&mu_);
    Log(absl::StrCat("init_rank ", rank, " of ", size));
    if (!init_error_.ok()) return init_error_;
    seen_unique_id_ = unique_id;
    size_ = size;
    polls_left_ = init_polls_;
    return reinterpret_cast<Comm>(uintptr_t{0xC0});
  }

  absl::StatusOr<bool> Ready(Comm) override {
    MutexLock lock(&mu_);
    ++ready_polls_;
    if (!ready_error_.ok()) return ready_error_;
    if (polls_left_ == 0) return true;
    if (polls_left_ > 0) --polls_left_;
    return false;
  }

  absl::Status AsyncError(Comm) override {
    MutexLock lock(&mu_);
    return async_error_;
  }
  absl::Status Abort(Comm) override {
    MutexLock lock(&mu_);
    Log("abort");
    // Aborting makes NCCL's kernels return: the stream drains.
    completed_ = enqueued_;
    return absl::OkStatus();
  }

  absl::StatusOr<void*> Malloc(size_t bytes) override {
    MutexLock lock(&mu_);
    Log(absl::StrCat("malloc ", bytes));
    void* ptr = new char[bytes];
    allocations_[ptr] = bytes;
    return ptr;
  }
  void Free(void* ptr) override {
    MutexLock lock(&mu_);
    Log("free");
    allocations_.erase(ptr);
    delete[] static_cast<char*>(ptr);
  }

  absl::Status Enqueue(Comm, const NcclCall& call, CudaStream) override {
    MutexLock lock(&mu_);
    Log(absl::StrCat("enqueue ", CollectiveKindName(call.kind), " ",
                     DTypeName(call.dtype), " count=", call.count));
    if (!enqueue_error_.ok()) return enqueue_error_;
    if (size_ == 1) MoveData(call);
    polls_left_ = enqueue_polls_;
    ++enqueued_;
    if (!hold_) completed_ = enqueued_;
    return absl::OkStatus();
  }

  absl::StatusOr<CudaStream> CreateStream() override {
    MutexLock lock(&mu_);
    Log("create_stream");
    return reinterpret_cast<CudaStream>(uintptr_t{0x5});
  }
  void DestroyStream(CudaStream) override {
    MutexLock lock(&mu_);
    Log("destroy_stream");
  }
  absl::Status StreamWaitStream(CudaStream, CudaStream after) override {
    MutexLock lock(&mu_);
    Log(absl::StrCat("wait_stream ", reinterpret_cast<uintptr_t>(after)));
    return absl::OkStatus();
  }
  absl::Status StreamWaitEvent(CudaStream stream, CudaEvent) override {
    MutexLock lock(&mu_);
    Log(absl::StrCat("stream_wait_event ",
                     reinterpret_cast<uintptr_t>(stream)));
    return absl::OkStatus();
  }
  absl::StatusOr<CudaEvent> RecordEvent(CudaStream) override {
    MutexLock lock(&mu_);
    const uintptr_t id = ++next_event_;
    events_[id] = enqueued_;
    live_events_++;
    return reinterpret_cast<CudaEvent>(id);
  }
  absl::StatusOr<bool> EventDone(CudaEvent event) override {
    MutexLock lock(&mu_);
    if (!event_error_.ok()) return event_error_;
    return completed_ >= events_.at(reinterpret_cast<uintptr_t>(event));
  }
  void ReleaseEvent(CudaEvent event) override {
    MutexLock lock(&mu_);
    events_.erase(reinterpret_cast<uintptr_t>(event));
    live_events_--;
  }

  // ---- Controls ----
  void HoldCompletion() {
    MutexLock lock(&mu_);
    hold_ = true;
  }
  void CompleteAll() {
    MutexLock lock(&mu_);
    completed_ = enqueued_;
    hold_ = false;
  }
  void FailAsync(absl::Status error) {
    MutexLock lock(&mu_);
    async_error_ = std::move(error);
  }
  void FailEnqueue(absl::Status error) {
    MutexLock lock(&mu_);
    enqueue_error_ = std::move(error);
  }
  void FailEvents(absl::Status error) {
    MutexLock lock(&mu_);
    event_error_ = std::move(error);
  }
  void FailInit(absl::Status error) {
    MutexLock lock(&mu_);
    init_error_ = std::move(error);
  }
  // How many Ready polls say "in progress" after InitRank and after each
  // Enqueue (negative: for ever); 0 by default.
  void SetInProgressPolls(int after_init, int after_enqueue) {
    MutexLock lock(&mu_);
    init_polls_ = after_init;
    enqueue_polls_ = after_enqueue;
  }
  // Ready fails with `error` (a failed init or enqueue).
  void FailReady(absl::Status error) {
    MutexLock lock(&mu_);
    ready_error_ = std::move(error);
  }
  int ready_polls() const {
    MutexLock lock(&mu_);
    return ready_polls_;
  }

  std::vector<std::string> TakeLog() {
    MutexLock lock(&mu_);
    return std::exchange(log_, {});
  }
  std::string seen_unique_id() const {
    MutexLock lock(&mu_);
    return seen_unique_id_;
  }
  int live_events() const {
    MutexLock lock(&mu_);
    return live_events_;
  }

 private:
  void Log(std::string line) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    log_.push_back(std::move(line));
  }

  // World size 1: every collective leaves the input as the output.
  static void MoveData(const NcclCall& call) {
    const size_t bytes = call.count * ElementSize(call.dtype);
    if (call.recv != nullptr && call.recv != call.send && bytes > 0) {
      std::memmove(call.recv, call.send, bytes);
    }
  }

  const std::string unique_id_;
  mutable Mutex mu_;
  std::vector<std::string> log_ ABSL_GUARDED_BY(mu_);
  std::string seen_unique_id_ ABSL_GUARDED_BY(mu_);
  int size_ ABSL_GUARDED_BY(mu_) = 0;
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t enqueued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
  uintptr_t next_event_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uintptr_t, uint64_t> events_ ABSL_GUARDED_BY(mu_);
  int live_events_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<void*, size_t> allocations_ ABSL_GUARDED_BY(mu_);
  absl::Status async_error_ ABSL_GUARDED_BY(mu_);
  absl::Status enqueue_error_ ABSL_GUARDED_BY(mu_);
  absl::Status event_error_ ABSL_GUARDED_BY(mu_);
  absl::Status ready_error_ ABSL_GUARDED_BY(mu_);
  int init_polls_ ABSL_GUARDED_BY(mu_) = 0;
  int enqueue_polls_ ABSL_GUARDED_BY(mu_) = 0;
  int polls_left_ ABSL_GUARDED_BY(mu_) = 0;
  int ready_polls_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status init_error_ ABSL_GUARDED_BY(mu_);
};

// Forwards every call to an NcclApi it does not own, so that a test can
// keep its fake after the group (which owns its api) is gone:
//   FakeNcclApi fake;
//   NcclProcessGroup::CreateWithApi(0, 1, ForwardTo(&fake), store);
class ForwardingNcclApi final : public NcclApi {
 public:
  explicit ForwardingNcclApi(NcclApi* target) : target_(target) {}
  absl::StatusOr<std::string> GetUniqueId() override {
    return target_->GetUniqueId();
  }
  absl::StatusOr<Comm> InitRank(int size, const std::string& id,
                                int rank) override {
    return target_->InitRank(size, id, rank);
  }
  absl::StatusOr<bool> Ready(Comm comm) override {
    return target_->Ready(comm);
  }
  absl::Status AsyncError(Comm comm) override {
    return target_->AsyncError(comm);
  }
  absl::Status Abort(Comm comm) override { return target_->Abort(comm); }
  absl::StatusOr<void*> Malloc(size_t bytes) override {
    return target_->Malloc(bytes);
  }
  void Free(void* ptr) override { target_->Free(ptr); }
  absl::Status Enqueue(Comm comm, const NcclCall& call,
                       CudaStream stream) override {
    return target_->Enqueue(comm, call, stream);
  }
  absl::StatusOr<CudaStream> CreateStream() override {
    return target_->CreateStream();
  }
  void DestroyStream(CudaStream stream) override {
    target_->DestroyStream(stream);
  }
  absl::Status StreamWaitStream(CudaStream stream, CudaStream after) override {
    return target_->StreamWaitStream(stream, after);
  }
  absl::Status StreamWaitEvent(CudaStream stream, CudaEvent event) override {
    return target_->StreamWaitEvent(stream, event);
  }
  absl::StatusOr<CudaEvent> RecordEvent(CudaStream stream) override {
    return target_->RecordEvent(stream);
  }
  absl::StatusOr<bool> EventDone(CudaEvent event) override {
    return target_->EventDone(event);
  }
  void ReleaseEvent(CudaEvent event) override { target_->ReleaseEvent(event); }

 private:
  NcclApi* const target_;
};

inline std::unique_ptr<NcclApi> ForwardTo(NcclApi* target) {
  return std::make_unique<ForwardingNcclApi>(target);
}

}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_NCCL_TESTING_FAKE_NCCL_API_H_
