#include "chunk/tensor_state.h"

#include <set>
#include <utility>

#include "gtest/gtest.h"

namespace chunkzero {
namespace {

using S = TensorState;

constexpr S kAll[] = {S::kFree, S::kCompute, S::kHold, S::kHoldAfterBwd,
                      S::kReadyForReduce};

// DESIGN.md §2, written out independently of the implementation.
const std::set<std::pair<S, S>>& LegalMoves() {
  static const auto* moves = new std::set<std::pair<S, S>>{
      {S::kFree, S::kHold},
      {S::kFree, S::kCompute},
      {S::kHold, S::kFree},
      {S::kHold, S::kCompute},
      {S::kCompute, S::kHold},
      {S::kCompute, S::kHoldAfterBwd},
      {S::kCompute, S::kReadyForReduce},
      {S::kHoldAfterBwd, S::kCompute},
      {S::kHoldAfterBwd, S::kReadyForReduce},
      {S::kReadyForReduce, S::kHold},
  };
  return *moves;
}

TEST(TensorState, EveryPairMatchesTheTable) {
  int legal = 0, noop = 0, illegal = 0;
  for (S from : kAll) {
    for (S to : kAll) {
      SCOPED_TRACE(testing::Message() << from << " -> " << to);
      const TransitionKind kind = ClassifyTransition(from, to);
      if (from == S::kReadyForReduce && to == S::kHoldAfterBwd) {
        EXPECT_EQ(kind, TransitionKind::kNoOp);
        ++noop;
      } else if (LegalMoves().count({from, to})) {
        EXPECT_EQ(kind, TransitionKind::kLegal);
        ++legal;
      } else {
        EXPECT_EQ(kind, TransitionKind::kIllegal);
        ++illegal;
      }
      EXPECT_EQ(CheckTransition(from, to, "w", "c").ok(),
                kind != TransitionKind::kIllegal);
    }
  }
  EXPECT_EQ(legal, 10);
  EXPECT_EQ(noop, 1);
  EXPECT_EQ(illegal, 14);
}

TEST(TensorState, IllegalMoveNamesTensorChunkAndBothStates) {
  absl::Status s =
      CheckTransition(S::kHold, S::kReadyForReduce, "h.0.w", "fp16_param#3");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "illegal tensor state move HOLD -> READY_FOR_REDUCE for tensor "
            "'h.0.w' in chunk fp16_param#3");
}

TEST(TensorState, SameStateIsIllegal) {
  for (S s : kAll) {
    SCOPED_TRACE(TensorStateName(s));
    EXPECT_EQ(ClassifyTransition(s, s), TransitionKind::kIllegal);
  }
}

TEST(TensorState, Names) {
  EXPECT_EQ(TensorStateName(S::kHoldAfterBwd), "HOLD_AFTER_BWD");
  EXPECT_EQ(TensorStateName(S::kReadyForReduce), "READY_FOR_REDUCE");
  EXPECT_EQ(TensorStateName(S::kFree), "FREE");
}

}  // namespace
}  // namespace chunkzero
