#include "base/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

std::string TempDir() { return std::getenv("TEST_TMPDIR"); }

absl::Status WriteString(const std::string& path, const std::string& bytes) {
  return WriteFileAtomically(path, [&](int fd, const std::string& tmp) {
    return WriteAll(fd, bytes.data(), bytes.size(), tmp);
  });
}

bool Exists(const std::string& path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0;
}

TEST(JoinPath, OneSlashBetween) {
  EXPECT_EQ(JoinPath("", "f"), "f");
  EXPECT_EQ(JoinPath("d", "f"), "d/f");
  EXPECT_EQ(JoinPath("d/", "f"), "d/f");
}

TEST(DirectoryOf, ParentOrDot) {
  EXPECT_EQ(DirectoryOf("f"), ".");
  EXPECT_EQ(DirectoryOf("a/b"), "a");
  EXPECT_EQ(DirectoryOf("a/b/"), "a");
  EXPECT_EQ(DirectoryOf("/x"), "/");
}

TEST(ReadFileToString, ReadsWhatWasWritten) {
  const std::string path = TempDir() + "/bytes";
  std::string bytes(200000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i);
  ASSERT_TRUE(WriteString(path, bytes).ok());
  absl::StatusOr<std::string> read = ReadFileToString(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, bytes);
  EXPECT_FALSE(Exists(path + ".tmp"));
}

TEST(ReadFileToString, MissingFileIsNotFoundWithErrnoText) {
  absl::StatusOr<std::string> read = ReadFileToString(TempDir() + "/missing");
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(read.status().message(),
            absl::StrCat("cannot open ", TempDir(),
                         "/missing: No such file or directory"));
}

TEST(ReadFileToString, DirectoryIsInvalidArgument) {
  absl::StatusOr<std::string> read = ReadFileToString(TempDir());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(read.status().message(),
            absl::StrCat(TempDir(), " is a directory, not a file"));
}

TEST(ReadFileToString, DeviceIsRefusedNotReadForever) {
  absl::StatusOr<std::string> read = ReadFileToString("/dev/zero");
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(read.status().message(), "/dev/zero is not a regular file");
}

TEST(ReadFileToString, LargerThanTheLimitIsResourceExhausted) {
  const std::string path = TempDir() + "/ten";
  ASSERT_TRUE(WriteString(path, "0123456789").ok());
  EXPECT_TRUE(ReadFileToString(path, 10).ok());
  absl::StatusOr<std::string> read = ReadFileToString(path, 9);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(
      read.status().message(),
      absl::StrCat(path, " has 10 bytes, more than the 9 this reader accepts"));
}

TEST(RegularFileSize, SizeOrTheErrorsReadFileToStringGives) {
  const std::string path = TempDir() + "/sized";
  ASSERT_TRUE(WriteString(path, "0123456789").ok());
  absl::StatusOr<int64_t> size = RegularFileSize(path);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, 10);
  for (const std::string& bad :
       {TempDir(), std::string("/dev/zero"), TempDir() + "/missing"}) {
    SCOPED_TRACE(bad);
    const absl::Status sized = RegularFileSize(bad).status();
    const absl::Status read = ReadFileToString(bad).status();
    EXPECT_FALSE(sized.ok());
    EXPECT_EQ(sized.code(), read.code());
    EXPECT_EQ(sized.message(), read.message());
  }
}

TEST(CheckCanCreateFile, WritableDirectoryIsFineAndLeavesNothing) {
  const std::string dir = TempDir() + "/probe";
  ASSERT_TRUE(CreateDirectories(dir).ok());
  EXPECT_TRUE(CheckCanCreateFile(dir + "/out.bin").ok());
  EXPECT_EQ(::rmdir(dir.c_str()), 0) << "the probe file was left behind";
}

TEST(CheckCanCreateFile, MissingDirectoryIsNotFoundNamingIt) {
  const absl::Status status = CheckCanCreateFile("/nonexistent_dir/x.bin");
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(status.message(),
            "cannot write into the directory /nonexistent_dir: No such file "
            "or directory");
}

TEST(CheckCanCreateFile, DirectoryPathIsRefused) {
  EXPECT_EQ(CheckCanCreateFile(TempDir()).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CheckCanCreateFile(TempDir() + "/").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckCanCreateFile("").code(), absl::StatusCode::kInvalidArgument);
}

TEST(CheckCanCreateFile, ParentThatIsAFileIsRefused) {
  const std::string file = TempDir() + "/plain";
  ASSERT_TRUE(WriteString(file, "x").ok());
  const absl::Status status = CheckCanCreateFile(file + "/out.bin");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(), absl::StrCat(file, " is not a directory, so ",
                                           file, "/out.bin cannot be created"));
}

TEST(CreateDirectories, CreatesParentsAndRefusesAFile) {
  const std::string dir = TempDir() + "/a/b/c";
  EXPECT_TRUE(CreateDirectories(dir).ok());
  EXPECT_TRUE(CreateDirectories(dir).ok());  // Already there.
  const std::string file = TempDir() + "/file";
  ASSERT_TRUE(WriteString(file, "x").ok());
  EXPECT_EQ(CreateDirectories(file).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CreateDirectories(file + "/sub").code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(WriteFileAtomically, FailureKeepsTheOldFileAndRemovesTheTemporary) {
  const std::string path = TempDir() + "/atomic";
  ASSERT_TRUE(WriteString(path, "old").ok());
  const absl::Status status =
      WriteFileAtomically(path, [](int fd, const std::string& tmp) {
        return absl::DataLossError("writer failed");
      });
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(Exists(path + ".tmp"));
  absl::StatusOr<std::string> read = ReadFileToString(path);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(*read, "old");
}

TEST(WriteFileAtomically, FullDeviceIsAnErrorNamingTheFile) {
  // /dev/full fails every write with ENOSPC.
  FileDescriptor fd(::open("/dev/full", O_WRONLY | O_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  const absl::Status status = WriteAll(fd.get(), "abc", 3, "/dev/full");
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(status.message(),
            "cannot write /dev/full: No space left on device");
}

TEST(ReadAt, ShortFileIsDataLoss) {
  const std::string path = TempDir() + "/short";
  ASSERT_TRUE(WriteString(path, "abc").ok());
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  char buffer[8];
  const absl::Status status = ReadAt(fd.get(), 1, buffer, 4, path);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(status.message(), "truncated"));
}

}  // namespace
}  // namespace chunkzero
