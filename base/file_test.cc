#include "base/file.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
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

mode_t TypeOf(const std::string& path) {
  struct stat info;
  if (::lstat(path.c_str(), &info) != 0) return 0;
  return info.st_mode & S_IFMT;
}

std::string ReadOrDie(const std::string& path) {
  absl::StatusOr<std::string> read = ReadFileToString(path);
  EXPECT_TRUE(read.ok()) << read.status();
  return read.ok() ? *read : "";
}

TEST(WriteFileAtomically, FifoIsRefusedAndKept) {
  const std::string fifo = TempDir() + "/fifo_dest";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const absl::Status status = WriteString(fifo, "weights");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(),
            absl::StrCat(fifo,
                         " is a FIFO (named pipe), not a regular file; "
                         "refusing to replace or write it"));
  EXPECT_EQ(TypeOf(fifo), S_IFIFO) << "the FIFO was replaced";
  EXPECT_FALSE(Exists(fifo + ".tmp"));
}

TEST(WriteFileAtomically, LinkToADeviceIsRefusedAndNeitherIsTouched) {
  const std::string link = TempDir() + "/to_null";
  ASSERT_EQ(::symlink("/dev/null", link.c_str()), 0);
  const absl::Status status = WriteString(link, "weights");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      status.message(),
      absl::StrCat("/dev/null is a character device (where the link ", link,
                   " leads), not a regular file; refusing to replace "
                   "or write it"));
  EXPECT_EQ(TypeOf(link), S_IFLNK);
  EXPECT_EQ(TypeOf("/dev/null"), S_IFCHR);
}

TEST(WriteFileAtomically, WritesThroughALinkToItsTarget) {
  const std::string dir = TempDir() + "/through";
  ASSERT_TRUE(CreateDirectories(dir + "/real").ok());
  ASSERT_TRUE(WriteString(dir + "/real/w.st", "old").ok());
  // A relative link, resolved against the link's own directory.
  ASSERT_EQ(::symlink("real/w.st", (dir + "/w.st").c_str()), 0);
  ASSERT_EQ(::symlink("w.st", (dir + "/w2.st").c_str()), 0);  // A chain.
  ASSERT_TRUE(WriteString(dir + "/w2.st", "new").ok());
  EXPECT_EQ(TypeOf(dir + "/w2.st"), S_IFLNK);
  EXPECT_EQ(TypeOf(dir + "/w.st"), S_IFLNK);
  EXPECT_EQ(ReadOrDie(dir + "/real/w.st"), "new");
  EXPECT_FALSE(Exists(dir + "/real/w.st.tmp"));
  EXPECT_FALSE(Exists(dir + "/w2.st.tmp"));
}

TEST(WriteFileAtomically, DanglingLinkCreatesItsTarget) {
  const std::string dir = TempDir() + "/dangling";
  ASSERT_TRUE(CreateDirectories(dir).ok());
  ASSERT_EQ(::symlink("later.st", (dir + "/now.st").c_str()), 0);
  ASSERT_TRUE(WriteString(dir + "/now.st", "abc").ok());
  EXPECT_EQ(TypeOf(dir + "/now.st"), S_IFLNK);
  EXPECT_EQ(ReadOrDie(dir + "/later.st"), "abc");
}

TEST(WriteFileAtomically, LinkLoopIsRefused) {
  const std::string dir = TempDir() + "/loop";
  ASSERT_TRUE(CreateDirectories(dir).ok());
  ASSERT_EQ(::symlink("b", (dir + "/a").c_str()), 0);
  ASSERT_EQ(::symlink("a", (dir + "/b").c_str()), 0);
  const absl::Status status = WriteString(dir + "/a", "x");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(),
            absl::StrCat(dir,
                         "/a goes through more than 40 symbolic links (a "
                         "loop?)"));
  EXPECT_EQ(TypeOf(dir + "/a"), S_IFLNK);
}

TEST(WriteFileAtomically, TemporaryThatIsAFifoIsRefusedAndKept) {
  const std::string path = TempDir() + "/with_fifo_tmp";
  ASSERT_EQ(::mkfifo((path + ".tmp").c_str(), 0644), 0);
  const absl::Status status = WriteString(path, "x");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(),
            absl::StrCat(path,
                         ".tmp is a FIFO (named pipe), not a regular file; it "
                         "is where ",
                         path, " is written first: move it away"));
  EXPECT_EQ(TypeOf(path + ".tmp"), S_IFIFO);
  EXPECT_FALSE(Exists(path));
}

TEST(CheckCanCreateFile, FifoSocketAndLinkToADeviceAreRefused) {
  const std::string fifo = TempDir() + "/check_fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  EXPECT_EQ(CheckCanCreateFile(fifo).code(),
            absl::StatusCode::kFailedPrecondition);
  // A socket's path must fit in 108 bytes, which the test directory's may
  // not.
  std::string socket_dir = "/tmp/cz_file_test_XXXXXX";
  ASSERT_NE(::mkdtemp(socket_dir.data()), nullptr);
  const std::string socket_path = socket_dir + "/s";
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  ASSERT_LT(socket_path.size(), sizeof(address.sun_path));
  std::memcpy(address.sun_path, socket_path.data(), socket_path.size());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)),
            0);
  const absl::Status socket_status = CheckCanCreateFile(socket_path);
  ::close(fd);
  ::unlink(socket_path.c_str());
  ::rmdir(socket_dir.c_str());
  EXPECT_EQ(socket_status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(socket_status.message(),
            absl::StrCat(socket_path,
                         " is a socket, not a regular file; refusing to "
                         "replace or write it"));
  const std::string link = TempDir() + "/check_link";
  ASSERT_EQ(::symlink("/dev/zero", link.c_str()), 0);
  EXPECT_EQ(CheckCanCreateFile(link).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(CheckCanCreateDirectories, ChecksTheNearestExistingAncestorOnly) {
  const std::string dir = TempDir() + "/create_dirs";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  EXPECT_TRUE(CheckCanCreateDirectories(dir).ok());
  EXPECT_TRUE(CheckCanCreateDirectories(dir + "/a/b/c").ok());
  EXPECT_FALSE(Exists(dir + "/a"));
  ASSERT_TRUE(WriteString(dir + "/plain", "x").ok());
  const absl::Status under_file = CheckCanCreateDirectories(dir + "/plain/x");
  EXPECT_EQ(under_file.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(under_file.message(),
            "cannot create directory " + dir +
                "/plain/x: it or one of its parents exists and is not a "
                "directory");
  EXPECT_EQ(CheckCanCreateDirectories(dir + "/plain").code(),
            absl::StatusCode::kFailedPrecondition);
  // What CreateDirectories says for the same paths.
  EXPECT_EQ(CreateDirectories(dir + "/plain/x"), under_file);
}

TEST(CheckCanReplaceOrRemove, RegularFilesLinksAndNothingPass) {
  const std::string dir = TempDir() + "/replace_ok";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  EXPECT_TRUE(CheckCanReplaceOrRemove(dir + "/absent").ok());
  ASSERT_TRUE(WriteString(dir + "/file", "x").ok());
  EXPECT_TRUE(CheckCanReplaceOrRemove(dir + "/file").ok());
  // A link is replaced itself, whatever it leads to.
  ASSERT_EQ(::symlink("/dev/null", (dir + "/link").c_str()), 0);
  EXPECT_TRUE(CheckCanReplaceOrRemove(dir + "/link").ok());
}

TEST(CheckCanReplaceOrRemove, FifoAndDirectoryAreRefusedNamingTheType) {
  const std::string dir = TempDir() + "/replace_types";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0644), 0);
  ASSERT_EQ(::mkdir((dir + "/sub").c_str(), 0755), 0);
  const absl::Status fifo = CheckCanReplaceOrRemove(dir + "/fifo");
  EXPECT_EQ(fifo.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(fifo.message(),
            dir +
                "/fifo is a FIFO (named pipe), not a regular file; refusing "
                "to replace or remove it");
  EXPECT_EQ(CheckCanReplaceOrRemove(dir + "/sub").message(),
            dir +
                "/sub is a directory, not a regular file; refusing to "
                "replace or remove it");
}

// chattr +i: even root can neither rename over nor unlink the file. Needs
// root and a file system that keeps the flag (ext4, xfs; not tmpfs).
TEST(CheckCanReplaceOrRemove, ImmutableFileIsRefused) {
  const std::string dir = TempDir() + "/replace_immutable";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  const std::string file = dir + "/model.safetensors";
  ASSERT_TRUE(WriteString(file, "x").ok());
  const int fd = ::open(file.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  int flags = 0;
  const bool set =
      ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0 &&
      (flags |= FS_IMMUTABLE_FL, ::ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0);
  if (!set) {
    ::close(fd);
    GTEST_SKIP() << "cannot set the immutable flag here (not root, or the "
                    "file system keeps no flags)";
  }
  const absl::Status status = CheckCanReplaceOrRemove(file);
  const absl::Status create = CheckCanCreateFile(file);
  // What the check foresees is what a rename over the file meets.
  ASSERT_TRUE(WriteString(dir + "/new", "y").ok());
  const int renamed = ::rename((dir + "/new").c_str(), file.c_str());
  flags &= ~FS_IMMUTABLE_FL;
  ASSERT_EQ(::ioctl(fd, FS_IOC_SETFLAGS, &flags), 0);
  ::close(fd);
  EXPECT_EQ(renamed, -1);
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(status.message(),
            "cannot replace or remove " + file +
                ": it is immutable or append-only (lsattr shows it)");
  EXPECT_EQ(create.code(), absl::StatusCode::kPermissionDenied);
}

// A sticky directory (mode 1777, as /tmp) holding root's file: a process of
// another user may create files there but not replace or remove root's.
// Runs the check (and the rename it foresees) as nobody, in a child; needs
// root to switch users.
TEST(CheckCanReplaceOrRemove, StickyDirectoryRefusesAnotherUsersFile) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a child as nobody";
  // Under /tmp: the test directory's parents need not be searchable by
  // nobody.
  std::string dir = "/tmp/cz_sticky_XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  ASSERT_EQ(::chmod(dir.c_str(), 01777), 0);
  const std::string file = dir + "/model.safetensors";
  ASSERT_TRUE(WriteString(file, "x").ok());
  ASSERT_EQ(::chmod(file.c_str(), 0666), 0);
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pipe_fds[0]);
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(2);
    const absl::Status status = CheckCanReplaceOrRemove(file);
    const absl::Status create = CheckCanCreateFile(file);
    const std::string mine = dir + "/mine";
    const int fd = ::open(mine.c_str(), O_WRONLY | O_CREAT, 0644);
    const bool renamed = ::rename(mine.c_str(), file.c_str()) == 0;
    if (fd >= 0) ::close(fd);
    ::unlink(mine.c_str());
    const std::string report = absl::StrCat(
        static_cast<int>(status.code()), "|", static_cast<int>(create.code()),
        "|", renamed ? 1 : 0, "|", status.message());
    (void)!::write(pipe_fds[1], report.data(), report.size());
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  std::string report;
  char buffer[512];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof(buffer))) > 0;) {
    report.append(buffer, static_cast<size_t>(n));
  }
  ::close(pipe_fds[0]);
  int wait_status = 0;
  ASSERT_EQ(::waitpid(child, &wait_status, 0), child);
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
  ASSERT_TRUE(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0);
  const int denied = static_cast<int>(absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(report,
            absl::StrCat(denied, "|", denied, "|0|cannot replace or remove ",
                         file, ": it belongs to uid 0 and its directory ", dir,
                         " is sticky, where only the file's owner, the "
                         "directory's owner (uid 0) or root may (this process "
                         "runs as uid 65534)"));
}

TEST(CheckCanCreateFile, ProbesBesideALinksTarget) {
  const std::string dir = TempDir() + "/probe_target";
  ASSERT_TRUE(CreateDirectories(dir).ok());
  ASSERT_EQ(::symlink("/nonexistent_dir/x.st", (dir + "/x.st").c_str()), 0);
  const absl::Status status = CheckCanCreateFile(dir + "/x.st");
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(status.message(),
            "cannot write into the directory /nonexistent_dir: No such file "
            "or directory");
}

TEST(CreateOrTruncateFile, FifoIsRefusedWithoutBlocking) {
  const std::string fifo = TempDir() + "/metrics_fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  // No reader: opening it for writing the usual way would block forever.
  absl::StatusOr<std::unique_ptr<FileDescriptor>> fd =
      CreateOrTruncateFile(fifo);
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(fd.status().message(),
            absl::StrCat(fifo,
                         " is a FIFO (named pipe), not a regular file; "
                         "refusing to replace or write it"));
}

TEST(CreateOrTruncateFile, TruncatesAFileThroughALink) {
  const std::string file = TempDir() + "/metrics_target";
  ASSERT_TRUE(WriteString(file, "old contents").ok());
  const std::string link = TempDir() + "/metrics_link";
  ASSERT_EQ(::symlink(file.c_str(), link.c_str()), 0);
  absl::StatusOr<std::unique_ptr<FileDescriptor>> fd =
      CreateOrTruncateFile(link);
  ASSERT_TRUE(fd.ok()) << fd.status();
  ASSERT_TRUE(WriteAll((*fd)->get(), "ab", 2, link).ok());
  ASSERT_TRUE((*fd)->Close(link).ok());
  EXPECT_EQ(ReadOrDie(file), "ab");
  EXPECT_EQ(TypeOf(link), S_IFLNK);
  // And a new file where there was none.
  absl::StatusOr<std::unique_ptr<FileDescriptor>> fresh =
      CreateOrTruncateFile(TempDir() + "/metrics_new");
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(TypeOf(TempDir() + "/metrics_new"), S_IFREG);
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
