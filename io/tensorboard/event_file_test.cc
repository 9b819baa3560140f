#include "io/tensorboard/event_file.h"

#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Pair;

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/event_file_test/", name);
  fs::remove_all(dir);
  return dir;
}

TEST(EventFile, MaskedCrcIsTensorFlowsMask) {
  // CRC-32C("123456789") = 0xE3069283 (RFC 3720); masked:
  // ((c >> 15) | (c << 17)) + 0xa282ead8.
  const uint32_t c = 0xE3069283u;
  EXPECT_EQ(MaskedCrc32c("123456789", 9),
            static_cast<uint32_t>(((c >> 15) | (c << 17)) + 0xa282ead8u));
}

TEST(EventFile, EveryScalarComesBackExactly) {
  const std::string dir = TestDir("scalars");
  auto writer = EventFileWriter::Create(dir);
  ASSERT_TRUE(writer.ok()) << writer.status();
  EXPECT_TRUE(absl::StrContains((*writer)->path(), "/events.out.tfevents."));
  ASSERT_TRUE(
      (*writer)
          ->WriteScalars(1, {{"train/loss", 5.5359001f}, {"train/lr", 1e-3f}})
          .ok());
  // Zero is a value like any other (TensorBoard skips a value without one).
  ASSERT_TRUE(
      (*writer)->WriteScalars(2, {{"train/loss", 3.25f}, {"zero", 0.0f}}).ok());
  // Written through: readable before Close.
  auto events = ReadScalarEvents((*writer)->path());
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 3u);
  EXPECT_EQ((*events)[0].file_version, "brain.Event:2");
  EXPECT_EQ((*events)[1].step, 1);
  EXPECT_THAT((*events)[1].values,
              ::testing::ElementsAre(Pair("train/loss", 5.5359001f),
                                     Pair("train/lr", 1e-3f)));
  EXPECT_GT((*events)[1].wall_time, 1.7e9);
  EXPECT_EQ((*events)[2].step, 2);
  EXPECT_THAT(
      (*events)[2].values,
      ::testing::ElementsAre(Pair("train/loss", 3.25f), Pair("zero", 0.0f)));
  ASSERT_TRUE((*writer)->Close().ok());
}

TEST(EventFile, DamageIsDataLossAtItsOffset) {
  const std::string dir = TestDir("damaged");
  auto writer = *EventFileWriter::Create(dir);
  ASSERT_TRUE(writer->WriteScalars(7, {{"loss", 1.0f}}).ok());
  ASSERT_TRUE(writer->Close().ok());
  std::string bytes = *ReadFileToString(writer->path());
  const size_t first = bytes.size();
  auto rewrite = [&](const std::string& b) {
    ASSERT_TRUE(
        WriteFileAtomically(writer->path(), [&](int fd,
                                                const std::string& tmp) {
          return WriteAll(fd, b.data(), b.size(), tmp);
        }).ok());
  };
  std::string flipped = bytes;
  flipped[first - 6] ^= 1;  // The second record's data.
  rewrite(flipped);
  absl::Status s = ReadScalarEvents(writer->path()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("has data whose CRC does not match"));
  rewrite(bytes.substr(0, first - 2));
  s = ReadScalarEvents(writer->path()).status();
  EXPECT_THAT(s.message(), HasSubstr("more than the file holds"));
  std::string length = bytes;
  length[0] ^= 1;
  rewrite(length);
  EXPECT_THAT(ReadScalarEvents(writer->path()).status().message(),
              HasSubstr("the record at byte 0 has a length whose CRC"));
}

}  // namespace
}  // namespace chunkzero
