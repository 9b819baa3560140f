#include "io/nvme/scratch_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "base/status_macros.h"
#include "base/system_memory.h"
#include "io/nvme/aligned_buffer.h"

namespace chunkzero {
namespace {

// statfs(2)'s f_type of the memory-backed filesystems (linux/magic.h).
constexpr decltype(statfs::f_type) kTmpfsMagic = 0x01021994;
constexpr decltype(statfs::f_type) kRamfsMagic = 0x858458f6;

std::string Bytes(int64_t n) {
  return absl::StrCat(n, " bytes (", FormatBytes(static_cast<double>(n)), ")");
}

// Opens an unnamed file in `dir` with `flags`, or where O_TMPFILE is not
// supported, a named one removed at once. -1 with errno set on failure.
int OpenUnnamed(const std::string& dir, int flags) {
  const int fd =
      ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC | flags, 0600);
  if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR)) return fd;
  std::string path = JoinPath(dir, ".chunkzero-scratch-XXXXXX");
  const int named = ::mkostemp(path.data(), O_CLOEXEC | flags);
  if (named < 0) return -1;
  ::unlink(path.c_str());
  return named;
}

}  // namespace

absl::StatusOr<int64_t> ScratchDirectoryFreeBytes(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat(dir, ": no such directory"));
    }
    return ErrnoError("cannot use the directory", dir);
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " is not a directory"));
  }
  // Memory-backed filesystems take O_DIRECT on recent kernels, but their
  // bytes are host memory, which this tier exists to spare.
  struct statfs kind;
  if (::statfs(dir.c_str(), &kind) == 0 &&
      (kind.f_type == kTmpfsMagic || kind.f_type == kRamfsMagic)) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir, " is on a ", kind.f_type == kTmpfsMagic ? "tmpfs" : "ramfs",
        ", whose bytes are host memory: give a directory on a disk"));
  }
  struct statvfs fs;
  if (::statvfs(dir.c_str(), &fs) != 0) {
    return ErrnoError("cannot read the free space of", dir);
  }
  if ((fs.f_flag & ST_RDONLY) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " is on a read-only filesystem"));
  }
  return static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
}

absl::StatusOr<std::unique_ptr<ScratchFile>> ScratchFile::Create(
    const std::string& dir, int64_t bytes) {
  if (bytes < 0 || bytes % static_cast<int64_t>(kDirectIoAlignment) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a scratch file of ", bytes, " bytes: want a multiple of ",
                     kDirectIoAlignment));
  }
  CZ_ASSIGN_OR_RETURN(const int64_t free_bytes, ScratchDirectoryFreeBytes(dir));
  if (free_bytes < bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat(dir, " has ", Bytes(free_bytes), " free; the scratch ",
                     "file needs ", Bytes(bytes)));
  }
  int fd = OpenUnnamed(dir, O_DIRECT);
  if (fd < 0) {
    const int direct_errno = errno;
    if (direct_errno == EINVAL) {
      // Without O_DIRECT it opens: the filesystem has no direct I/O.
      const int plain = OpenUnnamed(dir, 0);
      if (plain >= 0) {
        ::close(plain);
        return absl::FailedPreconditionError(absl::StrCat(
            dir,
            " is on a filesystem without direct I/O (O_DIRECT; a tmpfs "
            "has none): give a directory on a disk"));
      }
    }
    if (direct_errno == EROFS) {
      return absl::FailedPreconditionError(
          absl::StrCat(dir, " is on a read-only filesystem"));
    }
    errno = direct_errno;
    return ErrnoError("cannot create a scratch file in", dir);
  }
  auto file = std::unique_ptr<ScratchFile>(
      new ScratchFile(fd, absl::StrCat("a scratch file in ", dir)));
  CZ_RETURN_IF_ERROR(file->Grow(bytes).status());
  return file;
}

absl::StatusOr<int64_t> ScratchFile::Grow(int64_t bytes) {
  if (bytes < 0 || bytes % static_cast<int64_t>(kDirectIoAlignment) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("growing ", description_, " by ", bytes,
                     " bytes: want a multiple of ", kDirectIoAlignment));
  }
  const int64_t at = size_;
  if (bytes == 0) return at;
  // More than the filesystem has free is refused before fallocate, which
  // on ext4 takes every free block before it gives up: for that moment the
  // disk would be full for everyone (another rank, a checkpoint writer).
  struct statvfs fs;
  if (::fstatvfs(fd_, &fs) == 0 &&
      static_cast<double>(fs.f_bavail) * static_cast<double>(fs.f_frsize) <
          static_cast<double>(bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot reserve ", Bytes(bytes), " more for ", description_,
        " (holding ", Bytes(at), "): the disk has ",
        Bytes(static_cast<int64_t>(fs.f_bavail * fs.f_frsize)), " free"));
  }
  // Reserved now, so that a disk that cannot hold it says so at once.
  const int reserved = ::posix_fallocate(fd_, at, bytes);
  if (reserved == ENOSPC || reserved == EFBIG) {
    // Whatever was reserved goes back (best effort: the error above is the
    // one to report).
    [[maybe_unused]] const int shrunk = ::ftruncate(fd_, at);
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot reserve ", Bytes(bytes), " more for ", description_,
        " (holding ", Bytes(at), "): ", std::strerror(reserved)));
  }
  if (reserved != 0 && ::ftruncate(fd_, at + bytes) != 0) {
    return ErrnoError(absl::StrCat("cannot grow by ", Bytes(bytes)),
                      description_);
  }
  size_ = at + bytes;
  return at;
}

ScratchFile::~ScratchFile() { ::close(fd_); }

}  // namespace chunkzero
