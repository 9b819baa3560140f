// POSIX file helpers whose errors are absl::Status values naming the path and
// carrying errno's text, so that no file problem escapes as an exception or
// an abort.
//
//   CZ_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
//   CZ_RETURN_IF_ERROR(CheckCanCreateFile("/runs/a/weights.safetensors"));
//   CZ_RETURN_IF_ERROR(WriteFileAtomically(path, [&](int fd, const auto& p) {
//     return WriteAll(fd, bytes.data(), bytes.size(), p);
//   }));
//
// Thread-safety: the functions share no state; errno is per thread.
#ifndef CHUNKZERO_BASE_FILE_H_
#define CHUNKZERO_BASE_FILE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace chunkzero {

// The status for a failed system call: errno's code (ENOENT is NotFound,
// EACCES PermissionDenied, ENOSPC ResourceExhausted, ...) and the message
// "<what> <path>: <strerror(errno)>". Reads errno, so call it right after
// the failing call.
[[nodiscard]] absl::Status ErrnoError(absl::string_view what,
                                      absl::string_view path);

// `dir`/`name`, with one slash between them ("" + name is name).
std::string JoinPath(absl::string_view dir, absl::string_view name);

// The directory part of `path` ("." for a bare file name).
std::string DirectoryOf(absl::string_view path);

// Owns a file descriptor (closed on destruction). Close() reports the error
// a destructor would have to drop.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor();

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

  // Closes the descriptor; `path` names it in the error.
  [[nodiscard]] absl::Status Close(const std::string& path);

 private:
  int fd_;
};

// Writes all `n` bytes (retrying short writes and EINTR).
[[nodiscard]] absl::Status WriteAll(int fd, const void* data, size_t n,
                                    const std::string& path);

// Reads exactly `n` bytes at `offset`; DataLoss if the file ends first.
[[nodiscard]] absl::Status ReadAt(int fd, int64_t offset, void* data, size_t n,
                                  const std::string& path);

// The whole of the regular file `path`. NotFound if it does not exist,
// InvalidArgument if it is a directory or not a regular file (a device, a
// pipe: reading those could block or never end), ResourceExhausted if it
// holds more than `max_bytes`, errno's code for other failures.
[[nodiscard]] absl::StatusOr<std::string> ReadFileToString(
    const std::string& path,
    int64_t max_bytes = std::numeric_limits<int64_t>::max());

// The size of the regular file `path`, without reading it (to plan before a
// read): the errors ReadFileToString would give for the same file.
[[nodiscard]] absl::StatusOr<int64_t> RegularFileSize(const std::string& path);

// Makes the directory's entries (a rename, a new file) durable.
[[nodiscard]] absl::Status FsyncDir(const std::string& dir);

// Creates `dir` and its missing parents; a new directory's own entry is
// fsync'ed too, or a crash could lose it. FailedPrecondition if `dir` or a
// parent exists but is not a directory.
[[nodiscard]] absl::Status CreateDirectories(const std::string& dir);

// Checks, without creating anything, that CreateDirectories(dir) could make
// `dir` and files could then be created in it: `dir` is a directory, or its
// nearest existing ancestor is one; a probe file is made and removed in
// whichever exists. FailedPrecondition "cannot create directory DIR: it or
// one of its parents exists and is not a directory" as CreateDirectories
// says it, errno's code and text for the probe.
[[nodiscard]] absl::Status CheckCanCreateDirectories(const std::string& dir);

// The file a write to `path` replaces: `path` itself, or, where `path` is a
// symbolic link (or a chain of them), the file the last link names, so that
// the link stays and its target gets the new contents. The result need not
// exist yet. FailedPrecondition, naming the file and its type, when what is
// there is not a regular file: a directory, a device, a FIFO or a socket is
// never replaced or written (renaming over /dev/null would replace the
// device; opening a FIFO blocks until a reader comes).
[[nodiscard]] absl::StatusOr<std::string> ResolveFileToReplace(
    const std::string& path);

// Checks, before any work is done, that a file can later be created at
// `path`: what is there is a regular file or nothing (ResolveFileToReplace,
// following symbolic links), this process may create files in its
// directory (a probe file is created there and removed) and replace what is
// there (CheckCanReplaceOrRemove of the target). NotFound for a
// missing directory, FailedPrecondition for a path that is a directory,
// another kind of file, or whose parent is not a directory, errno's code
// otherwise.
[[nodiscard]] absl::Status CheckCanCreateFile(const std::string& path);

// Checks, before any work is done, that this process may later replace the
// directory entry `path` (rename a new file over it) or remove it, as the
// user it runs as: nothing is there, or a regular file or a symbolic link
// (the link itself is what is replaced or removed); its directory is not
// immutable or append-only, nor is the file (chattr +i, +a); and where the
// directory is sticky (/tmp's mode 1777), the file or the directory belongs
// to this process's effective user, or that user is root. FailedPrecondition
// naming the entry and its type for anything else (a FIFO, a directory, a
// device: never replaced or unlinked), PermissionDenied naming the owner
// and the rule. The directory's own write permission is for
// CheckCanCreateFile's probe to show.
[[nodiscard]] absl::Status CheckCanReplaceOrRemove(const std::string& path);

// Opens `path` for writing from its start, creating it or truncating it,
// without blocking: the errors of ResolveFileToReplace (a FIFO or a device
// is refused before it is opened), then errno's.
[[nodiscard]] absl::StatusOr<std::unique_ptr<FileDescriptor>>
CreateOrTruncateFile(const std::string& path);

// Writes `path` so that a crash leaves the old file or the whole new one:
// `write` fills "<target>.tmp", which is fsync'ed and renamed over the
// target, and the directory is fsync'ed. The target is
// ResolveFileToReplace(path): a symbolic link stays a link and its target is
// replaced (beside it), and what is not a regular file is refused untouched.
// The temporary is removed on failure.
using FileWriter =
    std::function<absl::Status(int fd, const std::string& tmp_path)>;
[[nodiscard]] absl::Status WriteFileAtomically(const std::string& path,
                                               const FileWriter& write);

}  // namespace chunkzero

#endif  // CHUNKZERO_BASE_FILE_H_
