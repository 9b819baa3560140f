#include "base/status_macros.h"

#include <string>

#include "gtest/gtest.h"

namespace chunkzero {
namespace {

absl::Status Fails() { return absl::FailedPreconditionError("chunk 3 busy"); }
absl::Status Succeeds() { return absl::OkStatus(); }
absl::StatusOr<int> Seven() { return 7; }
absl::StatusOr<int> NoValue() { return absl::NotFoundError("tensor w"); }

absl::Status PlainPropagation() {
  CZ_RETURN_IF_ERROR(Succeeds());
  CZ_RETURN_IF_ERROR(Fails());
  return absl::InternalError("not reached");
}

absl::Status AnnotatedPropagation(int rank) {
  CZ_RETURN_IF_ERROR(Fails(), "on rank ", rank);
  return absl::OkStatus();
}

absl::StatusOr<int> AssignTwice() {
  CZ_ASSIGN_OR_RETURN(int a, Seven());
  CZ_ASSIGN_OR_RETURN(int b, Seven());
  return a + b;
}

absl::StatusOr<int> AssignFails() {
  CZ_ASSIGN_OR_RETURN(int a, NoValue());
  return a;
}

TEST(StatusMacros, ReturnIfErrorPassesStatusThrough) {
  absl::Status s = PlainPropagation();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "chunk 3 busy");
}

TEST(StatusMacros, ReturnIfErrorAppendsContextAndKeepsCode) {
  absl::Status s = AnnotatedPropagation(2);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "chunk 3 busy; on rank 2");
}

TEST(StatusMacros, AssignOrReturnUnwrapsValues) {
  absl::StatusOr<int> v = AssignTwice();
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 14);
}

TEST(StatusMacros, AssignOrReturnPropagatesError) {
  absl::StatusOr<int> v = AssignFails();
  EXPECT_EQ(v.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(v.status().message(), "tensor w");
}

}  // namespace
}  // namespace chunkzero
