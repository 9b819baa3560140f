#include "io/nvme/scratch_file.h"

#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/nvme/aligned_buffer.h"

namespace chunkzero {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/scratch_file_test/", name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(ScratchFile, HasNoNameReservesItsBytesAndTakesDirectIo) {
  const std::string dir = TestDir("plain");
  constexpr int64_t kBytes = 3 * 4096;
  absl::StatusOr<std::unique_ptr<ScratchFile>> file =
      ScratchFile::Create(dir, kBytes);
  ASSERT_TRUE(file.ok()) << file.status();
  // Nothing in the directory, now or ever.
  EXPECT_TRUE(fs::is_empty(dir));
  struct stat st;
  ASSERT_EQ(::fstat((*file)->fd(), &st), 0);
  EXPECT_EQ(st.st_size, kBytes);
  EXPECT_GE(st.st_blocks * 512, kBytes);  // Reserved, not sparse.
  EXPECT_EQ((*file)->size(), kBytes);
  EXPECT_EQ((*file)->description(), "a scratch file in " + dir);
  // O_DIRECT: aligned transfers only, and they round-trip.
  AlignedBuffer out = *AlignedBuffer::Create(4096);
  AlignedBuffer in = *AlignedBuffer::Create(4096);
  std::memset(out.data(), 0x5a, 4096);
  ASSERT_EQ(::pwrite((*file)->fd(), out.data(), 4096, 8192), 4096);
  ASSERT_EQ(::pread((*file)->fd(), in.data(), 4096, 8192), 4096);
  EXPECT_EQ(std::memcmp(in.data(), out.data(), 4096), 0);
  EXPECT_LT(::pwrite((*file)->fd(), out.data() + 1, 4096, 0), 0);
  EXPECT_EQ(errno, EINVAL);
  // Growing appends reserved bytes.
  EXPECT_EQ(*(*file)->Grow(8192), kBytes);
  EXPECT_EQ((*file)->size(), kBytes + 8192);
  ASSERT_EQ(::fstat((*file)->fd(), &st), 0);
  EXPECT_EQ(st.st_size, kBytes + 8192);
  EXPECT_EQ((*file)->Grow(100).status().code(),
            absl::StatusCode::kInvalidArgument);
  const int64_t too_many =
      RoundUpToDirectIo(*ScratchDirectoryFreeBytes(dir) + (int64_t{1} << 30));
  const absl::Status full = (*file)->Grow(too_many).status();
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.message(),
              HasSubstr(absl::StrCat("cannot reserve ", too_many)));
  EXPECT_EQ((*file)->size(), kBytes + 8192);
  ASSERT_EQ(::fstat((*file)->fd(), &st), 0);
  EXPECT_EQ(st.st_size, kBytes + 8192);
  file->reset();
  EXPECT_TRUE(fs::is_empty(dir));
}

TEST(ScratchFile, RefusesWhatCannotHoldItNamingTheDirectory) {
  const std::string dir = TestDir("refused");
  absl::Status s = ScratchFile::Create(dir + "/missing", 4096).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(dir + "/missing: no such directory"));

  const std::string file = dir + "/a_file";
  {
    std::FILE* f = std::fopen(file.c_str(), "w");
    std::fclose(f);
  }
  s = ScratchFile::Create(file, 4096).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr(file + " is not a directory"));

  s = ScratchFile::Create(dir, 4095).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("want a multiple of 4096"));

  // More than the disk has free: refused before anything is written.
  const int64_t free_bytes = *ScratchDirectoryFreeBytes(dir);
  const int64_t too_many = RoundUpToDirectIo(free_bytes + (int64_t{1} << 30));
  s = ScratchFile::Create(dir, too_many).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("the scratch file needs ",
                                                  too_many, " bytes")));
  EXPECT_THAT(s.message(), HasSubstr(dir + " has "));
  EXPECT_EQ(fs::directory_iterator(dir)->path(), file);  // Only a_file.
}

// A tmpfs is host memory: refused naming the directory, nothing left.
TEST(ScratchFile, RefusesATmpfs) {
  struct statfs info;
  if (::statfs("/dev/shm", &info) != 0 || info.f_type != 0x01021994) {
    GTEST_SKIP() << "/dev/shm is not a tmpfs here";
  }
  const std::string dir =
      absl::StrCat("/dev/shm/scratch_file_test_", ::getpid());
  fs::create_directories(dir);
  const absl::Status s = ScratchFile::Create(dir, 4096).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr(dir + " is on a tmpfs, whose bytes are "
                                           "host memory"));
  EXPECT_EQ(ScratchDirectoryFreeBytes(dir).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace chunkzero
