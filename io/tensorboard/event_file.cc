#include "io/tensorboard/event_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/crc32c.h"
#include "base/status_macros.h"
#include "io/tensorboard/event.pb.h"

namespace chunkzero {
namespace {

constexpr uint32_t kMaskDelta = 0xa282ead8u;

void PutLittleEndian(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>(v >> 8 * i));
}

uint64_t GetLittleEndian(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    v |= uint64_t{static_cast<unsigned char>(p[i])} << 8 * i;
  }
  return v;
}

double Now() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }

}  // namespace

uint32_t MaskedCrc32c(const void* data, size_t n) {
  const uint32_t crc = Crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + kMaskDelta;
}

absl::StatusOr<std::unique_ptr<EventFileWriter>> EventFileWriter::Create(
    const std::string& dir) {
  struct stat st;
  const bool existed = ::stat(dir.c_str(), &st) == 0;
  CZ_RETURN_IF_ERROR(CreateDirectories(dir));
  absl::StatusOr<std::unique_ptr<EventFileWriter>> writer = CreateIn(dir);
  // A failure (a full disk) leaves no empty file, nor a directory made for
  // it.
  if (!writer.ok() && !existed) ::rmdir(dir.c_str());
  return writer;
}

absl::StatusOr<std::unique_ptr<EventFileWriter>> EventFileWriter::CreateIn(
    const std::string& dir) {
  char host[256] = "localhost";
  if (::gethostname(host, sizeof(host) - 1) != 0) {
    std::strcpy(host, "localhost");
  }
  // A new file, never an existing one: two writers of one process in the
  // same second (or a pid reused) get the suffixes .1, .2, ...
  const std::string base =
      JoinPath(dir, absl::StrCat("events.out.tfevents.",
                                 absl::ToUnixSeconds(absl::Now()), ".", host,
                                 ".", ::getpid()));
  std::string path = base;
  int fd_number = -1;
  for (int suffix = 1; fd_number < 0; ++suffix) {
    fd_number =
        ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_number < 0 && (errno != EEXIST || suffix > 1000)) {
      return ErrnoError("cannot create the event file", path);
    }
    if (fd_number < 0) path = absl::StrCat(base, ".", suffix);
  }
  auto fd = std::make_unique<FileDescriptor>(fd_number);
  std::unique_ptr<EventFileWriter> writer(
      new EventFileWriter(path, std::move(fd)));
  tensorboard::Event version;
  version.set_wall_time(Now());
  version.set_file_version("brain.Event:2");
  if (absl::Status s = writer->WriteRecord(version.SerializeAsString());
      !s.ok()) {
    (void)writer->Close();
    ::unlink(path.c_str());
    return s;
  }
  return writer;
}

absl::Status EventFileWriter::WriteRecord(const std::string& event) {
  if (fd_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("the event file ", path_, " is closed"));
  }
  std::string record;
  PutLittleEndian(&record, event.size(), 8);
  PutLittleEndian(&record, MaskedCrc32c(record.data(), 8), 4);
  record += event;
  PutLittleEndian(&record, MaskedCrc32c(event.data(), event.size()), 4);
  return WriteAll(fd_->get(), record.data(), record.size(), path_);
}

absl::Status EventFileWriter::WriteScalars(
    int64_t step, const std::vector<std::pair<std::string, float>>& values) {
  tensorboard::Event event;
  event.set_wall_time(Now());
  event.set_step(step);
  for (const auto& [tag, value] : values) {
    tensorboard::Summary::Value* v = event.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(value);
  }
  return WriteRecord(event.SerializeAsString());
}

absl::Status EventFileWriter::Close() {
  if (fd_ == nullptr) return absl::OkStatus();
  const absl::Status closed = fd_->Close(path_);
  fd_.reset();
  return closed;
}

absl::StatusOr<std::vector<ScalarEvent>> ReadScalarEvents(
    const std::string& path) {
  CZ_ASSIGN_OR_RETURN(const std::string bytes, ReadFileToString(path));
  std::vector<ScalarEvent> events;
  size_t at = 0;
  auto corrupt = [&](absl::string_view what) {
    return absl::DataLossError(
        absl::StrCat(path, ": the record at byte ", at, " ", what));
  };
  while (at < bytes.size()) {
    if (bytes.size() - at < 12) return corrupt("is cut short in its header");
    const uint64_t length = GetLittleEndian(&bytes[at], 8);
    if (GetLittleEndian(&bytes[at + 8], 4) != MaskedCrc32c(&bytes[at], 8)) {
      return corrupt("has a length whose CRC does not match");
    }
    if (length > bytes.size() - at - 12 ||
        bytes.size() - at - 12 - length < 4) {
      return corrupt(
          absl::StrCat("says ", length, " bytes, more than the file holds"));
    }
    const char* data = &bytes[at + 12];
    if (GetLittleEndian(data + length, 4) != MaskedCrc32c(data, length)) {
      return corrupt("has data whose CRC does not match");
    }
    tensorboard::Event event;
    if (!event.ParseFromArray(data, static_cast<int>(length))) {
      return corrupt("is not an Event");
    }
    ScalarEvent out;
    out.step = event.step();
    out.wall_time = event.wall_time();
    out.file_version = event.file_version();
    // As TensorBoard: a value without its simple_value is none.
    for (const auto& v : event.summary().value()) {
      if (v.value_case() != tensorboard::Summary::Value::kSimpleValue) continue;
      out.values.emplace_back(v.tag(), v.simple_value());
    }
    events.push_back(std::move(out));
    at += 12 + length + 4;
  }
  return events;
}

}  // namespace chunkzero
