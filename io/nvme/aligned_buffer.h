// AlignedBuffer: host memory that direct I/O (O_DIRECT) reads into and
// writes from: its address and size are multiples of kDirectIoAlignment.
//
//   CZ_ASSIGN_OR_RETURN(AlignedBuffer buf, AlignedBuffer::Create(bytes));
//   float* f = buf.as<float>();   // buf.size() >= bytes, rounded up
//
// Thread-safety: a buffer is used by one thread at a time (or handed to an
// IoEngine, which owns its bytes until the request completes).
#ifndef CHUNKZERO_IO_NVME_ALIGNED_BUFFER_H_
#define CHUNKZERO_IO_NVME_ALIGNED_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace chunkzero {

// What O_DIRECT asks of a buffer's address, a file offset and a length on
// the filesystems we meet (a 4 KiB logical block; 512 B devices accept it).
inline constexpr size_t kDirectIoAlignment = 4096;

// `bytes` rounded up to a multiple of kDirectIoAlignment.
inline constexpr int64_t RoundUpToDirectIo(int64_t bytes) {
  return (bytes + static_cast<int64_t>(kDirectIoAlignment) - 1) /
         static_cast<int64_t>(kDirectIoAlignment) *
         static_cast<int64_t>(kDirectIoAlignment);
}

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // `bytes` rounded up to the alignment, zeroed. ResourceExhausted naming
  // the size when the allocation fails.
  [[nodiscard]] static absl::StatusOr<AlignedBuffer> Create(size_t bytes) {
    AlignedBuffer b;
    b.size_ =
        static_cast<size_t>(RoundUpToDirectIo(static_cast<int64_t>(bytes)));
    if (b.size_ == 0) return b;
    void* p = std::aligned_alloc(kDirectIoAlignment, b.size_);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot allocate ", b.size_, " bytes of aligned I/O buffer"));
    }
    std::memset(p, 0, b.size_);
    b.data_.reset(static_cast<char*>(p));
    return b;
  }

  char* data() const { return data_.get(); }
  size_t size() const { return size_; }
  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(data_.get());
  }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> data_;
  size_t size_ = 0;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_IO_NVME_ALIGNED_BUFFER_H_
