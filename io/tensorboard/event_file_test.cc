#include "io/tensorboard/event_file.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
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

// A file of the writer's name is never truncated: the second writer of the
// same second and process gets a suffix, and both files read back.
TEST(EventFile, ANewWriterNeverTruncatesAnEarlierFile) {
  const std::string dir = TestDir("same_second");
  fs::create_directories(dir);
  char host[256] = "localhost";
  ASSERT_EQ(::gethostname(host, sizeof(host) - 1), 0);
  const int64_t now = absl::ToUnixSeconds(absl::Now());
  std::vector<std::string> taken;
  for (int64_t t = now; t <= now + 2; ++t) {
    taken.push_back(absl::StrCat(dir, "/events.out.tfevents.", t, ".", host,
                                 ".", ::getpid()));
    ASSERT_TRUE(
        WriteFileAtomically(taken.back(), [](int fd, const std::string& p) {
          return WriteAll(fd, "keep", 4, p);
        }).ok());
  }
  auto first = EventFileWriter::Create(dir);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(absl::EndsWith((*first)->path(), ".1")) << (*first)->path();
  auto second = EventFileWriter::Create(dir);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_NE((*second)->path(), (*first)->path());
  ASSERT_TRUE((*first)->WriteScalars(7, {{"a", 1.0f}}).ok());
  ASSERT_TRUE((*second)->WriteScalars(8, {{"b", 2.0f}}).ok());
  for (const std::string& path : taken) {
    EXPECT_EQ(*ReadFileToString(path), "keep") << path;
  }
  EXPECT_EQ(ReadScalarEvents((*first)->path())->back().step, 7);
  EXPECT_EQ(ReadScalarEvents((*second)->path())->back().step, 8);
  // Closed, a writer refuses rather than writing to nothing.
  ASSERT_TRUE((*first)->Close().ok());
  ASSERT_TRUE((*first)->Close().ok());
  const absl::Status closed = (*first)->WriteScalars(9, {{"a", 3.0f}});
  EXPECT_EQ(closed.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(closed.message(), HasSubstr((*first)->path() + " is closed"));
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
