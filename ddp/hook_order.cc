#include "ddp/hook_order.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace chunkzero {
namespace {

const char* UseName(HookOrder::Use use) {
  switch (use) {
    case HookOrder::Use::kIdle:
      return "not in use";
    case HookOrder::Use::kForward:
      return "in a forward use";
    case HookOrder::Use::kBackward:
      return "in a backward use";
  }
  return "?";
}

}  // namespace

absl::Status HookOrder::Move(absl::Span<Parameter* const> params,
                             const char* call, Use from, Use to) {
  // Check everything first, so that an error changes nothing.
  for (size_t i = 0; i < params.size(); ++i) {
    const Use now = counts(*params[i]).use;
    if (now != from) {
      return absl::FailedPreconditionError(
          absl::StrCat("hook order: ", call, " of parameter '",
                       params[i]->name(), "' while it is ", UseName(now)));
    }
    for (size_t j = 0; j < i; ++j) {
      if (params[j] == params[i]) {
        return absl::FailedPreconditionError(
            absl::StrCat("hook order: ", call, " lists parameter '",
                         params[i]->name(), "' twice"));
      }
    }
  }
  for (Parameter* p : params) {
    Counts& c = counts_[p];
    c.use = to;
    if (to == Use::kForward) ++c.forward_uses;
    if (to == Use::kBackward) ++c.backward_uses;
  }
  return absl::OkStatus();
}

absl::Status HookOrder::PreForward(absl::Span<Parameter* const> params) {
  return Move(params, "PreForward", Use::kIdle, Use::kForward);
}

absl::Status HookOrder::PostForward(absl::Span<Parameter* const> params) {
  return Move(params, "PostForward", Use::kForward, Use::kIdle);
}

absl::Status HookOrder::PreBackward(absl::Span<Parameter* const> params) {
  return Move(params, "PreBackward", Use::kIdle, Use::kBackward);
}

absl::Status HookOrder::PostBackward(absl::Span<Parameter* const> params) {
  return Move(params, "PostBackward", Use::kBackward, Use::kIdle);
}

absl::Status HookOrder::Grad(const Parameter& param) {
  const Counts c = counts(param);
  if (c.grads >= c.backward_uses) {
    return absl::FailedPreconditionError(
        absl::StrCat("hook order: grad ", c.grads + 1, " of parameter '",
                     param.name(), "' handed over after ", c.backward_uses,
                     " backward use(s) in this step"));
  }
  ++counts_[&param].grads;
  return absl::OkStatus();
}

absl::Status HookOrder::EndStep() {
  std::vector<std::string> open;
  for (const auto& [param, c] : counts_) {
    if (c.use != Use::kIdle) {
      open.push_back(
          absl::StrCat("'", param->name(), "' (", UseName(c.use), ")"));
    }
  }
  counts_.clear();
  if (open.empty()) return absl::OkStatus();
  std::sort(open.begin(), open.end());
  return absl::FailedPreconditionError(
      absl::StrCat("hook order: the step ended with parameters still in use: ",
                   absl::StrJoin(open, ", ")));
}

HookOrder::Counts HookOrder::counts(const Parameter& param) const {
  auto it = counts_.find(&param);
  return it == counts_.end() ? Counts{} : it->second;
}

}  // namespace chunkzero
