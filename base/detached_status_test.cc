#include "base/detached_status.h"

#include <thread>

#include "gtest/gtest.h"

namespace chunkzero {
namespace {

TEST(DetachedCopy, KeepsCodeMessageAndPayloads) {
  absl::Status s = absl::DeadlineExceededError("rank 2 never arrived");
  s.SetPayload("chunkzero/x", absl::Cord("payload"));
  absl::Status copy = DetachedCopy(s);
  EXPECT_EQ(copy, s);
  EXPECT_EQ(copy.GetPayload("chunkzero/x"), absl::Cord("payload"));
  EXPECT_TRUE(DetachedCopy(absl::OkStatus()).ok());
}

TEST(DetachedCopy, CopiesCanDieOnAnotherThread) {
  absl::Status original = absl::InternalError("shared");
  absl::Status copy = DetachedCopy(original);
  std::thread other([c = std::move(copy)]() mutable { c = absl::OkStatus(); });
  other.join();
  EXPECT_EQ(original.message(), "shared");
}

}  // namespace
}  // namespace chunkzero
