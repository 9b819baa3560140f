#include "comm/internal/gloo_timeout.h"

#include "gtest/gtest.h"

namespace chunkzero {
namespace comm_internal {
namespace {

TEST(IsGlooTimeoutMessage, KnowsGloosWordsForATimeout) {
  // As Gloo's TCP transport and its stores write them.
  EXPECT_TRUE(IsGlooTimeoutMessage(
      "[./gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 7998ms "
      "for recv operation to complete"));
  EXPECT_TRUE(IsGlooTimeoutMessage(
      "[./gloo/rendezvous/file_store.cc:132] Wait timeout for key(s): "
      "[\"rank_1\"]"));
  EXPECT_TRUE(IsGlooTimeoutMessage("connect to 10.0.0.2:4000 timed out"));
  EXPECT_FALSE(IsGlooTimeoutMessage(
      "[./gloo/transport/tcp/pair.cc:598] Connection closed by peer "
      "[10.233.0.1]:25508"));
  EXPECT_FALSE(IsGlooTimeoutMessage("Connection reset by peer"));
  EXPECT_FALSE(IsGlooTimeoutMessage(""));
}

}  // namespace
}  // namespace comm_internal
}  // namespace chunkzero
