#include "base/crc32c.h"

#include <string>

#include "gtest/gtest.h"

namespace chunkzero {
namespace {

TEST(Crc32c, MatchesTheStandardCheckValue) {
  // The CRC-32C check value of "123456789" (RFC 3720, B.4).
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32cPortable("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
}

TEST(Crc32c, HardwareAndPortableAgreeAtEveryLengthAndAlignment) {
  std::string bytes(100, '\0');
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<char>(i * 37);
  for (size_t begin = 0; begin < 8; ++begin) {
    for (size_t n = 0; begin + n <= bytes.size(); ++n) {
      ASSERT_EQ(Crc32c(bytes.data() + begin, n),
                Crc32cPortable(bytes.data() + begin, n))
          << "begin " << begin << " n " << n;
    }
  }
}

TEST(Crc32c, ExtendsAcrossPiecesWithEitherVersion) {
  std::string bytes;
  for (int i = 0; i < 1000; ++i) bytes.push_back(static_cast<char>(i * 7));
  const uint32_t whole = Crc32c(bytes.data(), bytes.size());
  for (size_t cut :
       {size_t{0}, size_t{1}, size_t{9}, size_t{512}, size_t{1000}}) {
    SCOPED_TRACE(cut);
    EXPECT_EQ(Crc32cExtend(Crc32c(bytes.data(), cut), bytes.data() + cut,
                           bytes.size() - cut),
              whole);
    EXPECT_EQ(Crc32cPortableExtend(Crc32cPortable(bytes.data(), cut),
                                   bytes.data() + cut, bytes.size() - cut),
              whole);
  }
  EXPECT_EQ(Crc32cExtend(0, "123456789", 9), 0xE3069283u);
}

}  // namespace
}  // namespace chunkzero
