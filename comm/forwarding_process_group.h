// ForwardingProcessGroup: a ProcessGroup that forwards every call to an inner
// group. The base of the decorators, which override only what they change.
//
//   class CountingProcessGroup final : public ForwardingProcessGroup {
//    public:
//     using ForwardingProcessGroup::ForwardingProcessGroup;
//     int barriers() const { return barriers_; }
//
//    protected:
//     std::unique_ptr<Work> DoBarrier(const BarrierOptions& options) override {
//       ++barriers_;
//       return ForwardingProcessGroup::DoBarrier(options);
//     }
//
//    private:
//     std::atomic<int> barriers_{0};
//   };
//
// rank(), size(), backend_name() and SupportsDType() are the inner group's;
// each collective is the inner group's public collective with the same
// arguments, and returns its Work; Abort aborts the inner group.
//
// Argument checks (process_group.h, ArgumentChecks): by default the inner
// group's. The Do* functions see every call as made, and an invalid one fails
// at the inner group's entry, with its message (naming the inner backend), so
// that a decorator still sees, counts or reroutes it. A decorator that
// touches a call's buffers itself before forwarding (StagingProcessGroup)
// passes ArgumentChecks::kAtEntry, and its Do* functions see valid calls only.
//
// Ownership: does not own `inner`, which must outlive it.
// Thread-safety: thread-safe as `inner` is.
#ifndef CHUNKZERO_COMM_FORWARDING_PROCESS_GROUP_H_
#define CHUNKZERO_COMM_FORWARDING_PROCESS_GROUP_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "comm/options.h"
#include "comm/process_group.h"
#include "comm/types.h"
#include "comm/work.h"
#include "tensor/dtype.h"

namespace chunkzero {
namespace comm {

class ForwardingProcessGroup : public ProcessGroup {
 public:
  explicit ForwardingProcessGroup(ProcessGroup& inner)
      : ForwardingProcessGroup(inner, ArgumentChecks::kDelegated) {}
  ForwardingProcessGroup(const ForwardingProcessGroup&) = delete;
  ForwardingProcessGroup& operator=(const ForwardingProcessGroup&) = delete;

  int rank() const override;
  int size() const override;
  absl::string_view backend_name() const override;
  bool SupportsDType(DType dtype) const override;

 protected:
  ForwardingProcessGroup(ProcessGroup& inner, ArgumentChecks checks)
      : ProcessGroup(checks), inner_(inner) {}

  // The group every call goes to.
  ProcessGroup& inner() const { return inner_; }

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
  std::unique_ptr<Work> DoBarrier(const BarrierOptions& options) override;
  void DoAbort(const absl::Status& cause) override;

 private:
  ProcessGroup& inner_;
};

}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_FORWARDING_PROCESS_GROUP_H_
