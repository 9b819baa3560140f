#include "base/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/file.h"

namespace chunkzero {
namespace {

// Opens `path` to lock it: a file read-write (created if need be), a
// directory read-only. Returns -1 with errno set on failure.
int OpenToLock(const std::string& path, bool directory) {
  return directory ? ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                   : ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
}

// One flock attempt: 0, or the errno (EWOULDBLOCK: another open file holds
// a conflicting lock).
int TryLock(int fd, LockMode mode) {
  const int operation =
      (mode == LockMode::kExclusive ? LOCK_EX : LOCK_SH) | LOCK_NB;
  int result;
  do {
    result = ::flock(fd, operation);
  } while (result != 0 && errno == EINTR);
  return result == 0 ? 0 : errno;
}

// " (pid N)" if an exclusive holder of the file recorded its pid, else "".
std::string Holder(const std::string& path, bool directory) {
  if (directory) return "";
  absl::StatusOr<std::string> holder = ReadFileToString(path, 64);
  const std::string pid =
      holder.ok() ? std::string(absl::StripAsciiWhitespace(*holder)) : "";
  return pid.empty() ? "" : absl::StrCat(" (pid ", pid, ")");
}

// Whether `fd` is still the file `path` names: a holder that removed its
// lock file (FileLock::Remove) between our open and our flock leaves us a
// lock on a file nobody else can find.
bool StillNamed(int fd, const std::string& path) {
  struct stat held, named;
  return ::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 &&
         held.st_dev == named.st_dev && held.st_ino == named.st_ino;
}

}  // namespace

absl::StatusOr<std::unique_ptr<FileLock>> FileLock::TryAcquire(
    const std::string& path, LockMode mode) {
  return Acquire(path, mode, absl::ZeroDuration());
}

absl::StatusOr<std::unique_ptr<FileLock>> FileLock::Acquire(
    const std::string& path, LockMode mode, absl::Duration timeout) {
  return Lock(path, /*directory=*/false, mode, timeout);
}

absl::StatusOr<std::unique_ptr<FileLock>> FileLock::AcquireDirectory(
    const std::string& dir, LockMode mode, absl::Duration timeout) {
  return Lock(dir, /*directory=*/true, mode, timeout);
}

absl::StatusOr<std::unique_ptr<FileLock>> FileLock::Lock(
    const std::string& path, bool directory, LockMode mode,
    absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (int attempt = 0;; ++attempt) {
    absl::StatusOr<std::unique_ptr<FileLock>> lock =
        LockOnce(path, directory, mode, deadline, timeout);
    if (!lock.ok() || directory || StillNamed((*lock)->fd_, path) ||
        attempt >= 100) {
      return lock;
    }
  }
}

absl::Status FileLock::Remove() {
  struct stat held;
  if (::fstat(fd_, &held) == 0 && S_ISDIR(held.st_mode)) {
    return absl::OkStatus();
  }
  if (::unlink(path_.c_str()) == 0 || errno == ENOENT) {
    return absl::OkStatus();
  }
  return ErrnoError("removing the lock file", path_);
}

absl::StatusOr<std::unique_ptr<FileLock>> FileLock::LockOnce(
    const std::string& path, bool directory, LockMode mode, absl::Time deadline,
    absl::Duration timeout) {
  const int fd = OpenToLock(path, directory);
  if (fd < 0) {
    return ErrnoError(
        directory ? "cannot open directory to lock" : "cannot open lock file",
        path);
  }
  absl::Duration pause = absl::Milliseconds(1);
  for (;;) {
    const int error = TryLock(fd, mode);
    if (error == 0) break;
    if (error != EWOULDBLOCK) {
      ::close(fd);
      errno = error;
      return ErrnoError("cannot lock", path);
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      ::close(fd);
      if (timeout <= absl::ZeroDuration()) {
        return absl::FailedPreconditionError(absl::StrCat(
            path, " is locked by another process", Holder(path, directory)));
      }
      return absl::DeadlineExceededError(absl::StrCat(
          path, " is still locked by another process", Holder(path, directory),
          " after ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(std::min(pause, deadline - now));
    pause = std::min(2 * pause, absl::Milliseconds(50));
  }
  // Ours now: an exclusive holder of a file records who holds it, for the
  // message another process gets.
  if (mode == LockMode::kExclusive && !directory) {
    const std::string pid = absl::StrCat(::getpid(), "\n");
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) !=
                                       static_cast<ssize_t>(pid.size())) {
      const absl::Status status = ErrnoError("cannot write lock file", path);
      ::close(fd);
      return status;
    }
  }
  return std::unique_ptr<FileLock>(new FileLock(path, mode, fd));
}

FileLock::~FileLock() {
  // Closing the last descriptor of the open file releases the flock.
  ::close(fd_);
}

}  // namespace chunkzero
