#include "io/nvme/io_pieces.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "io/nvme/aligned_buffer.h"

namespace chunkzero {
namespace io_internal {
namespace {

const std::string& WhatOf(const std::string* what) {
  static const std::string* const kUnnamed = new std::string("a scratch file");
  return what != nullptr ? *what : *kUnnamed;
}

}  // namespace

absl::Status CheckRequest(const IoRequest& r) {
  const auto a = static_cast<int64_t>(kDirectIoAlignment);
  const char* verb = r.kind == IoKind::kRead ? "reading" : "writing";
  if (r.fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(verb, " ", WhatOf(r.what), ": no file descriptor"));
  }
  if (r.bytes > 0 && r.buffer == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(verb, " ", WhatOf(r.what), ": no buffer"));
  }
  if (r.offset < 0 || r.offset % a != 0 ||
      static_cast<int64_t>(r.bytes) % a != 0 ||
      reinterpret_cast<uintptr_t>(r.buffer) % kDirectIoAlignment != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        verb, " ", WhatOf(r.what), ": offset ", r.offset, ", ", r.bytes,
        " bytes at a buffer that is ",
        reinterpret_cast<uintptr_t>(r.buffer) % kDirectIoAlignment == 0
            ? ""
            : "not ",
        "aligned; direct I/O wants multiples of ", a));
  }
  return absl::OkStatus();
}

std::vector<Piece> Split(const std::vector<IoRequest>& requests,
                         int64_t batch) {
  std::vector<Piece> pieces;
  for (const IoRequest& r : requests) {
    for (size_t done = 0; done < r.bytes; done += kIoPieceBytes) {
      Piece p;
      p.kind = r.kind;
      p.fd = r.fd;
      p.offset = r.offset + static_cast<int64_t>(done);
      p.buffer = static_cast<char*>(r.buffer) + done;
      p.bytes = std::min(kIoPieceBytes, r.bytes - done);
      p.what = r.what;
      p.batch = batch;
      pieces.push_back(p);
    }
  }
  return pieces;
}

absl::Status PieceStatus(const Piece& p, int64_t result) {
  if (result == static_cast<int64_t>(p.bytes)) return absl::OkStatus();
  const bool read = p.kind == IoKind::kRead;
  if (result < 0) {
    const int error = static_cast<int>(-result);
    return absl::Status(
        absl::ErrnoToStatusCode(error),
        absl::StrCat(read ? "reading " : "writing ", WhatOf(p.what),
                     " at offset ", p.offset, " (", p.bytes,
                     " bytes): ", std::strerror(error)));
  }
  const std::string message = absl::StrCat(
      read ? "short read of " : "short write to ", WhatOf(p.what),
      " at offset ", p.offset, ": ", result, " of ", p.bytes, " bytes");
  return read ? absl::DataLossError(message)
              : absl::ResourceExhaustedError(
                    absl::StrCat(message, " (is the disk full?)"));
}

std::pair<int64_t, std::vector<Piece>*> Batches::Add(std::vector<Piece> pieces,
                                                     int64_t id) {
  auto batch = std::make_unique<Batch>();
  batch->outstanding = static_cast<int>(pieces.size());
  batch->pieces = std::move(pieces);
  std::vector<Piece>* out = &batch->pieces;
  batches_[id] = std::move(batch);
  return {id, out};
}

void Batches::Done(int64_t id, const absl::Status& status) {
  Batch& b = *batches_.at(id);
  --b.outstanding;
  if (b.first_error.ok() && !status.ok()) b.first_error = status;
}

void Batches::Abandon(int64_t id, int pieces, const absl::Status& status) {
  for (int i = 0; i < pieces; ++i) Done(id, status);
}

std::vector<int64_t> Batches::Ids() const {
  std::vector<int64_t> ids;
  for (const auto& [id, batch] : batches_) ids.push_back(id);
  return ids;
}

int Batches::Outstanding(int64_t id) const {
  return batches_.at(id)->outstanding;
}

absl::Status Batches::Take(int64_t id) {
  absl::Status status = std::move(batches_.at(id)->first_error);
  batches_.erase(id);
  return status;
}

}  // namespace io_internal
}  // namespace chunkzero
