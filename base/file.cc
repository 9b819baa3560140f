#include "base/file.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace chunkzero {

absl::Status ErrnoError(absl::string_view what, absl::string_view path) {
  return absl::ErrnoToStatus(errno, absl::StrCat(what, " ", path));
}

std::string JoinPath(absl::string_view dir, absl::string_view name) {
  if (dir.empty()) return std::string(name);
  if (dir.back() == '/') return absl::StrCat(dir, name);
  return absl::StrCat(dir, "/", name);
}

std::string DirectoryOf(absl::string_view path) {
  std::string trimmed(path);  // "a/b/"'s parent is "a", not "a/b".
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const std::string parent =
      std::filesystem::path(trimmed).parent_path().string();
  return parent.empty() ? "." : parent;
}

namespace {

// Only regular files are read: a directory cannot be, and a device or a
// pipe could block or never end.
absl::Status CheckRegularFile(const struct stat& info,
                              const std::string& path) {
  if (S_ISDIR(info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is a directory, not a file"));
  }
  if (!S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a regular file"));
  }
  return absl::OkStatus();
}

}  // namespace

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status FileDescriptor::Close(const std::string& path) {
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) return ErrnoError("cannot close", path);
  return absl::OkStatus();
}

absl::Status WriteAll(int fd, const void* data, size_t n,
                      const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t written = ::write(fd, p, n);
    if (written < 0 && errno == EINTR) continue;
    if (written < 0) return ErrnoError("cannot write", path);
    p += written;
    n -= static_cast<size_t>(written);
  }
  return absl::OkStatus();
}

absl::Status ReadAt(int fd, int64_t offset, void* data, size_t n,
                    const std::string& path) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, offset);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return ErrnoError("cannot read", path);
    if (got == 0) {
      return absl::DataLossError(absl::StrCat(path, ": file ends at byte ",
                                              offset, ", ", n,
                                              " bytes short (truncated?)"));
    }
    p += got;
    n -= static_cast<size_t>(got);
    offset += got;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path,
                                             int64_t max_bytes) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid()) return ErrnoError("cannot open", path);
  struct stat info;
  if (::fstat(fd.get(), &info) != 0) return ErrnoError("cannot stat", path);
  CZ_RETURN_IF_ERROR(CheckRegularFile(info, path));
  if (info.st_size > max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat(path, " has ", info.st_size, " bytes, more than the ",
                     max_bytes, " this reader accepts"));
  }
  // Read to the end rather than trusting st_size: the file may change, and
  // some files (in /proc) report a size of 0.
  std::string bytes;
  bytes.reserve(static_cast<size_t>(info.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t got = ::read(fd.get(), buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return ErrnoError("cannot read", path);
    if (got == 0) break;
    if (static_cast<int64_t>(bytes.size()) > max_bytes - got) {
      return absl::ResourceExhaustedError(
          absl::StrCat(path, " holds more than the ", max_bytes,
                       " bytes this reader accepts"));
    }
    bytes.append(buffer, static_cast<size_t>(got));
  }
  return bytes;
}

absl::StatusOr<int64_t> RegularFileSize(const std::string& path) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) return ErrnoError("cannot open", path);
  CZ_RETURN_IF_ERROR(CheckRegularFile(info, path));
  return static_cast<int64_t>(info.st_size);
}

absl::Status FsyncDir(const std::string& dir) {
  const std::string path = dir.empty() ? "." : dir;
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoError("cannot open directory", path);
  if (::fsync(fd.get()) != 0) return ErrnoError("cannot fsync", path);
  return fd.Close(path);
}

absl::Status CreateDirectories(const std::string& dir) {
  if (dir.empty()) return absl::OkStatus();
  std::error_code error;
  const bool created = std::filesystem::create_directories(dir, error);
  if (error == std::errc::file_exists || error == std::errc::not_a_directory) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create directory ", dir,
        ": it or one of its parents exists and is not a directory"));
  }
  if (error) {
    return absl::ErrnoToStatus(error.value(),
                               absl::StrCat("cannot create directory ", dir));
  }
  if (!created) {
    struct stat info;
    if (::stat(dir.c_str(), &info) != 0) {
      return ErrnoError("cannot stat", dir);
    }
    if (!S_ISDIR(info.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat(dir, " exists and is not a directory"));
    }
    return absl::OkStatus();
  }
  return FsyncDir(DirectoryOf(dir));
}

absl::Status CheckCanCreateDirectories(const std::string& dir) {
  if (dir.empty()) return absl::OkStatus();
  // Up from `dir` to the first path that exists.
  std::string existing = dir;
  struct stat info;
  while (::stat(existing.c_str(), &info) != 0) {
    if (errno != ENOENT) {
      if (errno == ENOTDIR) break;
      return ErrnoError("cannot stat", existing);
    }
    const std::string parent = DirectoryOf(existing);
    if (parent == existing) break;
    existing = parent;
  }
  if (::stat(existing.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create directory ", dir,
        ": it or one of its parents exists and is not a directory"));
  }
  std::string probe = JoinPath(existing, ".chunkzero-probe-XXXXXX");
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) return ErrnoError("cannot create files in", existing);
  ::close(fd);
  ::unlink(probe.c_str());
  return absl::OkStatus();
}

namespace {

// What `mode` is, for messages: "a directory", "a FIFO", ...
const char* FileTypeName(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

// Linux's own limit on the links one path may go through (ELOOP).
constexpr int kMaxSymlinkHops = 40;

}  // namespace

absl::StatusOr<std::string> ResolveFileToReplace(const std::string& path) {
  if (path.empty()) {
    return absl::InvalidArgumentError("an empty path names no file");
  }
  std::string current = path;
  for (int hop = 0; hop <= kMaxSymlinkHops; ++hop) {
    struct stat info;
    if (::lstat(current.c_str(), &info) != 0) {
      // A new file (or one under a parent that is not a directory, which
      // the caller's create reports).
      if (errno == ENOENT || errno == ENOTDIR) return current;
      return ErrnoError("cannot stat", current);
    }
    if (S_ISREG(info.st_mode)) return current;
    if (!S_ISLNK(info.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(
          current, " is ", FileTypeName(info.st_mode),
          current == path ? ""
                          : absl::StrCat(" (where the link ", path, " leads)"),
          ", not a regular file; refusing to replace or write it"));
    }
    std::string target(static_cast<size_t>(info.st_size) + 1, '\0');
    const ssize_t n = ::readlink(current.c_str(), target.data(), target.size());
    if (n < 0) return ErrnoError("cannot read the link", current);
    target.resize(static_cast<size_t>(n));
    if (target.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat(current, " is an empty symbolic link"));
    }
    current =
        target.front() == '/' ? target : JoinPath(DirectoryOf(current), target);
  }
  return absl::FailedPreconditionError(
      absl::StrCat(path, " goes through more than ", kMaxSymlinkHops,
                   " symbolic links (a loop?)"));
}

absl::Status CheckCanCreateFile(const std::string& path) {
  if (path.empty() || path.back() == '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", path, "\" names a directory, not a file"));
  }
  struct stat info;
  if (::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is a directory, not a file"));
  }
  CZ_ASSIGN_OR_RETURN(const std::string target, ResolveFileToReplace(path));
  const std::string dir = DirectoryOf(target);
  if (::stat(dir.c_str(), &info) != 0) {
    return ErrnoError("cannot write into the directory", dir);
  }
  if (!S_ISDIR(info.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir, " is not a directory, so ", target, " cannot be created"));
  }
  // access() would answer for the real uid and miss read-only mounts; a
  // probe file answers exactly.
  std::string probe = JoinPath(dir, ".chunkzero-probe-XXXXXX");
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) return ErrnoError("cannot create files in", dir);
  ::close(fd);
  ::unlink(probe.c_str());
  return CheckCanReplaceOrRemove(target);
}

namespace {

// The inode flags (FS_IOC_GETFLAGS) of what `path` names, without following
// a link or blocking; 0 where the file system keeps none.
unsigned InodeFlags(const std::string& path, bool directory) {
  const int fd =
      ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC |
                               (directory ? O_DIRECTORY : 0));
  if (fd < 0) return 0;
  int flags = 0;
  if (::ioctl(fd, FS_IOC_GETFLAGS, &flags) != 0) flags = 0;
  ::close(fd);
  return static_cast<unsigned>(flags);
}

constexpr unsigned kUnchangeable = FS_IMMUTABLE_FL | FS_APPEND_FL;

}  // namespace

absl::Status CheckCanReplaceOrRemove(const std::string& path) {
  struct stat entry;
  if (::lstat(path.c_str(), &entry) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return absl::OkStatus();
    return ErrnoError("cannot stat", path);
  }
  if (!S_ISREG(entry.st_mode) && !S_ISLNK(entry.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is ", FileTypeName(entry.st_mode),
                     ", not a regular file; refusing to replace or remove it"));
  }
  const std::string dir = DirectoryOf(path);
  struct stat parent;
  if (::stat(dir.c_str(), &parent) != 0) return ErrnoError("cannot stat", dir);
  if (InodeFlags(dir, /*directory=*/true) & kUnchangeable) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot replace or remove ", path, ": its directory ", dir,
                     " is immutable or append-only (lsattr shows it)"));
  }
  if (S_ISREG(entry.st_mode) &&
      (InodeFlags(path, /*directory=*/false) & kUnchangeable)) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot replace or remove ", path,
                     ": it is immutable or append-only (lsattr shows it)"));
  }
  const uid_t me = ::geteuid();
  if ((parent.st_mode & S_ISVTX) != 0 && me != 0 && entry.st_uid != me &&
      parent.st_uid != me) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot replace or remove ", path, ": it belongs to uid ", entry.st_uid,
        " and its directory ", dir,
        " is sticky, where only the file's owner, the directory's owner "
        "(uid ",
        parent.st_uid, ") or root may (this process runs as uid ", me, ")"));
  }
  return absl::OkStatus();
}

namespace {

// Opens `path`, which ResolveFileToReplace found to be a regular file or
// nothing, for writing, never following a link or blocking (a FIFO swapped
// in since is refused, not waited on). `flags` adds O_TRUNC or O_EXCL.
absl::StatusOr<std::unique_ptr<FileDescriptor>> OpenRegularForWriting(
    const std::string& path, int flags) {
  auto fd = std::make_unique<FileDescriptor>(::open(
      path.c_str(),
      O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | flags, 0644));
  if (!fd->valid()) return ErrnoError("cannot create", path);
  struct stat info;
  if (::fstat(fd->get(), &info) != 0) return ErrnoError("cannot stat", path);
  if (!S_ISREG(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is ", FileTypeName(info.st_mode),
                     ", not a regular file; refusing to write it"));
  }
  // Writes to a regular file never block anyway; clear the flag so that
  // nothing below has to handle EAGAIN.
  const int status_flags = ::fcntl(fd->get(), F_GETFL);
  if (status_flags < 0 ||
      ::fcntl(fd->get(), F_SETFL, status_flags & ~O_NONBLOCK) != 0) {
    return ErrnoError("cannot set the flags of", path);
  }
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<FileDescriptor>> CreateOrTruncateFile(
    const std::string& path) {
  CZ_ASSIGN_OR_RETURN(const std::string target, ResolveFileToReplace(path));
  // Truncated only once it is known to be a regular file.
  CZ_ASSIGN_OR_RETURN(std::unique_ptr<FileDescriptor> fd,
                      OpenRegularForWriting(target, 0));
  if (::ftruncate(fd->get(), 0) != 0) {
    return ErrnoError("cannot truncate", target);
  }
  return fd;
}

absl::Status WriteFileAtomically(const std::string& path,
                                 const FileWriter& write) {
  CZ_ASSIGN_OR_RETURN(const std::string target, ResolveFileToReplace(path));
  const std::string tmp = target + ".tmp";
  // A temporary that is something else than a file (a FIFO, a link a
  // crash could not have left) is not ours to truncate or remove.
  struct stat info;
  if (::lstat(tmp.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(tmp, " is ", FileTypeName(info.st_mode),
                     ", not a regular file; it is where ", target,
                     " is written first: move it away"));
  }
  absl::StatusOr<std::unique_ptr<FileDescriptor>> opened =
      OpenRegularForWriting(tmp, O_TRUNC);
  if (!opened.ok()) return opened.status();
  FileDescriptor& fd = **opened;
  absl::Status status = write(fd.get(), tmp);
  if (status.ok() && ::fsync(fd.get()) != 0) {
    status = ErrnoError("cannot fsync", tmp);
  }
  const absl::Status closed = fd.Close(tmp);
  if (status.ok()) status = closed;
  if (status.ok() && std::rename(tmp.c_str(), target.c_str()) != 0) {
    status = ErrnoError(absl::StrCat("cannot rename ", tmp, " to"), target);
  }
  if (!status.ok()) {
    ::unlink(tmp.c_str());
    return status;
  }
  return FsyncDir(DirectoryOf(target));
}

}  // namespace chunkzero
