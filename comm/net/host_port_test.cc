#include "comm/net/host_port.h"

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace comm {
namespace gloo_internal {
namespace {

using ::testing::HasSubstr;

void ExpectSplit(absl::string_view text, const std::string& host,
                 const std::string& port) {
  absl::StatusOr<HostPort> split = SplitHostPort(text);
  ASSERT_TRUE(split.ok()) << text << ": " << split.status();
  EXPECT_EQ(split->host, host) << text;
  EXPECT_EQ(split->port, port) << text;
}

TEST(SplitHostPort, TakesHostAndPortApart) {
  ExpectSplit("10.0.0.1:29500", "10.0.0.1", "29500");
  ExpectSplit("node-7.cluster:6379", "node-7.cluster", "6379");
  ExpectSplit("[fe80::1]:6379", "fe80::1", "6379");
  ExpectSplit("[::1]", "::1", "");
  ExpectSplit("host", "host", "");
  ExpectSplit("host:", "host", "");
  // The port is text: its range is the caller's to check.
  ExpectSplit("host:99999", "host", "99999");
}

TEST(SplitHostPort, SaysWhatIsWrong) {
  const struct {
    const char* text;
    const char* why;
  } cases[] = {
      {"[::1:80", "an IPv6 host opened with '[' has no ']'"},
      {"[::1]80", "after ']' comes ':PORT' or nothing"},
      {"::1:80", "write an IPv6 host in brackets: [::1]:PORT"},
      {":80", "no host"},
      {"", "no host"},
      {"[]:80", "no host"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<HostPort> split = SplitHostPort(c.text);
    EXPECT_EQ(split.status().code(), absl::StatusCode::kInvalidArgument)
        << c.text;
    EXPECT_THAT(split.status().message(), HasSubstr(c.why)) << c.text;
  }
}

}  // namespace
}  // namespace gloo_internal
}  // namespace comm
}  // namespace chunkzero
