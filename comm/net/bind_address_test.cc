#include "comm/net/bind_address.h"

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace comm {
namespace {

using ::testing::HasSubstr;

// Every Linux host, and every network namespace, has a loopback "lo".
TEST(InterfaceAddress, LoopbackIsLo) {
  absl::StatusOr<std::string> lo = InterfaceAddress("lo");
  ASSERT_TRUE(lo.ok()) << lo.status();
  EXPECT_EQ(*lo, "127.0.0.1");
}

TEST(InterfaceAddress, AnUnknownInterfaceIsNamedWithTheKnownOnes) {
  absl::StatusOr<std::string> none = InterfaceAddress("no-such-if0");
  ASSERT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(none.status().message(),
              HasSubstr("interface no-such-if0 has no address or does not "
                        "exist; interfaces with addresses: "));
  EXPECT_THAT(none.status().message(), HasSubstr("lo"));
}

TEST(LocalAddressToward, TheRouteToLoopbackStartsOnLoopback) {
  absl::StatusOr<std::string> local = LocalAddressToward("127.0.0.1", 6379);
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(*local, "127.0.0.1");
  // Routes between hosts are tested across network namespaces
  // (tests/multihost).
}

TEST(IsLoopbackAddress, KnowsLoopbackFromTheRest) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackAddress("127.0.1.1"));
  EXPECT_TRUE(IsLoopbackAddress("::1"));
  EXPECT_FALSE(IsLoopbackAddress("10.233.0.1"));
  EXPECT_FALSE(IsLoopbackAddress("128.0.0.1"));
  EXPECT_FALSE(IsLoopbackAddress("fd00::1"));
  EXPECT_FALSE(IsLoopbackAddress("localhost"));  // Names are not looked up.
}

TEST(LocalAddressToward, AHostThatDoesNotResolveIsNamed) {
  absl::StatusOr<std::string> local =
      LocalAddressToward("no-such-host.invalid", 6379);
  ASSERT_EQ(local.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(local.status().message(),
              HasSubstr("cannot resolve no-such-host.invalid"));
}

}  // namespace
}  // namespace comm
}  // namespace chunkzero
