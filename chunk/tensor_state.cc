#include "chunk/tensor_state.h"

#include "absl/strings/str_cat.h"

namespace chunkzero {

absl::string_view TensorStateName(TensorState state) {
  switch (state) {
    case TensorState::kFree:
      return "FREE";
    case TensorState::kCompute:
      return "COMPUTE";
    case TensorState::kHold:
      return "HOLD";
    case TensorState::kHoldAfterBwd:
      return "HOLD_AFTER_BWD";
    case TensorState::kReadyForReduce:
      return "READY_FOR_REDUCE";
  }
  return "INVALID";
}

std::ostream& operator<<(std::ostream& os, TensorState state) {
  return os << TensorStateName(state);
}

TransitionKind ClassifyTransition(TensorState from, TensorState to) {
  using S = TensorState;
  switch (from) {
    case S::kFree:
      return to == S::kHold || to == S::kCompute ? TransitionKind::kLegal
                                                 : TransitionKind::kIllegal;
    case S::kHold:
      return to == S::kFree || to == S::kCompute ? TransitionKind::kLegal
                                                 : TransitionKind::kIllegal;
    case S::kCompute:
      return to == S::kHold || to == S::kHoldAfterBwd ||
                     to == S::kReadyForReduce
                 ? TransitionKind::kLegal
                 : TransitionKind::kIllegal;
    case S::kHoldAfterBwd:
      return to == S::kCompute || to == S::kReadyForReduce
                 ? TransitionKind::kLegal
                 : TransitionKind::kIllegal;
    case S::kReadyForReduce:
      if (to == S::kHold) return TransitionKind::kLegal;
      // The grad can arrive before post-backward runs.
      if (to == S::kHoldAfterBwd) return TransitionKind::kNoOp;
      return TransitionKind::kIllegal;
  }
  return TransitionKind::kIllegal;
}

absl::Status CheckTransition(TensorState from, TensorState to,
                             absl::string_view tensor_name,
                             absl::string_view chunk_name) {
  if (ClassifyTransition(from, to) != TransitionKind::kIllegal) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(
      absl::StrCat("illegal tensor state move ", TensorStateName(from), " -> ",
                   TensorStateName(to), " for tensor '", tensor_name,
                   "' in chunk ", chunk_name));
}

}  // namespace chunkzero
