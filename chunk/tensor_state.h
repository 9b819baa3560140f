// The state of one tensor inside one chunk, and the legal moves between
// states (docs/DESIGN.md §2).
//
//   CZ_RETURN_IF_ERROR(CheckTransition(TensorState::kHold,
//                                      TensorState::kCompute, "h.0.w", "c3"));
//   ClassifyTransition(kReadyForReduce, kHoldAfterBwd);  // kNoOp
//
//   FREE            no payload on this rank
//   COMPUTE         in use by an op
//   HOLD            payload present, idle
//   HOLD_AFTER_BWD  used by backward, grad not yet written
//   READY_FOR_REDUCE grad written into the slice
//
// Legal: FREE→HOLD, FREE→COMPUTE, HOLD→FREE, HOLD→COMPUTE, COMPUTE→HOLD,
// COMPUTE→HOLD_AFTER_BWD, COMPUTE→READY_FOR_REDUCE, HOLD_AFTER_BWD→COMPUTE,
// HOLD_AFTER_BWD→READY_FOR_REDUCE, READY_FOR_REDUCE→HOLD. Because a grad may
// arrive before or after post-backward, READY_FOR_REDUCE→HOLD_AFTER_BWD is a
// documented no-op (the state stays READY_FOR_REDUCE). Everything else,
// staying in the same state included, is an error.
#ifndef CHUNKZERO_CHUNK_TENSOR_STATE_H_
#define CHUNKZERO_CHUNK_TENSOR_STATE_H_

#include <cstdint>
#include <ostream>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace chunkzero {

enum class TensorState : uint8_t {
  kFree = 0,
  kCompute = 1,
  kHold = 2,
  kHoldAfterBwd = 3,
  kReadyForReduce = 4,
};
inline constexpr int kNumTensorStates = 5;

// "FREE", "COMPUTE", "HOLD", "HOLD_AFTER_BWD", "READY_FOR_REDUCE".
absl::string_view TensorStateName(TensorState state);
std::ostream& operator<<(std::ostream& os, TensorState state);

enum class TransitionKind {
  kLegal,    // The state changes to `to`.
  kNoOp,     // Allowed, but the state stays `from`.
  kIllegal,  // An error.
};

// The transition table itself: a pure function of the two states.
TransitionKind ClassifyTransition(TensorState from, TensorState to);

// OK for legal moves and the no-op; otherwise FailedPrecondition naming the
// tensor, its chunk and both states, e.g.
// "illegal tensor state move HOLD -> READY_FOR_REDUCE for tensor 'h.0.w' in
// chunk f16_param#3".
[[nodiscard]] absl::Status CheckTransition(TensorState from, TensorState to,
                                           absl::string_view tensor_name,
                                           absl::string_view chunk_name);

}  // namespace chunkzero

#endif  // CHUNKZERO_CHUNK_TENSOR_STATE_H_
