// StagingProcessGroup: runs a host backend's collectives on buffers of
// another device by staging them through host memory.
//
//   // Ranks sharing one GPU: Gloo moves the bytes, staged through pinned
//   // host memory.
//   PinnedHostAllocator pinned;
//   CachingAllocator staging(&pinned);
//   StagingProcessGroup group(gloo.get(), Device::Cuda(0), &staging);
//   CZ_RETURN_IF_ERROR(comm::AllReduce(group, grads_on_gpu));
//
// NCCL refuses two ranks on one device, and Gloo reads and writes buffers
// with the CPU; this is how several ranks share one GPU (PyTorch's Gloo
// backend stages CUDA tensors the same way). Every buffer passed to this
// group lives on `device`. A collective copies its input from the device
// into staging memory on the calling thread (for a GPU, a cudaMemcpy, which
// also waits for the kernels that produced it on the legacy default stream;
// work on other streams must be synchronised by the caller), issues the inner
// collective on the staged copy and returns a Work at once; a worker
// thread waits for the inner collectives in issue order, copies each
// result back to the device and completes its Work. Staging memory comes
// from `staging` per collective and goes back when it completes (wrap the
// pinned allocator in a CachingAllocator, so a steady state reaches
// cudaHostAlloc zero times).
//
// Results are the inner backend's, bit for bit. Argument errors are this
// group's (checked at its entry: argument_checks.h, ForwardingProcessGroup)
// and reach neither the device nor `inner`;
// a failed copy fails the collective naming the device and the bytes;
// the inner collective's failure is returned as it is (no copy back).
//
// Ownership: does not own `inner` or `staging`, which must outlive it.
// Thread-safety: thread-safe as `inner` is. Destruction waits for every
// issued collective to complete (each is bounded by its timeout).
#ifndef CHUNKZERO_COMM_STAGING_PROCESS_GROUP_H_
#define CHUNKZERO_COMM_STAGING_PROCESS_GROUP_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "base/mutex.h"
#include "comm/forwarding_process_group.h"
#include "comm/process_group.h"
#include "tensor/device.h"
#include "tensor/memory/allocator.h"

namespace chunkzero {
namespace comm {

class StagingProcessGroup final : public ForwardingProcessGroup {
 public:
  StagingProcessGroup(ProcessGroup* inner, Device device, Allocator* staging);
  ~StagingProcessGroup() override;
  StagingProcessGroup(const StagingProcessGroup&) = delete;
  StagingProcessGroup& operator=(const StagingProcessGroup&) = delete;

  // The inner backend's name and "+staged", e.g. "gloo+staged".
  absl::string_view backend_name() const override { return name_; }
  Device device() const { return device_; }

 protected:
  std::unique_ptr<Work> DoBroadcast(MutableBuffer buffer,
                                    const BroadcastOptions& options) override;
  std::unique_ptr<Work> DoReduce(ConstBuffer send, MutableBuffer recv,
                                 const ReduceOptions& options) override;
  std::unique_ptr<Work> DoAllReduce(MutableBuffer buffer,
                                    const AllReduceOptions& options) override;
  std::unique_ptr<Work> DoAllGather(ConstBuffer send, MutableBuffer recv,
                                    const AllGatherOptions& options) override;
  std::unique_ptr<Work> DoReduceScatter(
      ConstBuffer send, MutableBuffer recv,
      const ReduceScatterOptions& options) override;
  // DoBarrier forwards: it has no data to stage.
  // Aborts the inner group, then waits until the worker has finished every
  // collective queued (none copies a result back once its inner collective
  // failed; one that succeeded before the abort finishes its copy).
  void DoAbort(const absl::Status& cause) override;

 private:
  struct Staged;   // One collective's staging memory and copies back.
  struct Pending;  // One issued collective until its result is back.

  // Host memory of `bytes`; the caller frees it with Release.
  absl::StatusOr<void*> Stage(size_t bytes);
  void Release(void* ptr, size_t bytes);
  // Queues the collective for the worker; returns its Work.
  std::unique_ptr<Work> Enqueue(std::unique_ptr<Work> inner_work,
                                std::shared_ptr<Staged> staged,
                                std::string description);
  void RunWorker();
  // Waits for `pending`'s inner collective, copies its result back and
  // completes its Work.
  void Finish(Pending& pending);

  const Device device_;
  Allocator* const staging_;
  const std::string name_;

  Mutex mu_;
  CondVar cv_;
  std::deque<std::unique_ptr<Pending>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Collectives queued for the worker and not yet finished by it.
  int64_t unfinished_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread worker_;
};

}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_STAGING_PROCESS_GROUP_H_
