#include "comm/rendezvous/tcp_store_wire.h"

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace comm {
namespace tcp_store_wire {
namespace {

using ::testing::HasSubstr;

TEST(TcpStoreWire, EncodesLengthCodeCountAndParts) {
  const std::string frame = EncodeFrame(kSet, {"k", "vv"});
  // body: code 1, count 2, "k" (4 + 1), "vv" (4 + 2) = 16 bytes.
  const std::string want(
      "\x10\x00\x00\x00"
      "\x01"
      "\x02\x00\x00\x00"
      "\x01\x00\x00\x00k"
      "\x02\x00\x00\x00vv",
      20);
  EXPECT_EQ(frame, want);
}

TEST(TcpStoreWire, DecodesWhatItEncodes) {
  const std::string value("a\0b", 3);
  const std::string frame = EncodeFrame(kOk, {value, "", "key"});
  absl::StatusOr<size_t> length =
      DecodeBodyLength(absl::string_view(frame).substr(0, kLengthBytes));
  ASSERT_TRUE(length.ok()) << length.status();
  EXPECT_EQ(*length, frame.size() - kLengthBytes);
  absl::StatusOr<Frame> decoded =
      DecodeBody(absl::string_view(frame).substr(kLengthBytes));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->code, kOk);
  ASSERT_EQ(decoded->parts.size(), 3u);
  EXPECT_EQ(decoded->parts[0], value);
  EXPECT_EQ(decoded->parts[1], "");
  EXPECT_EQ(decoded->parts[2], "key");
}

TEST(TcpStoreWire, RefusesALengthPastTheLimit) {
  const std::string too_long("\x01\x00\x00\x01", 4);  // 2^24 + 1
  absl::StatusOr<size_t> length = DecodeBodyLength(too_long);
  ASSERT_EQ(length.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(length.status().message(), HasSubstr("16777217 bytes"));
  EXPECT_EQ(DecodeBodyLength("abc").status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::string at_limit("\x00\x00\x00\x01", 4);
  EXPECT_EQ(*DecodeBodyLength(at_limit), kMaxBodyBytes);
}

TEST(TcpStoreWire, RefusesBodiesThatDoNotAddUp) {
  struct Case {
    std::string body;
    const char* why;
  };
  const Case cases[] = {
      {std::string("\x01\x00\x00", 3), "shorter than its code"},
      // A count of 2^32 - 1 parts in 0 bytes: refused before reserving.
      {std::string("\x01\xff\xff\xff\xff", 5), "announces 4294967295 parts"},
      {std::string("\x01\x01\x00\x00\x00\x05\x00\x00\x00"
                   "ab",
                   11),
       "announces 5 bytes but 2 are left"},
      {std::string("\x01\x00\x00\x00\x00x", 6), "1 bytes after its parts"},
      {std::string("\x01\x02\x00\x00\x00\x01\x00\x00\x00x\x00\x00\x00", 13),
       "ends inside part 1's length"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Frame> frame = DecodeBody(c.body);
    ASSERT_EQ(frame.status().code(), absl::StatusCode::kInvalidArgument)
        << c.why;
    EXPECT_THAT(frame.status().message(), HasSubstr(c.why));
  }
}

}  // namespace
}  // namespace tcp_store_wire
}  // namespace comm
}  // namespace chunkzero
