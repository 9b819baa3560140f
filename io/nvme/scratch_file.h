// ScratchFile: disk space for the NVMe tier, opened for direct I/O
// (O_DIRECT: no page cache, so the bytes do not come back as host memory)
// in a directory the user names.
//
//   CZ_ASSIGN_OR_RETURN(std::unique_ptr<ScratchFile> file,
//                       ScratchFile::Create("/mnt/nvme", bytes));
//   ... engine->Submit({{IoKind::kWrite, file->fd(), 0, buf.data(), n}}) ...
//
// The file has no name (O_TMPFILE; where the filesystem lacks it, a named
// file unlinked right after it is opened): nothing is left in the
// directory however the process ends, SIGKILL included, so no stale set
// from an earlier run can exist to be trusted. Its bytes are reserved up
// front (fallocate), so a disk too small shows now, not at some write.
//
// Errors name the directory and the bytes: NotFound for a missing
// directory, FailedPrecondition for a path that is not one, is read-only,
// is memory (a tmpfs or ramfs: it would spend the host memory this tier
// saves) or has no direct I/O, ResourceExhausted when the free space is
// short of `bytes`; others with errno's text.
//
// Thread-safety: the descriptor may be read and written from any thread
// (pread/pwrite at offsets); Create is thread-safe.
#ifndef CHUNKZERO_IO_NVME_SCRATCH_FILE_H_
#define CHUNKZERO_IO_NVME_SCRATCH_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace chunkzero {

// The free bytes of the filesystem holding `dir` (for an unprivileged
// process), or the errors above for a directory that cannot hold scratch
// files at all. Planning calls it before step 1.
[[nodiscard]] absl::StatusOr<int64_t> ScratchDirectoryFreeBytes(
    const std::string& dir);

class ScratchFile {
 public:
  // A new file of `bytes` bytes (a multiple of kDirectIoAlignment) in
  // `dir`; see above.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ScratchFile>> Create(
      const std::string& dir, int64_t bytes);
  ~ScratchFile();
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  int fd() const { return fd_; }
  int64_t size() const { return size_; }
  // Appends `bytes` (a multiple of kDirectIoAlignment) reserved as Create
  // reserves them, returning where they start: how a tier grows as it
  // learns what it keeps. ResourceExhausted naming the bytes when the disk
  // cannot hold them (the file keeps its size).
  [[nodiscard]] absl::StatusOr<int64_t> Grow(int64_t bytes);
  // "a scratch file in DIR", for messages.
  const std::string& description() const { return description_; }

 private:
  ScratchFile(int fd, std::string description)
      : fd_(fd), size_(0), description_(std::move(description)) {}
  int fd_;
  int64_t size_;
  std::string description_;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_IO_NVME_SCRATCH_FILE_H_
