#include "base/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/file.h"

namespace chunkzero {

absl::StatusOr<std::unique_ptr<FileLock>> FileLock::TryAcquire(
    const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot open lock file", path);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    ::close(fd);
    if (error != EWOULDBLOCK) {
      errno = error;
      return ErrnoError("cannot lock", path);
    }
    absl::StatusOr<std::string> holder = ReadFileToString(path, 64);
    const std::string pid =
        holder.ok() ? std::string(absl::StripAsciiWhitespace(*holder)) : "";
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is locked by another process",
                     pid.empty() ? "" : absl::StrCat(" (pid ", pid, ")")));
  }
  // Ours now: record who holds it, for the message another process gets.
  const std::string pid = absl::StrCat(::getpid(), "\n");
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) !=
                                     static_cast<ssize_t>(pid.size())) {
    const absl::Status status = ErrnoError("cannot write lock file", path);
    ::close(fd);
    return status;
  }
  return std::unique_ptr<FileLock>(new FileLock(path, fd));
}

FileLock::~FileLock() {
  // Closing the last descriptor of the open file releases the flock.
  ::close(fd_);
}

}  // namespace chunkzero
