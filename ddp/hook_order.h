// HookOrder: checks that a model calls the ddp/param_hooks.h hooks in a
// legal order, one training step at a time.
//
//   HookOrder order;
//   CZ_RETURN_IF_ERROR(order.PreForward(params));   // in ParamHooks impls
//   ...
//   CZ_RETURN_IF_ERROR(order.EndStep());            // all scopes closed?
//
// Per parameter and step it tracks whether the parameter is idle, in a
// forward use or in a backward use, and counts forward uses, backward uses
// and grads. Legal: Pre* on an idle parameter; Post* matching the open use;
// HandGrad after at least one PreBackward of that parameter in this step,
// at most once per backward use. Forward uses during backward (activation
// recomputation) are allowed. Errors are FailedPrecondition naming the
// parameter, the call and the state, and change nothing.
//
// Thread-safety: one instance per rank, used by that rank's thread.
#ifndef CHUNKZERO_DDP_HOOK_ORDER_H_
#define CHUNKZERO_DDP_HOOK_ORDER_H_

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "ddp/parameter.h"

namespace chunkzero {

class HookOrder {
 public:
  enum class Use { kIdle, kForward, kBackward };

  struct Counts {
    int forward_uses = 0;
    int backward_uses = 0;
    int grads = 0;
    Use use = Use::kIdle;
  };

  [[nodiscard]] absl::Status PreForward(absl::Span<Parameter* const> params);
  [[nodiscard]] absl::Status PostForward(absl::Span<Parameter* const> params);
  [[nodiscard]] absl::Status PreBackward(absl::Span<Parameter* const> params);
  [[nodiscard]] absl::Status PostBackward(absl::Span<Parameter* const> params);
  [[nodiscard]] absl::Status Grad(const Parameter& param);

  // OK if no scope is open; otherwise names the parameters still in use.
  // Either way, starts a new step (all counts zero).
  [[nodiscard]] absl::Status EndStep();

  // This step's counts for `param` (zeros if unseen).
  Counts counts(const Parameter& param) const;

 private:
  [[nodiscard]] absl::Status Move(absl::Span<Parameter* const> params,
                                  const char* call, Use from, Use to);

  absl::flat_hash_map<const Parameter*, Counts> counts_;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_DDP_HOOK_ORDER_H_
