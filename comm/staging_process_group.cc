#include "comm/staging_process_group.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/thread.h"
#include "comm/argument_checks.h"
#include "tensor/cuda/cuda_runtime.h"

namespace chunkzero {
namespace comm {

// One collective's staging memory (returned when it is destroyed) and the
// copies that bring its results back to the device.
struct StagingProcessGroup::Staged {
  struct Buffer {
    void* host;
    size_t bytes;
  };
  struct CopyBack {
    void* device_dst;
    const void* host_src;
    size_t bytes;
  };

  explicit Staged(StagingProcessGroup* owner) : owner(owner) {}
  ~Staged() {
    for (const Buffer& b : buffers) owner->Release(b.host, b.bytes);
  }
  Staged(const Staged&) = delete;
  Staged& operator=(const Staged&) = delete;

  // Host memory of `bytes` holding a copy of `device_src` (null: nothing
  // to copy in).
  absl::StatusOr<void*> In(const void* device_src, size_t bytes) {
    absl::StatusOr<void*> host = owner->Stage(bytes);
    if (!host.ok()) return host.status();
    buffers.push_back({*host, bytes});
    if (device_src != nullptr) {
      if (absl::Status s = CopyBytes(*host, Device::Cpu(), device_src,
                                     owner->device_, bytes);
          !s.ok()) {
        return s;
      }
    }
    return *host;
  }

  StagingProcessGroup* const owner;
  std::vector<Buffer> buffers;
  std::vector<CopyBack> copies;
};

struct StagingProcessGroup::Pending {
  std::unique_ptr<Work> inner;
  std::shared_ptr<Staged> staged;
  WorkCompletion completion;
};

namespace {

std::unique_ptr<Work> Failed(const ProcessGroup& group,
                             const CollectiveCall& call,
                             const absl::Status& cause) {
  return MakeCompletedWork(absl::Status(
      cause.code(),
      absl::StrCat("rank ", group.rank(), ": ", call.ToString(), " [",
                   group.backend_name(), "]: staging: ", cause.message())));
}

char* At(void* base, size_t offset) {
  return static_cast<char*>(base) + offset;
}
const char* At(const void* base, size_t offset) {
  return static_cast<const char*>(base) + offset;
}

}  // namespace

StagingProcessGroup::StagingProcessGroup(ProcessGroup* inner, Device device,
                                         Allocator* staging)
    : ForwardingProcessGroup(*inner, ArgumentChecks::kAtEntry),
      device_(device),
      staging_(staging),
      name_(absl::StrCat(inner->backend_name(), "+staged")) {
  // Without a worker (the kernel refused a thread: ulimit -u) each
  // collective finishes on the calling thread instead (see Enqueue).
  absl::StatusOr<std::thread> worker =
      StartThread(absl::StrCat("the staging worker of rank ", rank()),
                  [this] { RunWorker(); });
  if (worker.ok()) worker_ = *std::move(worker);
}

StagingProcessGroup::~StagingProcessGroup() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    cv_.SignalAll();
  }
  if (worker_.joinable()) worker_.join();
}

absl::StatusOr<void*> StagingProcessGroup::Stage(size_t bytes) {
  return staging_->Allocate(bytes);
}

void StagingProcessGroup::Release(void* ptr, size_t bytes) {
  staging_->Deallocate(ptr, bytes);
}

std::unique_ptr<Work> StagingProcessGroup::Enqueue(
    std::unique_ptr<Work> inner_work, std::shared_ptr<Staged> staged,
    std::string description) {
  auto pending = std::make_unique<Pending>(
      Pending{std::move(inner_work), std::move(staged),
              WorkCompletion(std::move(description))});
  std::unique_ptr<Work> work = pending->completion.MakeWork();
  if (!worker_.joinable()) {
    Finish(*pending);
    return work;
  }
  MutexLock lock(&mu_);
  queue_.push_back(std::move(pending));
  ++unfinished_;
  cv_.SignalAll();
  return work;
}

void StagingProcessGroup::DoAbort(const absl::Status& cause) {
  inner().Abort(cause);
  // Every inner collective is complete now, so the worker gets through
  // its queue without waiting on a peer.
  MutexLock lock(&mu_);
  while (unfinished_ > 0) cv_.Wait(&mu_);
}

void StagingProcessGroup::RunWorker() {
  // The copies back run on this thread: on the rank's GPU, so that they use
  // that GPU's context and default stream, not cuda:0's. A GPU that cannot
  // be selected fails the copies themselves, naming it.
  std::optional<ScopedCudaDevice> on_gpu;
  if (device_.type() == DeviceType::kCuda) on_gpu.emplace(device_.index());
  while (true) {
    std::unique_ptr<Pending> pending;
    {
      MutexLock lock(&mu_);
      while (queue_.empty() && !stop_) cv_.Wait(&mu_);
      if (queue_.empty()) return;  // Stopped and drained.
      pending = std::move(queue_.front());
      queue_.pop_front();
    }
    Finish(*pending);
    MutexLock lock(&mu_);
    --unfinished_;
    cv_.SignalAll();
  }
}

void StagingProcessGroup::Finish(Pending& pending) {
  absl::Status status = pending.inner->Wait();
  if (status.ok()) {
    for (const Staged::CopyBack& copy : pending.staged->copies) {
      status = CopyBytes(copy.device_dst, device_, copy.host_src, Device::Cpu(),
                         copy.bytes);
      if (!status.ok()) {
        status = absl::Status(
            status.code(),
            absl::StrCat("rank ", rank(), " [", name_,
                         "]: copying the result back: ", status.message()));
        break;
      }
    }
  }
  pending.staged.reset();  // Staging memory goes back first.
  pending.completion.Complete(status);
}

std::unique_ptr<Work> StagingProcessGroup::DoBroadcast(
    MutableBuffer buffer, const BroadcastOptions& options) {
  const CollectiveCall call = DescribeBroadcast(buffer, options);
  auto staged = std::make_shared<Staged>(this);
  absl::StatusOr<void*> host = staged->In(buffer.data, buffer.bytes());
  if (!host.ok()) return Failed(*this, call, host.status());
  staged->copies.push_back({buffer.data, *host, buffer.bytes()});
  return Enqueue(inner().Broadcast(
                     MutableBuffer{*host, buffer.count, buffer.dtype}, options),
                 std::move(staged), call.ToString());
}

std::unique_ptr<Work> StagingProcessGroup::DoReduce(
    ConstBuffer send, MutableBuffer recv, const ReduceOptions& options) {
  const CollectiveCall call = DescribeReduce(send, options);
  auto staged = std::make_shared<Staged>(this);
  absl::StatusOr<void*> host_send = staged->In(send.data, send.bytes());
  if (!host_send.ok()) return Failed(*this, call, host_send.status());
  MutableBuffer host_recv;
  if (rank() == options.root) {
    void* host = *host_send;  // In place.
    if (recv.data != send.data) {
      absl::StatusOr<void*> fresh = staged->In(nullptr, recv.bytes());
      if (!fresh.ok()) return Failed(*this, call, fresh.status());
      host = *fresh;
    }
    host_recv = MutableBuffer{host, recv.count, recv.dtype};
    staged->copies.push_back({recv.data, host, recv.bytes()});
  }
  return Enqueue(inner().Reduce(ConstBuffer{*host_send, send.count, send.dtype},
                                host_recv, options),
                 std::move(staged), call.ToString());
}

std::unique_ptr<Work> StagingProcessGroup::DoAllReduce(
    MutableBuffer buffer, const AllReduceOptions& options) {
  const CollectiveCall call = DescribeAllReduce(buffer, options);
  auto staged = std::make_shared<Staged>(this);
  absl::StatusOr<void*> host = staged->In(buffer.data, buffer.bytes());
  if (!host.ok()) return Failed(*this, call, host.status());
  staged->copies.push_back({buffer.data, *host, buffer.bytes()});
  return Enqueue(inner().AllReduce(
                     MutableBuffer{*host, buffer.count, buffer.dtype}, options),
                 std::move(staged), call.ToString());
}

std::unique_ptr<Work> StagingProcessGroup::DoAllGather(
    ConstBuffer send, MutableBuffer recv, const AllGatherOptions& options) {
  const CollectiveCall call = DescribeAllGather(send, options);
  auto staged = std::make_shared<Staged>(this);
  absl::StatusOr<void*> host_recv = staged->In(nullptr, recv.bytes());
  if (!host_recv.ok()) return Failed(*this, call, host_recv.status());
  const size_t slot = static_cast<size_t>(rank()) * send.bytes();
  const void* host_send = nullptr;
  if (send.count > 0 && send.data == At(recv.data, slot)) {
    // In place: this rank's slot of the staged recv holds its input.
    if (absl::Status s = CopyBytes(At(*host_recv, slot), Device::Cpu(),
                                   send.data, device_, send.bytes());
        !s.ok()) {
      return Failed(*this, call, s);
    }
    host_send = At(*host_recv, slot);
  } else {
    absl::StatusOr<void*> in = staged->In(send.data, send.bytes());
    if (!in.ok()) return Failed(*this, call, in.status());
    host_send = *in;
  }
  staged->copies.push_back({recv.data, *host_recv, recv.bytes()});
  return Enqueue(
      inner().AllGather(ConstBuffer{host_send, send.count, send.dtype},
                        MutableBuffer{*host_recv, recv.count, recv.dtype},
                        options),
      std::move(staged), call.ToString());
}

std::unique_ptr<Work> StagingProcessGroup::DoReduceScatter(
    ConstBuffer send, MutableBuffer recv, const ReduceScatterOptions& options) {
  const CollectiveCall call = DescribeReduceScatter(recv, options);
  auto staged = std::make_shared<Staged>(this);
  absl::StatusOr<void*> host_send = staged->In(send.data, send.bytes());
  if (!host_send.ok()) return Failed(*this, call, host_send.status());
  const size_t slot = static_cast<size_t>(rank()) * recv.bytes();
  void* host_recv = nullptr;
  if (recv.count > 0 && recv.data == At(send.data, slot)) {
    host_recv = At(*host_send, slot);  // In place.
  } else {
    absl::StatusOr<void*> fresh = staged->In(nullptr, recv.bytes());
    if (!fresh.ok()) return Failed(*this, call, fresh.status());
    host_recv = *fresh;
  }
  staged->copies.push_back({recv.data, host_recv, recv.bytes()});
  return Enqueue(inner().ReduceScatter(
                     ConstBuffer{*host_send, send.count, send.dtype},
                     MutableBuffer{host_recv, recv.count, recv.dtype}, options),
                 std::move(staged), call.ToString());
}

}  // namespace comm
}  // namespace chunkzero
