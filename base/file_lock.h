// FileLock: an advisory lock (flock) on a file or a directory, exclusive or
// shared, held while the object lives, so that two processes never write
// one directory at once, or a reader never sees a writer's half-done work.
// The kernel drops the lock when the holder exits, however it exits, so a
// lock left behind by a crash never blocks a later run.
//
//   CZ_ASSIGN_OR_RETURN(std::unique_ptr<FileLock> lock,
//                       FileLock::TryAcquire(dir + "/lock"));
//   ... write into dir ...
//
//   // Readers share a directory's lock; a writer takes it alone. Wait at
//   // most 5 s for it.
//   CZ_ASSIGN_OR_RETURN(std::unique_ptr<FileLock> reading,
//                       FileLock::AcquireDirectory(dir, LockMode::kShared,
//                                                  absl::Seconds(5)));
//
// A lock file is created if need be, and an exclusive holder writes its pid
// into it, for the message another process gets. A directory is locked
// itself: nothing is created (so a read-only directory can be locked), and
// no pid is recorded. flock locks are per open file, so a second lock taken in
// the same process conflicts like another process's. Not for network file
// systems that ignore flock (there, lock calls fail with the errno's code).
//
// Thread-safety: the functions share no state; a FileLock is immutable.
#ifndef CHUNKZERO_BASE_FILE_LOCK_H_
#define CHUNKZERO_BASE_FILE_LOCK_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace chunkzero {

enum class LockMode {
  kExclusive,  // One holder, and no shared holder.
  kShared,     // Any number of holders, and no exclusive holder.
};

class FileLock {
 public:
  // Locks the file `path` (created if need be) in `mode` without waiting.
  // FailedPrecondition naming the path (and the pid an exclusive holder
  // recorded) if another open file holds a lock that conflicts; errno's
  // code and text if `path` cannot be opened (a directory cannot) or locked.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<FileLock>> TryAcquire(
      const std::string& path, LockMode mode = LockMode::kExclusive);

  // As TryAcquire, but while the lock conflicts, tries again (at intervals
  // from 1 ms growing to 50 ms) until `timeout` has passed: then
  // DeadlineExceeded naming the path, the time waited and, if recorded, the
  // holder's pid (a zero timeout: TryAcquire). Never waits much longer than
  // `timeout`.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<FileLock>> Acquire(
      const std::string& path, LockMode mode, absl::Duration timeout);

  // As Acquire, for the directory `dir` itself: nothing is created, and a
  // missing directory is NotFound.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<FileLock>>
  AcquireDirectory(const std::string& dir, LockMode mode,
                   absl::Duration timeout);

  // Removes the lock file while it is held (a directory lock: nothing), for
  // a holder that leaves nothing behind. A process that opened the file
  // before and locks it after sees that the path no longer names what it
  // locked, and tries again on what the path names now.
  [[nodiscard]] absl::Status Remove();

  ~FileLock();  // Releases the lock (the file stays).
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  const std::string& path() const { return path_; }
  LockMode mode() const { return mode_; }

 private:
  FileLock(std::string path, LockMode mode, int fd)
      : path_(std::move(path)), mode_(mode), fd_(fd) {}

  [[nodiscard]] static absl::StatusOr<std::unique_ptr<FileLock>> Lock(
      const std::string& path, bool directory, LockMode mode,
      absl::Duration timeout);
  // One open and flock, trying until `deadline`; `timeout` is for the
  // message.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<FileLock>> LockOnce(
      const std::string& path, bool directory, LockMode mode,
      absl::Time deadline, absl::Duration timeout);

  const std::string path_;
  const LockMode mode_;
  const int fd_;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_BASE_FILE_LOCK_H_
