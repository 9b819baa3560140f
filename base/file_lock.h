// FileLock: an exclusive advisory lock (flock) on a file, held while the
// object lives, so that two processes never write one directory at once.
// The kernel drops the lock when the holder exits, however it exits, so a
// lock file left behind by a crash never blocks a later run.
//
//   CZ_ASSIGN_OR_RETURN(std::unique_ptr<FileLock> lock,
//                       FileLock::TryAcquire(dir + "/lock"));
//   ... write into dir ...
//
// The holder's pid is written into the file, for the message another
// process gets. flock locks are per open file, so a second TryAcquire in
// the same process fails too. Not for network file systems that ignore
// flock.
#ifndef CHUNKZERO_BASE_FILE_LOCK_H_
#define CHUNKZERO_BASE_FILE_LOCK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace chunkzero {

class FileLock {
 public:
  // Creates `path` if need be and locks it without waiting.
  // FailedPrecondition naming the path and the holder's pid if another
  // open file (another process, or another FileLock) holds it; errno's code
  // and text if the file cannot be opened.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<FileLock>> TryAcquire(
      const std::string& path);

  ~FileLock();  // Releases the lock (the file stays).
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  FileLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  const std::string path_;
  const int fd_;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_BASE_FILE_LOCK_H_
